// Parked aggregates (outbox_parked_*): list, redrive, redrive all and skip, each a Promise run off
// the main thread on a Database. The JSON texts are handed over as they are, for lib/ to parse.
#include "common.h"

#include <functional>
#include <string>

namespace outbox_node {
namespace {

// A string or null argument, kept for the worker thread.
struct OptText {
    bool has = false;
    std::string text;
    OptText(const Napi::CallbackInfo &info, size_t index, const char *what)
        : text(opt_str_arg(info, index, what, has)) {}
    const char *get() const { return has ? text.c_str() : nullptr; }
};

// One outbox_parked_* call: `call` fills a count or a library string (freed here).
class ParkedWorker : public Worker {
  public:
    using Call = std::function<outbox_status(int64_t *, char **)>;
    ParkedWorker(Napi::Env env, const char *name, Call call) : Worker(env, name), call_(std::move(call)) {}
    ~ParkedWorker() override { outbox_string_free(text_); }

  protected:
    outbox_status run() override { return call_(&count_, &text_); }
    Napi::Value result(Napi::Env env) override {
        return text_ != nullptr ? Napi::Value(Napi::String::New(env, text_))
                                : Napi::Value(Napi::Number::New(env, static_cast<double>(count_)));
    }

  private:
    Call call_;
    int64_t count_ = 0;
    char *text_ = nullptr;
};

// Runs `call` on a worker thread, the Database held (busy) until it settles.
Napi::Value start(const Napi::CallbackInfo &info, Handle<outbox_db> *db, const char *name, ParkedWorker::Call call) {
    auto *w = new ParkedWorker(info.Env(), name, std::move(call));
    w->hold(info[0], db);
    return w->start();
}

// parked_list(db, consumer | null, includeRelay, limit) -> Promise<JSON text>
Napi::Value ParkedList(const Napi::CallbackInfo &info) {
    auto *h = unwrap<outbox_db>(info, 0);
    outbox_db *db = h->ptr;
    OptText consumer(info, 1, "consumer");
    const int relay = info[2].ToBoolean() ? 1 : 0;
    const int64_t limit = int64_arg(info, 3, "limit");
    const int lim = limit > 2147483647LL ? 2147483647 : limit < -1 ? -1 : static_cast<int>(limit);
    return start(info, h, "outbox_parked_list", [db, consumer, relay, lim](int64_t *, char **json) {
        return outbox_parked_list(json, db, consumer.get(), relay, lim);
    });
}

// parked_redrive(db, consumer | null, aggregateType | null, aggregateId) -> Promise<0 | 1>
Napi::Value ParkedRedrive(const Napi::CallbackInfo &info) {
    auto *h = unwrap<outbox_db>(info, 0);
    outbox_db *db = h->ptr;
    OptText consumer(info, 1, "consumer");
    OptText type(info, 2, "aggregateType");
    const std::string id = str_arg(info, 3, "aggregateId");
    return start(info, h, "outbox_parked_redrive", [db, consumer, type, id](int64_t *n, char **) {
        return outbox_parked_redrive(n, db, consumer.get(), type.get(), id.c_str());
    });
}

// parked_redrive_all(db, consumer) -> Promise<count>
Napi::Value ParkedRedriveAll(const Napi::CallbackInfo &info) {
    auto *h = unwrap<outbox_db>(info, 0);
    outbox_db *db = h->ptr;
    OptText consumer(info, 1, "consumer");
    return start(info, h, "outbox_parked_redrive_all",
                 [db, consumer](int64_t *n, char **) { return outbox_parked_redrive_all(n, db, consumer.get()); });
}

// parked_skip(db, consumer, aggregateType | null, aggregateId, eventId | null, by, reason) -> Promise<event id>
Napi::Value ParkedSkip(const Napi::CallbackInfo &info) {
    auto *h = unwrap<outbox_db>(info, 0);
    outbox_db *db = h->ptr;
    OptText consumer(info, 1, "consumer");
    OptText type(info, 2, "aggregateType");
    const std::string id = str_arg(info, 3, "aggregateId");
    OptText event(info, 4, "eventId");
    const std::string by = str_arg(info, 5, "by");
    const std::string reason = str_arg(info, 6, "reason");
    return start(info, h, "outbox_parked_skip", [db, consumer, type, id, event, by, reason](int64_t *, char **skipped) {
        return outbox_parked_skip(skipped, db, consumer.get(), type.get(), id.c_str(), event.get(), by.c_str(),
                                  reason.c_str());
    });
}

// metrics_text(db) -> Promise<Prometheus text> (outbox_metrics_text)
Napi::Value MetricsText(const Napi::CallbackInfo &info) {
    auto *h = unwrap<outbox_db>(info, 0);
    outbox_db *db = h->ptr;
    return start(info, h, "outbox_metrics_text", [db](int64_t *, char **text) { return outbox_metrics_text(text, db); });
}

} // namespace

void register_parked(Napi::Env env, Napi::Object exports) {
    def(env, exports, "parked_list", ParkedList);
    def(env, exports, "parked_redrive", ParkedRedrive);
    def(env, exports, "parked_redrive_all", ParkedRedriveAll);
    def(env, exports, "parked_skip", ParkedSkip);
    def(env, exports, "metrics_text", MetricsText);
}

} // namespace outbox_node
