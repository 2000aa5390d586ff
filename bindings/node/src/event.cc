// outbox_event_*, outbox_write, outbox_render_write and outbox_statement_*.
#include "common.h"

#include <uv.h> // Node's libuv (Poller)

#include <algorithm>
#include <memory>
#include <utility>

namespace outbox_node {
namespace {

Napi::Value EventNew(const Napi::CallbackInfo &info) {
    outbox_event *ev = nullptr;
    check(info.Env(), outbox_event_new(&ev));
    return wrap(info.Env(), ev);
}

Napi::Value EventFree(const Napi::CallbackInfo &info) {
    if (auto *h = unwrap<outbox_event>(info, 0, Use::release)) {
        h->release();
    }
    return info.Env().Undefined();
}

// event_set(ev, field, value: string | Uint8Array): outbox_event_set_n, so a NUL inside the
// value is seen (and rejected) by the library, and raw bytes reach its UTF-8 check unchanged.
Napi::Value EventSet(const Napi::CallbackInfo &info) {
    auto *h = unwrap<outbox_event>(info, 0);
    std::string field = str_arg(info, 1, "field");
    Napi::Value v = info[2];
    outbox_status st;
    if (v.IsString()) {
        std::string value = v.As<Napi::String>().Utf8Value();
        st = outbox_event_set_n(h->ptr, field.c_str(), value.data(), value.size());
    } else if (v.IsTypedArray() && v.As<Napi::TypedArray>().TypedArrayType() == napi_uint8_array) {
        auto bytes = v.As<Napi::Uint8Array>();
        st =
            outbox_event_set_n(h->ptr, field.c_str(), reinterpret_cast<const char *>(bytes.Data()), bytes.ByteLength());
    } else {
        throw type_error(info.Env(), "value of event field '" + field + "' must be a string or a Uint8Array");
    }
    check(info.Env(), st);
    return info.Env().Undefined();
}

Napi::Value EventUnset(const Napi::CallbackInfo &info) {
    auto *h = unwrap<outbox_event>(info, 0);
    std::string field = str_arg(info, 1, "field");
    check(info.Env(), outbox_event_unset(h->ptr, field.c_str()));
    return info.Env().Undefined();
}

Napi::Value EventId(const Napi::CallbackInfo &info) {
    return str_or_null(info.Env(), outbox_event_id(unwrap<outbox_event>(info, 0)->ptr));
}

Napi::Value EventType(const Napi::CallbackInfo &info) {
    return str_or_null(info.Env(), outbox_event_type(unwrap<outbox_event>(info, 0)->ptr));
}

Napi::Value EventSeq(const Napi::CallbackInfo &info) {
    return Napi::Number::New(info.Env(), static_cast<double>(outbox_event_seq(unwrap<outbox_event>(info, 0)->ptr)));
}

// The result of a written event: {eventId, eventType, seq}.
Napi::Object written(Napi::Env env, const outbox_event *ev) {
    Napi::Object o = Napi::Object::New(env);
    o.Set("eventId", str_or_null(env, outbox_event_id(ev)));
    o.Set("eventType", str_or_null(env, outbox_event_type(ev)));
    o.Set("seq", Napi::Number::New(env, static_cast<double>(outbox_event_seq(ev))));
    return o;
}

// An event owned here, freed unless released (to an operation that frees it).
struct OwnedEvent {
    outbox_event *ev = nullptr;
    OwnedEvent() = default;
    OwnedEvent(const OwnedEvent &) = delete;
    OwnedEvent &operator=(const OwnedEvent &) = delete;
    ~OwnedEvent() { outbox_event_free(ev); }
    outbox_event *release() { return std::exchange(ev, nullptr); }
};

// write_fields(db, [field, value, ...]) -> Promise<{eventId, eventType, seq}>: the event built
// (set_event), written and freed in one call, for `await db.write(event)`. One crossing into the
// addon instead of one per field, id, type, seq and free, and one promise instead of an async
// function around the write: that main-thread work is what a per-write await pays on top of C.
//
// The write itself takes no thread: outbox_write_send() sends the statement from the main thread
// without blocking, a uv_poll_t watches the connection's socket, and outbox_write_poll() reads the
// result when it is readable (PolledWrite). Handing each write to the lane's thread and back cost
// two context switches a write, more than the rest of it. Events the library cannot write so
// (OUTBOX_WRITE_BLOCKING: an idempotency key) go to the lane, where outbox_write blocks.
class WriteFieldsWorker : public Worker {
  public:
    WriteFieldsWorker(Napi::Env env, outbox_db *db, outbox_event *ev) : Worker(env, "outbox_write"), db_(db), ev_(ev) {}
    ~WriteFieldsWorker() override { outbox_event_free(ev_); }

  protected:
    outbox_status run() override { return outbox_write(db_, ev_); }
    Napi::Value result(Napi::Env env) override { return written(env, ev_); }

  private:
    outbox_db *db_;
    outbox_event *ev_;
};

// A write sent with outbox_write_send(), finished from libuv's callbacks on the main thread (the
// Database's Poller). Holds the Database as a Worker does (busy, kept alive) until it settles.
class PolledWrite {
  public:
    // Sends the event's write and returns its promise; an empty value when nothing was done and the
    // write must take the lane (the library cannot write it without blocking, or libuv cannot watch
    // the socket). A failure before anything was sent is a rejected promise.
    static Napi::Value start(const Napi::CallbackInfo &info, Handle<outbox_db> *h, OwnedEvent &owned) {
        Napi::Env env = info.Env();
        const int fd = outbox_db_socket(h->ptr);
        if (fd < 0) {
            return Napi::Value(); // no connection: outbox_write on the lane says so
        }
        if (!h->poller) {
            h->poller = std::make_unique<Poller>();
        }
        Poller &poller = *h->poller;
        auto op = std::unique_ptr<PolledWrite>(new PolledWrite(env, h, owned.ev));
        if (!poller.begin(env, fd, op.get(), ready)) {
            return Napi::Value();
        }
        outbox_write_wait wait = OUTBOX_WRITE_DONE;
        const outbox_status st = outbox_write_send(&wait, h->ptr, owned.ev);
        if (st != OUTBOX_OK || wait == OUTBOX_WRITE_BLOCKING) {
            poller.end();
            if (st == OUTBOX_OK) {
                return Napi::Value();
            }
            Napi::Promise::Deferred d = Napi::Promise::Deferred::New(env);
            d.Reject(status_error(env, st, outbox_last_error()).Value());
            return d.Promise();
        }
        owned.release(); // the write's now
        op->owns_ev_ = true;
        op->db_ref_ = Napi::Persistent(info[0]);
        ++h->busy;
        Napi::Promise p = op->deferred_.Promise();
        PolledWrite *w = op.release(); // deleted when it settles (left at environment teardown)
        w->wait(wait);
        return p;
    }

  private:
    PolledWrite(Napi::Env env, Handle<outbox_db> *h, outbox_event *ev)
        : env_(env), h_(h), ev_(ev), deferred_(Napi::Promise::Deferred::New(env)) {}

  public:
    ~PolledWrite() {
        if (owns_ev_) {
            outbox_event_free(ev_);
        }
    }

  private:
    void wait(outbox_write_wait wait) {
        if (!h_->poller->wait(wait == OUTBOX_WRITE_WRITABLE)) {
            // Not seen in practice (a valid socket and events); the write cannot be finished here.
            settle(OUTBOX_ERR_INTERNAL, "cannot watch the PostgreSQL connection's socket");
        }
    }

    static void ready(void *p) {
        auto *op = static_cast<PolledWrite *>(p);
        outbox_write_wait wait = OUTBOX_WRITE_DONE;
        const outbox_status st = outbox_write_poll(&wait, op->h_->ptr, op->ev_);
        if (st == OUTBOX_OK && wait != OUTBOX_WRITE_DONE) {
            op->wait(wait);
            return;
        }
        op->settle(st, st != OUTBOX_OK ? outbox_last_error() : "");
    }

    // Ends the write: the Database released (after a failure its socket no longer watched: it may be
    // gone), then the promise settled in a callback scope (its continuations run right after, and
    // may start the next write), then this deleted.
    void settle(outbox_status st, std::string message) {
        if (st == OUTBOX_OK) {
            h_->poller->end();
        } else {
            h_->poller->close();
        }
        --h_->busy;
        Napi::Env env = env_;
        Napi::HandleScope hs(env);
        try {
            auto *data = env.GetInstanceData<AddonData>();
            if (data->write_context == nullptr) {
                Napi::Object resource = Napi::Object::New(env);
                data->write_resource = Napi::Persistent(resource);
                napi_async_init(env, resource, Napi::String::New(env, "outbox_write"), &data->write_context);
            }
            napi_callback_scope scope = nullptr;
            napi_open_callback_scope(env, data->write_resource.Value(), data->write_context, &scope);
            try {
                if (st != OUTBOX_OK) {
                    deferred_.Reject(status_error(env, st, message).Value());
                } else {
                    deferred_.Resolve(written(env, ev_));
                }
            } catch (const Napi::Error &) {
                napi_close_callback_scope(env, scope);
                throw;
            }
            db_ref_.Reset();
            napi_close_callback_scope(env, scope);
        } catch (const Napi::Error &) {
            // Nothing to report to: an exception here is the environment's (it is going away).
        }
        delete this;
    }

    Napi::Env env_;
    Handle<outbox_db> *h_;
    outbox_event *ev_;
    bool owns_ev_ = false; // once sent; until then the caller's
    Napi::Promise::Deferred deferred_;
    Napi::Reference<Napi::Value> db_ref_;
};

Napi::Value WriteFields(const Napi::CallbackInfo &info) {
    auto *db = unwrap<outbox_db>(info, 0);
    OwnedEvent owned;
    check(info.Env(), outbox_event_new(&owned.ev));
    set_event(info.Env(), owned.ev, info[1]);
    Napi::Value polled = PolledWrite::start(info, db, owned);
    if (!polled.IsEmpty()) {
        return polled;
    }
    auto *w = new WriteFieldsWorker(info.Env(), db->ptr, owned.release()); // the worker frees it
    w->hold(info[0], db);
    return w->start(info.Env(), lane_of(info.Env(), db));
}

// write_many(db, [[field, value, ...], ...]) -> Promise<[{eventId, eventType, seq}, ...]>: outbox_write
// for each event in order, on one worker thread (one thread hop for a batch). Stops at the first
// failure, building or writing: the error carries `index`, the events before it are written (in
// the caller's transaction, which decides).
class WriteManyWorker : public Worker {
  public:
    WriteManyWorker(Napi::Env env, outbox_db *db, std::vector<outbox_event *> evs)
        : Worker(env, "outbox_write"), db_(db), evs_(std::move(evs)) {}
    ~WriteManyWorker() override {
        for (outbox_event *ev : evs_) {
            outbox_event_free(ev);
        }
    }

  protected:
    outbox_status run() override {
        for (failed_ = 0; failed_ < evs_.size(); ++failed_) {
            outbox_status st = outbox_write(db_, evs_[failed_]);
            if (st != OUTBOX_OK) {
                return st;
            }
        }
        return OUTBOX_OK;
    }
    Napi::Value result(Napi::Env env) override {
        Napi::Array out = Napi::Array::New(env, evs_.size());
        for (size_t i = 0; i < evs_.size(); ++i) {
            out.Set(static_cast<uint32_t>(i), written(env, evs_[i]));
        }
        return out;
    }
    void annotate(Napi::Error &e) override { e.Set("index", Napi::Number::New(e.Env(), static_cast<double>(failed_))); }

  private:
    outbox_db *db_;
    std::vector<outbox_event *> evs_;
    size_t failed_ = 0;
};

Napi::Value WriteMany(const Napi::CallbackInfo &info) {
    Napi::Env env = info.Env();
    auto *db = unwrap<outbox_db>(info, 0);
    if (!info[1].IsArray()) {
        throw type_error(env, "events must be an array");
    }
    Napi::Array arr = info[1].As<Napi::Array>();
    std::vector<std::unique_ptr<outbox_event, void (*)(outbox_event *)>> owned;
    for (uint32_t i = 0; i < arr.Length(); ++i) {
        try {
            outbox_event *ev = nullptr;
            check(env, outbox_event_new(&ev));
            owned.emplace_back(ev, outbox_event_free);
            set_event(env, ev, arr.Get(i));
        } catch (Napi::Error &e) {
            e.Set("index", Napi::Number::New(env, i));
            throw;
        }
    }
    std::vector<outbox_event *> evs;
    for (auto &ev : owned) {
        evs.push_back(ev.release()); // the worker frees them
    }
    auto *w = new WriteManyWorker(env, db->ptr, std::move(evs));
    w->hold(info[0], db);
    return w->start(env, lane_of(env, db));
}

// render_write(cfg | null, ev) -> outbox_statement; validation and naming only, no I/O.
Napi::Value RenderWrite(const Napi::CallbackInfo &info) {
    auto *cfg = unwrap_opt<outbox_config>(info, 0);
    auto *ev = unwrap<outbox_event>(info, 1);
    outbox_statement *st = nullptr;
    check(info.Env(), outbox_render_write(&st, cfg != nullptr ? cfg->ptr : nullptr, ev->ptr));
    return wrap(info.Env(), st);
}

// render_write_fields(cfg | null, [field, value, ...]) -> { text, values, eventId, eventType }:
// outbox_render_write of the event those fields make, in one crossing into the addon (the event
// and the statement are freed here), for `outbox.write(pgClient, event)`: per write, the calls
// that build, render, read and free were most of what that path cost on top of the driver.
Napi::Value RenderWriteFields(const Napi::CallbackInfo &info) {
    Napi::Env env = info.Env();
    auto *cfg = unwrap_opt<outbox_config>(info, 0);
    OwnedEvent owned;
    check(env, outbox_event_new(&owned.ev));
    set_event(env, owned.ev, info[1]);
    outbox_statement *raw = nullptr;
    check(env, outbox_render_write(&raw, cfg != nullptr ? cfg->ptr : nullptr, owned.ev));
    std::unique_ptr<outbox_statement, void (*)(outbox_statement *)> st(raw, outbox_statement_free);
    Napi::Object o = Napi::Object::New(env);
    o.Set("text", str_or_null(env, outbox_statement_sql(st.get())));
    o.Set("values", statement_values(env, st.get()));
    o.Set("eventId", str_or_null(env, outbox_event_id(owned.ev)));
    o.Set("eventType", str_or_null(env, outbox_event_type(owned.ev)));
    return o;
}

Napi::Value StatementFree(const Napi::CallbackInfo &info) {
    if (auto *h = unwrap<outbox_statement>(info, 0, Use::release)) {
        h->release();
    }
    return info.Env().Undefined();
}

Napi::Value StatementSql(const Napi::CallbackInfo &info) {
    return str_or_null(info.Env(), outbox_statement_sql(unwrap<outbox_statement>(info, 0)->ptr));
}

Napi::Value StatementParamCount(const Napi::CallbackInfo &info) {
    return Napi::Number::New(info.Env(),
                             static_cast<double>(outbox_statement_param_count(unwrap<outbox_statement>(info, 0)->ptr)));
}

Napi::Value StatementParam(const Napi::CallbackInfo &info) {
    auto *h = unwrap<outbox_statement>(info, 0);
    int64_t index = int64_arg(info, 1, "index");
    if (index < 0) {
        return info.Env().Null();
    }
    return str_or_null(info.Env(), outbox_statement_param(h->ptr, static_cast<size_t>(index)));
}

// statement_params(st) -> (string | null)[]: every outbox_statement_param() at once.
Napi::Value StatementParams(const Napi::CallbackInfo &info) {
    return statement_values(info.Env(), unwrap<outbox_statement>(info, 0)->ptr);
}

Napi::Value StatementJson(const Napi::CallbackInfo &info) {
    auto *h = unwrap<outbox_statement>(info, 0);
    char *out = nullptr;
    check(info.Env(), outbox_statement_json(&out, h->ptr));
    Napi::String s = Napi::String::New(info.Env(), out != nullptr ? out : "");
    outbox_string_free(out);
    return s;
}

} // namespace

struct PollerAccess {
    static void on_ready(uv_poll_t *poll, int status, int) {
        auto *self = static_cast<Poller *>(poll->data);
        if (status < 0) {
            self->events_ = 0; // libuv stopped the handle (POLLERR: the peer reset or closed the connection)
        }
        if (self->op_ == nullptr) {
            self->stop(); // the socket stirred with no write waiting (the server's, while idle): not ours to read
            return;
        }
        // An error from libuv (status < 0) is the socket's: outbox_write_poll reads it (and what the
        // server said before) and fails the write, or says to wait again, which starts the handle again.
        self->ready_(self->op_);
    }
};

bool Poller::begin(napi_env env, int fd, void *op, Ready ready) {
    if (poll_ != nullptr && fd != fd_) {
        close(); // the connection was opened again: another socket
    }
    if (poll_ == nullptr) {
        uv_loop_t *loop = nullptr;
        if (napi_get_uv_event_loop(env, &loop) != napi_ok || loop == nullptr) {
            return false;
        }
        auto *poll = new uv_poll_t;
        if (uv_poll_init_socket(loop, poll, fd) != 0) {
            delete poll;
            return false;
        }
        poll->data = this;
        uv_unref(reinterpret_cast<uv_handle_t *>(poll));
        poll_ = poll;
        fd_ = fd;
        events_ = 0;
    }
    op_ = op;
    ready_ = ready;
    return true;
}

bool Poller::wait(bool writable) {
    const int events = UV_READABLE | (writable ? UV_WRITABLE : 0);
    // Started for the same events already (the last write's): nothing to tell the kernel.
    if (events != events_ && uv_poll_start(poll_, events, PollerAccess::on_ready) != 0) {
        return false;
    }
    events_ = events;
    uv_ref(reinterpret_cast<uv_handle_t *>(poll_));
    return true;
}

void Poller::end() {
    op_ = nullptr;
    if (poll_ != nullptr) {
        uv_unref(reinterpret_cast<uv_handle_t *>(poll_));
    }
}

void Poller::stop() {
    if (poll_ != nullptr && events_ != 0) {
        uv_poll_stop(poll_);
        events_ = 0;
    }
}

void Poller::close() {
    op_ = nullptr;
    if (poll_ != nullptr) {
        uv_close(reinterpret_cast<uv_handle_t *>(poll_),
                 [](uv_handle_t *p) { delete reinterpret_cast<uv_poll_t *>(p); });
        poll_ = nullptr;
        fd_ = -1;
        events_ = 0;
    }
}

void register_event(Napi::Env env, Napi::Object exports) {
    def(env, exports, "event_new", EventNew);
    def(env, exports, "event_free", EventFree);
    def(env, exports, "event_set", EventSet);
    def(env, exports, "event_unset", EventUnset);
    def(env, exports, "event_id", EventId);
    def(env, exports, "event_type", EventType);
    def(env, exports, "event_seq", EventSeq);
    def(env, exports, "write_many", WriteMany);
    def(env, exports, "write_fields", WriteFields);
    def(env, exports, "render_write", RenderWrite);
    def(env, exports, "render_write_fields", RenderWriteFields);
    def(env, exports, "statement_free", StatementFree);
    def(env, exports, "statement_sql", StatementSql);
    def(env, exports, "statement_param_count", StatementParamCount);
    def(env, exports, "statement_param", StatementParam);
    def(env, exports, "statement_params", StatementParams);
    def(env, exports, "statement_json", StatementJson);
    export_event_fields(env, exports);
}

} // namespace outbox_node
