// Worker::start on libuv's pool or on a lane, and Lane: a handle's own thread (see common.h).
#include "common.h"

namespace outbox_node {
namespace {

// Runs a Worker on libuv's pool: the Napi::AsyncWorker around it, deleted (with it) once settled.
class PoolRunner : public Napi::AsyncWorker {
  public:
    PoolRunner(Napi::Env env, Worker *w) : Napi::AsyncWorker(env, w->name()), w_(w) {}
    ~PoolRunner() override { delete w_; }

  private:
    void Execute() override { w_->execute(); }
    void OnOK() override { w_->settle(Env()); }
    void OnError(const Napi::Error &e) override { w_->reject(e); }
    Worker *w_;
};

void gate_finalized(napi_env, void *data, void *) {
    auto *gate = static_cast<std::shared_ptr<TsfnGate> *>(data);
    {
        std::lock_guard<std::mutex> lock((*gate)->m);
        (*gate)->finalized = true;
    }
    delete gate;
}

} // namespace

Napi::Promise Worker::start() {
    Napi::Promise p = deferred_.Promise();
    Napi::Env env = p.Env();
    auto *runner = new PoolRunner(env, this);
    runner->Queue();
    return p;
}

Napi::Promise Worker::start(Napi::Env env, Lane &lane) {
    Napi::Promise p = deferred_.Promise();
    lane.post(env, this);
    return p;
}

Lane::Lane(Napi::Env env) : env_(env) {
    auto *fin = new std::shared_ptr<TsfnGate>(gate_);
    napi_status st = napi_create_threadsafe_function(env, nullptr, nullptr, Napi::String::New(env, "outbox_lane"), 0,
                                                     1, fin, gate_finalized, this, call_js, &tsfn_);
    if (st != napi_ok) {
        delete fin;
        throw Napi::Error::New(env);
    }
    // The scope the results settle in, so the promise's continuations run right after (as after
    // an async work item's completion), not at the next callback from elsewhere.
    Napi::Object resource = Napi::Object::New(env);
    resource_ = Napi::Persistent(resource);
    napi_async_init(env, resource, Napi::String::New(env, "outbox_lane"), &async_context_);
    napi_unref_threadsafe_function(env, tsfn_); // an idle lane never keeps the process alive
    try {
        thread_ = std::thread([this] { loop(); });
    } catch (...) {
        napi_release_threadsafe_function(tsfn_, napi_tsfn_release);
        napi_async_destroy(env, async_context_);
        throw;
    }
}

void Lane::post(Napi::Env env, Worker *w) {
    if (in_flight_++ == 0) {
        napi_ref_threadsafe_function(env, tsfn_);
    }
    {
        std::lock_guard<std::mutex> lock(m_);
        pending_ = w;
    }
    cv_.notify_one();
}

void Lane::stop() {
    if (!thread_.joinable()) {
        return;
    }
    {
        std::lock_guard<std::mutex> lock(m_);
        stopping_ = true;
    }
    cv_.notify_one();
    thread_.join();
    std::lock_guard<std::mutex> lock(gate_->m);
    if (!gate_->finalized) {
        napi_release_threadsafe_function(tsfn_, napi_tsfn_release);
        napi_async_destroy(env_, async_context_);
        resource_.Reset();
    }
}

// The next call, once posted; nullptr once stopping.
Worker *Lane::take() {
    std::unique_lock<std::mutex> lock(m_);
    cv_.wait(lock, [this] { return pending_ != nullptr || stopping_; });
    return std::exchange(pending_, nullptr);
}

void Lane::loop() {
    while (Worker *w = take()) {
        w->execute();
        std::lock_guard<std::mutex> lock(gate_->m);
        if (gate_->finalized || napi_call_threadsafe_function(tsfn_, w, napi_tsfn_nonblocking) != napi_ok) {
            // The environment is being torn down: its promise and references are gone with it
            // (deleting w would touch them from this thread), so w is left.
            continue;
        }
    }
}

void Lane::call_js(napi_env env, napi_value, void *context, void *data) {
    auto *w = static_cast<Worker *>(data);
    if (env == nullptr) {
        return; // teardown: as in loop()
    }
    auto *lane = static_cast<Lane *>(context);
    if (--lane->in_flight_ == 0) {
        napi_unref_threadsafe_function(env, lane->tsfn_);
    }
    Napi::HandleScope hs(Napi::Env{env});
    napi_callback_scope scope = nullptr;
    napi_open_callback_scope(env, lane->resource_.Value(), lane->async_context_, &scope);
    w->settle(Napi::Env(env));
    delete w;
    napi_close_callback_scope(env, scope);
}

Lane &lane_of(Napi::Env env, Handle<outbox_db> *h) {
    if (!h->lane) {
        h->lane = std::make_unique<Lane>(env);
    }
    return *h->lane;
}

} // namespace outbox_node
