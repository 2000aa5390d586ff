// The consumer loop as a step machine (outbox_loop_*), which node/lib/consumer.js drives with
// promises. Only marshalling here; outbox_loop_block runs on a worker thread.
#include "common.h"

namespace outbox_node {
namespace {

// loop_new(consumer, connection, idle_timeout_ms, limit, placeholders | null) -> outbox_loop
Napi::Value LoopNew(const Napi::CallbackInfo &info) {
    auto *c = unwrap<outbox_consumer>(info, 0);
    outbox_loop_options o;
    outbox_loop_options_init(&o);
    o.connection = static_cast<int32_t>(int64_arg(info, 1, "connection"));
    o.idle_timeout_ms = static_cast<int32_t>(int64_arg(info, 2, "idle_timeout_ms"));
    o.limit = int64_arg(info, 3, "limit");
    bool has = false;
    const std::string ph = opt_str_arg(info, 4, "placeholders", has);
    o.placeholders = has ? ph.c_str() : nullptr;
    outbox_loop *l = nullptr;
    check(info.Env(), outbox_loop_new(&l, c->ptr, nullptr, &o));
    return wrap(info.Env(), l);
}

Napi::Value LoopFree(const Napi::CallbackInfo &info) {
    if (auto *h = unwrap<outbox_loop>(info, 0, Use::release)) {
        h->release();
    }
    return info.Env().Undefined();
}

Napi::Value LoopNext(const Napi::CallbackInfo &info) {
    return Napi::Number::New(info.Env(), outbox_loop_next(unwrap<outbox_loop>(info, 0)->ptr));
}

// loop_block(loop, consumer) -> Promise<void>: the blocking step on a worker thread.
class BlockWorker : public Worker {
  public:
    BlockWorker(Napi::Env env, outbox_loop *l) : Worker(env, "outbox_loop_block"), l_(l) {}

  protected:
    outbox_status run() override { return outbox_loop_block(l_); }

  private:
    outbox_loop *l_;
};

Napi::Value LoopBlock(const Napi::CallbackInfo &info) {
    auto *l = unwrap<outbox_loop>(info, 0);
    auto *c = unwrap<outbox_consumer>(info, 1);
    auto *w = new BlockWorker(info.Env(), l->ptr);
    w->hold(info[0], l);
    w->hold(info[1], c);
    return w->start();
}

// loop_statement(loop, prepared?) -> {kind, text, values, rowMode[, name]}: a node-postgres query
// (the dedupe statement named when prepared: parsed once per connection), and which one.
Napi::Value LoopStatement(const Napi::CallbackInfo &info) {
    Napi::Env env = info.Env();
    int kind = 0;
    const outbox_statement *st = outbox_loop_statement(unwrap<outbox_loop>(info, 0)->ptr, &kind);
    if (st == nullptr) {
        throw argument_error(env, "the loop's next action is not exec");
    }
    const bool named = info[1].ToBoolean() && kind == OUTBOX_LOOP_SQL_DEDUPE;
    Napi::Object q = pg_query(env, st, named ? "outbox_dedupe" : nullptr);
    q.Set("kind", Napi::Number::New(env, kind));
    return q;
}

// loop_exec_done(loop, row: Array | undefined)
Napi::Value LoopExecDone(const Napi::CallbackInfo &info) {
    auto *l = unwrap<outbox_loop>(info, 0);
    const TextRow row(info[1]);
    check(info.Env(), outbox_loop_exec_done(l->ptr, row.data(), row.size()));
    return info.Env().Undefined();
}

// loop_exec_failed(loop, error of node-postgres)
Napi::Value LoopExecFailed(const Napi::CallbackInfo &info) {
    auto *l = unwrap<outbox_loop>(info, 0);
    const DriverFailure f(info[1]);
    check(info.Env(), outbox_loop_exec_failed(l->ptr, f.sqlstate.c_str(), f.message.c_str(), f.closed ? 1 : 0));
    return info.Env().Undefined();
}

// loop_message(loop) -> outbox_message (a copy of its own) | null
Napi::Value LoopMessage(const Napi::CallbackInfo &info) {
    const outbox_message *m = outbox_loop_message(unwrap<outbox_loop>(info, 0)->ptr);
    if (m == nullptr) {
        return info.Env().Null();
    }
    outbox_message *copy = nullptr;
    check(info.Env(), outbox_message_copy(&copy, m));
    return wrap(info.Env(), copy);
}

// loop_handler_done(loop, result, reason | null)
Napi::Value LoopHandlerDone(const Napi::CallbackInfo &info) {
    auto *l = unwrap<outbox_loop>(info, 0);
    const auto result = static_cast<int>(int64_arg(info, 1, "result"));
    bool has = false;
    const std::string reason = opt_str_arg(info, 2, "reason", has);
    check(info.Env(), outbox_loop_handler_done(l->ptr, result, has ? reason.c_str() : nullptr));
    return info.Env().Undefined();
}

Napi::Value LoopWaitMs(const Napi::CallbackInfo &info) {
    return Napi::Number::New(info.Env(), outbox_loop_wait_ms(unwrap<outbox_loop>(info, 0)->ptr));
}

Napi::Value LoopWaited(const Napi::CallbackInfo &info) {
    check(info.Env(), outbox_loop_waited(unwrap<outbox_loop>(info, 0)->ptr));
    return info.Env().Undefined();
}

// loop_opened(loop, ok, message)
Napi::Value LoopOpened(const Napi::CallbackInfo &info) {
    auto *l = unwrap<outbox_loop>(info, 0);
    const std::string message = info[2].IsString() ? info[2].As<Napi::String>().Utf8Value() : std::string();
    check(info.Env(), outbox_loop_opened(l->ptr, info[1].ToBoolean() ? 1 : 0, message.c_str()));
    return info.Env().Undefined();
}

// loop_result(loop) -> events handled; throws the error the loop ended with.
Napi::Value LoopResult(const Napi::CallbackInfo &info) {
    int64_t handled = 0;
    check(info.Env(), outbox_loop_result(unwrap<outbox_loop>(info, 0)->ptr, &handled));
    return Napi::Number::New(info.Env(), static_cast<double>(handled));
}

} // namespace

void register_loop(Napi::Env env, Napi::Object exports) {
    def(env, exports, "loop_new", LoopNew);
    def(env, exports, "loop_free", LoopFree);
    def(env, exports, "loop_next", LoopNext);
    def(env, exports, "loop_block", LoopBlock);
    def(env, exports, "loop_statement", LoopStatement);
    def(env, exports, "loop_exec_done", LoopExecDone);
    def(env, exports, "loop_exec_failed", LoopExecFailed);
    def(env, exports, "loop_message", LoopMessage);
    def(env, exports, "loop_handler_done", LoopHandlerDone);
    def(env, exports, "loop_wait_ms", LoopWaitMs);
    def(env, exports, "loop_waited", LoopWaited);
    def(env, exports, "loop_opened", LoopOpened);
    def(env, exports, "loop_result", LoopResult);
    // The C API's constants, from outbox.h as the addon was compiled against it.
    Napi::Object k = Napi::Object::New(env);
    const std::pair<const char *, int> names[] = {
        {"BLOCK", OUTBOX_LOOP_BLOCK},
        {"EXEC", OUTBOX_LOOP_EXEC},
        {"HANDLE", OUTBOX_LOOP_HANDLE},
        {"WAIT", OUTBOX_LOOP_WAIT},
        {"OPEN", OUTBOX_LOOP_OPEN},
        {"DONE", OUTBOX_LOOP_DONE},
        {"SQL_BEGIN", OUTBOX_LOOP_SQL_BEGIN},
        {"SQL_DEDUPE", OUTBOX_LOOP_SQL_DEDUPE},
        {"SQL_COMMIT", OUTBOX_LOOP_SQL_COMMIT},
        {"SQL_ROLLBACK", OUTBOX_LOOP_SQL_ROLLBACK},
        {"SQL_STATEMENT", OUTBOX_LOOP_SQL_STATEMENT},
        {"DRIVER_LENT", OUTBOX_LOOP_DRIVER_LENT},
        {"DRIVER_OWNED", OUTBOX_LOOP_DRIVER_OWNED},
        {"HANDLER_OK", OUTBOX_HANDLER_OK},
        {"HANDLER_FAILED", OUTBOX_HANDLER_FAILED},
        {"HANDLER_PERMANENT", OUTBOX_HANDLER_PERMANENT},
    };
    for (const auto &[name, value] : names) {
        k.Set(name, Napi::Number::New(env, value));
    }
    exports.Set("loop", k);
    // Whether a status is worth retrying (outbox_status_retriable), by status name.
    Napi::Object retriable = Napi::Object::New(env);
    for (int s = OUTBOX_OK; s >= OUTBOX_ERR_NOT_FOUND; --s) {
        retriable.Set(outbox_status_name(static_cast<outbox_status>(s)),
                      Napi::Boolean::New(env, outbox_status_retriable(static_cast<outbox_status>(s)) != 0));
    }
    exports.Set("retriable", retriable);
}

} // namespace outbox_node
