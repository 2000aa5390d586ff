// Consumers: outbox_consumer_dedupe / outbox_render_dedupe / outbox_inbox_purge (the inbox),
// outbox_consumer_* (the consumer runtime) and outbox_message_*. Dedupe keys and results as the
// JS layer has them ({ consumer, eventId, ... }, { firstTime, order, previousSeq }).
#include "common.h"

#include <cctype>
#include <cstdlib>
#include <iterator>
#include <optional>
#include <string>
#include <vector>

namespace outbox_node {
namespace {

// What a dedupe found, as the JS layer gives it: {firstTime, order: 'IN_ORDER' | ..., previousSeq}.
Napi::Object dedupe_object(Napi::Env env, const outbox_dedupe_result &r) {
    Napi::Object o = Napi::Object::New(env);
    o.Set("firstTime", Napi::Boolean::New(env, r.first_time != 0));
    o.Set("order", name_of(kOrders, r.order));
    o.Set("previousSeq", Napi::Number::New(env, static_cast<double>(r.previous_seq)));
    return o;
}

// A dedupe key from its object: { consumer, eventId, aggregateType?, aggregateId?, seq? } (the
// aggregate's type and id as text, seq 0 when absent).
struct DedupeKey {
    bool has_type = false, has_id = false;
    std::string consumer, event_id, aggregate_type, aggregate_id;
    int64_t seq = 0;
    DedupeKey(Napi::Env env, const Napi::Value &key) {
        if (key.Type() != napi_object) {
            throw type_error(env,
                             "dedupe key must be an object { consumer, eventId, aggregateType?, aggregateId?, seq? }");
        }
        Napi::Object o = key.As<Napi::Object>();
        consumer = text(o.Get("consumer"), "consumer");
        event_id = text(o.Get("eventId"), "event_id");
        aggregate_type = optional_text(o.Get("aggregateType"), has_type);
        aggregate_id = optional_text(o.Get("aggregateId"), has_id);
        Napi::Value s = o.Get("seq");
        seq = s.IsUndefined() || s.IsNull() ? 0 : int64_of(s, "seq");
    }
    const char *type() const { return has_type ? aggregate_type.c_str() : nullptr; }
    const char *id() const { return has_id ? aggregate_id.c_str() : nullptr; }

  private:
    static std::string text(const Napi::Value &v, const char *what) {
        if (!v.IsString()) {
            throw type_error(v.Env(), std::string(what) + " must be a string");
        }
        return v.As<Napi::String>().Utf8Value();
    }
    static std::string optional_text(const Napi::Value &v, bool &has) {
        has = !(v.IsUndefined() || v.IsNull());
        return has ? v.ToString().Utf8Value() : std::string();
    }
};

// consumer_dedupe(db, key) -> Promise<{firstTime, order, previousSeq}>
class DedupeWorker : public Worker {
  public:
    DedupeWorker(Napi::Env env, outbox_db *db, DedupeKey key)
        : Worker(env, "outbox_consumer_dedupe"), db_(db), key_(std::move(key)) {
        outbox_dedupe_result_init(&result_);
    }

  protected:
    outbox_status run() override {
        return outbox_consumer_dedupe(&result_, db_, key_.consumer.c_str(), key_.event_id.c_str(), key_.type(),
                                      key_.id(), key_.seq);
    }
    Napi::Value result(Napi::Env env) override { return dedupe_object(env, result_); }

  private:
    outbox_db *db_;
    DedupeKey key_;
    outbox_dedupe_result result_{};
};

Napi::Value ConsumerDedupe(const Napi::CallbackInfo &info) {
    auto *db = unwrap<outbox_db>(info, 0);
    auto *w = new DedupeWorker(info.Env(), db->ptr, DedupeKey(info.Env(), info[1]));
    w->hold(info[0], db);
    return w->start();
}

// render_dedupe(cfg | null, key, prepared?, pg transaction status?) -> {text, values}; given
// `prepared`, a node-postgres query (rowMode 'array', named when true), refused (TRANSACTION) for
// a client whose transaction is aborted. No I/O.
Napi::Value RenderDedupe(const Napi::CallbackInfo &info) {
    Napi::Env env = info.Env();
    auto *cfg = unwrap_opt<outbox_config>(info, 0);
    DedupeKey key(env, info[1]);
    if (!info[3].IsUndefined() && tx_of(info[3]) == OUTBOX_TX_INERROR) {
        throw status_error(env, OUTBOX_ERR_TRANSACTION,
                           "the caller's transaction is aborted; roll it back before deduplicating");
    }
    outbox_statement *raw = nullptr;
    check(env, outbox_render_dedupe(&raw, cfg != nullptr ? cfg->ptr : nullptr, key.consumer.c_str(),
                                    key.event_id.c_str(), key.type(), key.id(), key.seq));
    std::unique_ptr<outbox_statement, void (*)(outbox_statement *)> st(raw, outbox_statement_free);
    if (!info[2].IsUndefined()) {
        return pg_query(env, st.get(), info[2].ToBoolean() ? "outbox_dedupe" : nullptr);
    }
    Napi::Object o = Napi::Object::New(env);
    o.Set("text", str_or_null(env, outbox_statement_sql(st.get())));
    o.Set("values", statement_values(env, st.get()));
    return o;
}

// dedupe_interpret(cfg | null, key, row) -> {firstTime, order, previousSeq}: what the rendered
// dedupe statement's row (first_time, previous seq) means (outbox_dedupe_interpret_row), so
// node-postgres callers get the library's order check.
Napi::Value DedupeInterpret(const Napi::CallbackInfo &info) {
    Napi::Env env = info.Env();
    auto *cfg = unwrap_opt<outbox_config>(info, 0);
    DedupeKey key(env, info[1]);
    if (!info[2].IsArray() || info[2].As<Napi::Array>().Length() < 2) {
        throw status_error(env, OUTBOX_ERR_INTERNAL, "outbox dedupe: the inbox statement returned no row");
    }
    Napi::Array row = info[2].As<Napi::Array>();
    // The row's values as text, decoded by the library (outbox_dedupe_interpret_row).
    const std::string first = row.Get(0U).ToString().Utf8Value();
    Napi::Value previous = row.Get(1U);
    std::optional<std::string> prev;
    if (!previous.IsUndefined() && !previous.IsNull()) {
        prev = previous.ToString().Utf8Value();
    }
    outbox_dedupe_result r;
    outbox_dedupe_result_init(&r);
    check(env, outbox_dedupe_interpret_row(&r, cfg != nullptr ? cfg->ptr : nullptr, key.type(), key.id(), key.seq,
                                           first.c_str(), prev ? prev->c_str() : nullptr));
    return dedupe_object(env, r);
}

// inbox_purge(db, older_than_s, batch) -> Promise<deleted>
class PurgeWorker : public Worker {
  public:
    PurgeWorker(Napi::Env env, outbox_db *db, int64_t older_than_s, int batch)
        : Worker(env, "outbox_inbox_purge"), db_(db), older_than_s_(older_than_s), batch_(batch) {}

  protected:
    outbox_status run() override { return outbox_inbox_purge(&deleted_, db_, older_than_s_, batch_); }
    Napi::Value result(Napi::Env env) override { return Napi::Number::New(env, static_cast<double>(deleted_)); }

  private:
    outbox_db *db_;
    int64_t older_than_s_;
    int batch_;
    int64_t deleted_ = 0;
};

Napi::Value InboxPurge(const Napi::CallbackInfo &info) {
    auto *db = unwrap<outbox_db>(info, 0);
    int64_t older = int64_arg(info, 1, "older_than_s");
    int64_t batch = int64_arg(info, 2, "batch");
    if (batch < -2147483647LL || batch > 2147483647LL) {
        throw type_error(info.Env(), "batch is out of range");
    }
    auto *w = new PurgeWorker(info.Env(), db->ptr, older, static_cast<int>(batch));
    w->hold(info[0], db);
    return w->start();
}

// consumer_new(cfg, name) -> outbox_consumer; connects lazily.
Napi::Value ConsumerNew(const Napi::CallbackInfo &info) {
    auto *cfg = unwrap<outbox_config>(info, 0, Use::read);
    std::string name = str_arg(info, 1, "name");
    outbox_consumer *c = nullptr;
    check(info.Env(), outbox_consumer_new(&c, cfg->ptr, name.c_str()));
    return wrap(info.Env(), c);
}

Napi::Value ConsumerFree(const Napi::CallbackInfo &info) {
    if (auto *h = unwrap<outbox_consumer>(info, 0, Use::release)) {
        h->release();
        h->logger.reset();
    }
    return info.Env().Undefined();
}

Napi::Value ConsumerSetLogger(const Napi::CallbackInfo &info) {
    set_logger(info, unwrap<outbox_consumer>(info, 0), outbox_consumer_set_logger);
    return info.Env().Undefined();
}

// A consumer call with no result: connect, ack, nack, dead_letter.
class ConsumerCallWorker : public Worker {
  public:
    enum class Op { connect, ack, nack, dead_letter };
    ConsumerCallWorker(Napi::Env env, const char *name, Op op, outbox_consumer *c, outbox_message *m = nullptr,
                       bool requeue = false, std::string reason = {})
        : Worker(env, name), op_(op), c_(c), m_(m), requeue_(requeue), reason_(std::move(reason)) {}

  protected:
    outbox_status run() override {
        switch (op_) {
        case Op::connect:
            return outbox_consumer_connect(c_);
        case Op::ack:
            return outbox_consumer_ack(c_, m_);
        case Op::nack:
            return outbox_consumer_nack(c_, m_, requeue_ ? 1 : 0);
        case Op::dead_letter:
            return outbox_consumer_dead_letter(c_, m_, reason_.c_str());
        }
        return OUTBOX_ERR_INTERNAL;
    }

  private:
    Op op_;
    outbox_consumer *c_;
    outbox_message *m_;
    bool requeue_;
    std::string reason_;
};

Napi::Value ConsumerConnect(const Napi::CallbackInfo &info) {
    auto *c = unwrap<outbox_consumer>(info, 0);
    auto *w = new ConsumerCallWorker(info.Env(), "outbox_consumer_connect", ConsumerCallWorker::Op::connect, c->ptr);
    w->hold(info[0], c);
    return w->start();
}

Napi::Value message_call(const Napi::CallbackInfo &info, const char *name, ConsumerCallWorker::Op op, bool requeue,
                         std::string reason) {
    auto *c = unwrap<outbox_consumer>(info, 0);
    auto *m = unwrap<outbox_message>(info, 1, Use::read);
    auto *w = new ConsumerCallWorker(info.Env(), name, op, c->ptr, m->ptr, requeue, std::move(reason));
    w->hold(info[0], c);
    w->hold(info[1], m, true);
    return w->start();
}

// consumer_ack(consumer, msg) -> Promise<void>
Napi::Value ConsumerAck(const Napi::CallbackInfo &info) {
    return message_call(info, "outbox_consumer_ack", ConsumerCallWorker::Op::ack, false, {});
}

// consumer_nack(consumer, msg, requeue: boolean) -> Promise<void>
Napi::Value ConsumerNack(const Napi::CallbackInfo &info) {
    return message_call(info, "outbox_consumer_nack", ConsumerCallWorker::Op::nack, info[2].ToBoolean().Value(), {});
}

// consumer_dead_letter(consumer, msg, reason) -> Promise<void>
Napi::Value ConsumerDeadLetter(const Napi::CallbackInfo &info) {
    std::string reason = str_arg(info, 2, "reason");
    return message_call(info, "outbox_consumer_dead_letter", ConsumerCallWorker::Op::dead_letter, false,
                        std::move(reason));
}

// consumer_next(consumer, timeout_ms) -> Promise<outbox_message>; rejects with code TIMEOUT
// when none came, STOPPED after consumer_stop().
class NextWorker : public Worker {
  public:
    NextWorker(Napi::Env env, outbox_consumer *c, int timeout_ms)
        : Worker(env, "outbox_consumer_next"), c_(c), timeout_ms_(timeout_ms) {}
    ~NextWorker() override { outbox_message_free(msg_); }

  protected:
    outbox_status run() override { return outbox_consumer_next(&msg_, c_, timeout_ms_); }
    Napi::Value result(Napi::Env env) override {
        outbox_message *m = msg_;
        msg_ = nullptr;
        return wrap(env, m);
    }

  private:
    outbox_consumer *c_;
    int timeout_ms_;
    outbox_message *msg_ = nullptr;
};

Napi::Value ConsumerNext(const Napi::CallbackInfo &info) {
    auto *c = unwrap<outbox_consumer>(info, 0);
    int64_t timeout = int64_arg(info, 1, "timeout_ms");
    if (timeout < 0 || timeout > 2147483647LL) {
        throw type_error(info.Env(), "timeout_ms must be between 0 and 2147483647");
    }
    auto *w = new NextWorker(info.Env(), c->ptr, static_cast<int>(timeout));
    w->hold(info[0], c);
    return w->start();
}

// consumer_dedupe_message(db, consumer, msg) -> Promise<{first_time, order, previous_seq}>
class DedupeMessageWorker : public Worker {
  public:
    DedupeMessageWorker(Napi::Env env, outbox_db *db, outbox_consumer *c, outbox_message *m)
        : Worker(env, "outbox_consumer_dedupe_message"), db_(db), c_(c), m_(m) {
        outbox_dedupe_result_init(&result_);
    }

  protected:
    outbox_status run() override { return outbox_consumer_dedupe_message(&result_, db_, c_, m_); }
    Napi::Value result(Napi::Env env) override { return dedupe_object(env, result_); }

  private:
    outbox_db *db_;
    outbox_consumer *c_;
    outbox_message *m_;
    outbox_dedupe_result result_{};
};

Napi::Value ConsumerDedupeMessage(const Napi::CallbackInfo &info) {
    auto *db = unwrap<outbox_db>(info, 0);
    auto *c = unwrap<outbox_consumer>(info, 1);
    auto *m = unwrap<outbox_message>(info, 2, Use::read);
    auto *w = new DedupeMessageWorker(info.Env(), db->ptr, c->ptr, m->ptr);
    w->hold(info[0], db);
    w->hold(info[1], c);
    w->hold(info[2], m, true);
    return w->start();
}

// consumer_stop(consumer): allowed while consumer_next is pending (thread-safe in C).
Napi::Value ConsumerStop(const Napi::CallbackInfo &info) {
    if (auto *h = unwrap<outbox_consumer>(info, 0, Use::stop)) {
        outbox_consumer_stop(h->ptr);
    }
    return info.Env().Undefined();
}

Napi::Value ConsumerReset(const Napi::CallbackInfo &info) {
    check(info.Env(), outbox_consumer_reset(unwrap<outbox_consumer>(info, 0)->ptr));
    return info.Env().Undefined();
}

// ---- messages: all reads of data the message owns, no I/O.

Napi::Value MessageFree(const Napi::CallbackInfo &info) {
    if (auto *h = unwrap<outbox_message>(info, 0, Use::release)) {
        h->release();
    }
    return info.Env().Undefined();
}

Napi::Value MessageField(const Napi::CallbackInfo &info) {
    auto *m = unwrap<outbox_message>(info, 0, Use::read);
    std::string name = str_arg(info, 1, "name");
    return str_or_null(info.Env(), outbox_message_field(m->ptr, name.c_str()));
}

Napi::Value MessageProperty(const Napi::CallbackInfo &info) {
    auto *m = unwrap<outbox_message>(info, 0, Use::read);
    std::string name = str_arg(info, 1, "name");
    return str_or_null(info.Env(), outbox_message_property(m->ptr, name.c_str()));
}

// What a JS Message carries: its property, and the envelope field (objects as their exact JSON
// text) or the reading that gives it. message_keys lists them; message_value(msg, i) reads one (a
// call a property: creating a JS object in the addon costs more than a JS constructor's stores).
using MessageRead = Napi::Value (*)(Napi::Env, const outbox_message *);
struct MessageKey {
    std::string key;
    const char *field; // an envelope field (outbox_envelope_field), or nullptr: `read` gives the value
    MessageRead read;
};

// An envelope field's JavaScript name: camelCase, "id" for the first (the event's id), "Text"
// after a JSON object's name.
std::string js_name(size_t index, const char *field, outbox_field_kind kind) {
    if (index == 0) {
        return "id";
    }
    std::string out;
    bool upper = false;
    for (const char *p = field; *p != '\0'; ++p) {
        if (*p == '_') {
            upper = true;
            continue;
        }
        const auto c = static_cast<unsigned char>(*p);
        out.push_back(static_cast<char>(upper ? std::toupper(c) : std::tolower(c)));
        upper = false;
    }
    return kind == OUTBOX_FIELD_JSON ? out + "Text" : out;
}

// The delivery's own values, after the envelope's fields.
const MessageKey kDeliveryKeys[] = {
    {"seq", nullptr,
     [](Napi::Env env, const outbox_message *m) -> Napi::Value {
         return Napi::Number::New(env, static_cast<double>(outbox_message_seq(m)));
     }},
    {"redelivered", nullptr,
     [](Napi::Env env, const outbox_message *m) -> Napi::Value {
         return Napi::Boolean::New(env, outbox_message_redelivered(m) != 0);
     }},
    {"deliveryCount", nullptr,
     [](Napi::Env env, const outbox_message *m) -> Napi::Value {
         return Napi::Number::New(env, static_cast<double>(outbox_message_delivery_count(m)));
     }},
    {"routingKey", nullptr,
     [](Napi::Env env, const outbox_message *m) -> Napi::Value {
         return str_or_null(env, outbox_message_property(m, "routing_key"));
     }},
    {"body", nullptr,
     [](Napi::Env env, const outbox_message *m) -> Napi::Value {
         size_t len = 0;
         const char *body = outbox_message_body(m, &len);
         return Napi::Buffer<char>::Copy(env, body != nullptr ? body : "", body != nullptr ? len : 0);
     }},
    {"order", nullptr,
     [](Napi::Env env, const outbox_message *m) -> Napi::Value {
         return Napi::String::New(env, name_of(kOrders, outbox_message_order(m)));
     }},
    {"previousSeq", nullptr,
     [](Napi::Env env, const outbox_message *m) -> Napi::Value {
         return Napi::Number::New(env, static_cast<double>(outbox_message_previous_seq(m)));
     }},
};

// Every key a Message has: the envelope's fields, from the library, then the delivery's.
const std::vector<MessageKey> &message_keys() {
    static const std::vector<MessageKey> keys = [] {
        std::vector<MessageKey> out;
        const char *field = nullptr;
        outbox_field_kind kind = OUTBOX_FIELD_TEXT;
        for (size_t i = 0; outbox_envelope_field(&field, &kind, i) == OUTBOX_OK; ++i) {
            out.push_back(MessageKey{js_name(i, field, kind), field, nullptr});
        }
        out.insert(out.end(), std::begin(kDeliveryKeys), std::end(kDeliveryKeys));
        return out;
    }();
    return keys;
}

// message_value(msg, index) -> the value of message_keys[index]
Napi::Value MessageValue(const Napi::CallbackInfo &info) {
    const outbox_message *m = unwrap<outbox_message>(info, 0, Use::read)->ptr;
    const int64_t i = int64_arg(info, 1, "index");
    const auto &keys = message_keys();
    if (i < 0 || i >= static_cast<int64_t>(keys.size())) {
        throw type_error(info.Env(), "index is out of range");
    }
    const MessageKey &k = keys[static_cast<size_t>(i)];
    return k.read != nullptr ? k.read(info.Env(), m) : str_or_null(info.Env(), outbox_message_field(m, k.field));
}

} // namespace

void register_consumer(Napi::Env env, Napi::Object exports) {
    def(env, exports, "consumer_dedupe", ConsumerDedupe);
    def(env, exports, "render_dedupe", RenderDedupe);
    def(env, exports, "dedupe_interpret", DedupeInterpret);
    def(env, exports, "inbox_purge", InboxPurge);
    def(env, exports, "consumer_new", ConsumerNew);
    def(env, exports, "consumer_free", ConsumerFree);
    def(env, exports, "consumer_set_logger", ConsumerSetLogger);
    def(env, exports, "consumer_connect", ConsumerConnect);
    def(env, exports, "consumer_next", ConsumerNext);
    def(env, exports, "consumer_ack", ConsumerAck);
    def(env, exports, "consumer_nack", ConsumerNack);
    def(env, exports, "consumer_dead_letter", ConsumerDeadLetter);
    def(env, exports, "consumer_dedupe_message", ConsumerDedupeMessage);
    def(env, exports, "consumer_stop", ConsumerStop);
    def(env, exports, "consumer_reset", ConsumerReset);
    def(env, exports, "message_free", MessageFree);
    def(env, exports, "message_field", MessageField);
    def(env, exports, "message_property", MessageProperty);
    def(env, exports, "message_value", MessageValue);
    Napi::Array keys = Napi::Array::New(env, message_keys().size());
    for (uint32_t i = 0; i < message_keys().size(); ++i) {
        keys.Set(i, message_keys()[i].key);
    }
    exports.Set("message_keys", keys);
}

} // namespace outbox_node
