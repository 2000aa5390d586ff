// outbox_relay_*: moves committed events to RabbitMQ.
#include "common.h"

#include <thread>

namespace outbox_node {
namespace {

// relay_new(cfg) -> outbox_relay; connects lazily (first step), so no I/O here.
Napi::Value RelayNew(const Napi::CallbackInfo &info) {
    auto *cfg = unwrap<outbox_config>(info, 0, Use::read);
    outbox_relay *relay = nullptr;
    check(info.Env(), outbox_relay_new(&relay, cfg->ptr));
    return wrap(info.Env(), relay);
}

Napi::Value RelayFree(const Napi::CallbackInfo &info) {
    if (auto *h = unwrap<outbox_relay>(info, 0, Use::release)) {
        h->release();
        h->logger.reset();
    }
    return info.Env().Undefined();
}

// relay_set_logger(relay, fn(level, message) | null): fn runs on the main thread.
Napi::Value RelaySetLogger(const Napi::CallbackInfo &info) {
    set_logger(info, unwrap<outbox_relay>(info, 0), outbox_relay_set_logger);
    return info.Env().Undefined();
}

Napi::Object stats_object(Napi::Env env, const outbox_relay_stats &s) {
    Napi::Object o = Napi::Object::New(env);
    auto num = [&](const char *k, int64_t v) { o.Set(k, Napi::Number::New(env, static_cast<double>(v))); };
    num("claimed", s.claimed);
    num("published", s.published);
    num("failed", s.failed);
    num("dead", s.dead);
    num("heldBack", s.held_back);
    num("unroutable", s.unroutable);
    num("nacked", s.nacked);
    num("unconfirmed", s.unconfirmed);
    num("claimUs", s.claim_us);
    num("publishUs", s.publish_us);
    num("markUs", s.mark_us);
    num("totalUs", s.total_us);
    o.Set("blocked", Napi::Boolean::New(env, s.blocked != 0));
    return o;
}

// relay_step(relay) -> Promise<stats>: { claimed, published, failed, dead, heldBack, ..., blocked }
using StatsCall = outbox_status (*)(outbox_relay *, outbox_relay_stats *);
class StepWorker : public Worker {
  public:
    StepWorker(Napi::Env env, outbox_relay *relay, StatsCall call, const char *name)
        : Worker(env, name), relay_(relay), call_(call) {
        outbox_relay_stats_init(&stats_);
    }

  protected:
    outbox_status run() override { return call_(relay_, &stats_); }
    Napi::Value result(Napi::Env env) override { return stats_object(env, stats_); }

  private:
    outbox_relay *relay_;
    StatsCall call_;
    outbox_relay_stats stats_{};
};

Napi::Value RelayStep(const Napi::CallbackInfo &info) {
    auto *h = unwrap<outbox_relay>(info, 0);
    auto *w = new StepWorker(info.Env(), h->ptr, outbox_relay_step, "outbox_relay_step");
    w->hold(info[0], h);
    return w->start();
}

// relay_run(relay) -> Promise<void>, settled after relay_stop(). outbox_relay_run() blocks for
// as long as the relay runs, so it gets a thread of its own rather than one of libuv's pool
// (which fs, dns and crypto share); the result comes back through a thread-safe function,
// which also keeps the event loop alive while the relay runs.
struct RunJob {
    std::shared_ptr<TsfnGate> gate = std::make_shared<TsfnGate>();
    Napi::Promise::Deferred deferred;
    Napi::Reference<Napi::Value> ref;
    Handle<outbox_relay> *handle = nullptr;
    Napi::ThreadSafeFunction tsfn;
    std::thread thread;
    outbox_status status = OUTBOX_OK;
    std::string message;
    explicit RunJob(Napi::Env env) : deferred(Napi::Promise::Deferred::New(env)) {}
};

void settle_run(Napi::Env env, Napi::Function, RunJob *job) {
    if (env == nullptr) {
        // Environment teardown: the handle's before_destroy stops and joins the thread, and may
        // still need the job; leave it (and everything of the environment) alone.
        job->ref.SuppressDestruct();
        return;
    }
    std::unique_ptr<RunJob> owned(job);
    if (job->thread.joinable()) {
        job->thread.join(); // it has nothing left to do but return
    }
    --job->handle->busy;
    job->handle->before_destroy = nullptr;
    job->ref.Reset();
    try {
        Napi::HandleScope scope(env);
        if (job->status != OUTBOX_OK) {
            job->deferred.Reject(status_error(env, job->status, job->message).Value());
        } else {
            job->deferred.Resolve(env.Undefined());
        }
    } catch (const Napi::Error &) {
        // a terminating environment (worker thread): nobody waits for the promise any more
    }
}

Napi::Value RelayRun(const Napi::CallbackInfo &info) {
    Napi::Env env = info.Env();
    auto *h = unwrap<outbox_relay>(info, 0);
    auto job = std::make_unique<RunJob>(env);
    job->ref = Napi::Persistent(info[0]);
    job->handle = h;
    auto *fin = new std::shared_ptr<TsfnGate>(job->gate);
    job->tsfn = Napi::ThreadSafeFunction::New(env, Napi::Function::New(env, [](const Napi::CallbackInfo &) {}),
                                              "outbox_relay_run", 0, 1, static_cast<void *>(nullptr),
                                              TsfnGate::on_finalize, fin);
    Napi::Promise promise = job->deferred.Promise();
    RunJob *raw = job.get();
    outbox_relay *relay = h->ptr;
    ++h->busy;
    try {
        raw->thread = std::thread([raw, relay] {
            raw->status = outbox_relay_run(relay);
            if (raw->status != OUTBOX_OK) {
                raw->message = outbox_last_error();
            }
            // raw is deleted by settle_run: copy what is needed after the call first.
            Napi::ThreadSafeFunction tsfn = raw->tsfn;
            std::shared_ptr<TsfnGate> gate = raw->gate;
            std::lock_guard<std::mutex> lock(gate->m);
            if (!gate->finalized) {
                tsfn.BlockingCall(raw, settle_run);
                tsfn.Release();
            }
        });
    } catch (const std::system_error &e) {
        --h->busy;
        raw->tsfn.Release();
        throw status_error(env, OUTBOX_ERR_INTERNAL, std::string("cannot start the relay thread: ") + e.what());
    }
    // At environment teardown the handle is finalized even though the job holds a reference:
    // stop the relay and wait for its thread first.
    h->before_destroy = [raw, relay] {
        outbox_relay_stop(relay);
        if (raw->thread.joinable()) {
            raw->thread.join();
        }
    };
    job.release();
    return promise;
}

// relay_stop(relay): allowed while relay_run/relay_step is pending (thread-safe in C).
Napi::Value RelayStop(const Napi::CallbackInfo &info) {
    if (auto *h = unwrap<outbox_relay>(info, 0, Use::stop)) {
        outbox_relay_stop(h->ptr);
    }
    return info.Env().Undefined();
}

Napi::Value RelayReset(const Napi::CallbackInfo &info) {
    check(info.Env(), outbox_relay_reset(unwrap<outbox_relay>(info, 0)->ptr));
    return info.Env().Undefined();
}

} // namespace

void register_relay(Napi::Env env, Napi::Object exports) {
    def(env, exports, "relay_new", RelayNew);
    def(env, exports, "relay_free", RelayFree);
    def(env, exports, "relay_set_logger", RelaySetLogger);
    def(env, exports, "relay_step", RelayStep);
    def(env, exports, "relay_run", RelayRun);
    def(env, exports, "relay_stop", RelayStop);
    def(env, exports, "relay_reset", RelayReset);
}

} // namespace outbox_node
