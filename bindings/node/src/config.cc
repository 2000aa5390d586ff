// outbox_config_*: options by key.
#include "common.h"

namespace outbox_node {
namespace {

// config_new() -> outbox_config
Napi::Value ConfigNew(const Napi::CallbackInfo &info) {
    outbox_config *cfg = nullptr;
    check(info.Env(), outbox_config_new(&cfg));
    return wrap(info.Env(), cfg);
}

Napi::Value ConfigFree(const Napi::CallbackInfo &info) {
    if (auto *h = unwrap<outbox_config>(info, 0, Use::release)) {
        h->release();
    }
    return info.Env().Undefined();
}

// config_set(cfg, key, value: string)
Napi::Value ConfigSet(const Napi::CallbackInfo &info) {
    auto *h = unwrap<outbox_config>(info, 0);
    std::string key = str_arg(info, 1, "key");
    std::string value = str_arg(info, 2, "value");
    check(info.Env(), outbox_config_set(h->ptr, key.c_str(), value.c_str()));
    return info.Env().Undefined();
}

// config_get(cfg, key) -> string
Napi::Value ConfigGet(const Napi::CallbackInfo &info) {
    auto *h = unwrap<outbox_config>(info, 0, Use::read);
    std::string key = str_arg(info, 1, "key");
    char *out = nullptr;
    check(info.Env(), outbox_config_get(&out, h->ptr, key.c_str()));
    Napi::String s = Napi::String::New(info.Env(), out != nullptr ? out : "");
    outbox_string_free(out);
    return s;
}

// config_key(index) -> {key, help} | null past the last key
Napi::Value ConfigKey(const Napi::CallbackInfo &info) {
    int64_t index = int64_arg(info, 0, "index");
    const char *key = nullptr;
    const char *help = nullptr;
    if (index < 0) {
        return info.Env().Null();
    }
    outbox_status st = outbox_config_key(&key, &help, static_cast<size_t>(index));
    if (st == OUTBOX_ERR_NOT_FOUND) {
        return info.Env().Null();
    }
    check(info.Env(), st);
    Napi::Object o = Napi::Object::New(info.Env());
    o.Set("key", str_or_null(info.Env(), key));
    o.Set("help", str_or_null(info.Env(), help));
    return o;
}

// ---- the rules the JS layer reads instead of copying (outbox.h: Shared rules) ----

// config_from_env(cfg, overwrite: boolean): pg.url / amqp.url from OUTBOX_PG_URL / OUTBOX_AMQP_URL.
Napi::Value ConfigFromEnv(const Napi::CallbackInfo &info) {
    auto *h = unwrap<outbox_config>(info, 0);
    const bool overwrite = info.Length() > 1 && info[1].IsBoolean() && info[1].As<Napi::Boolean>().Value();
    check(info.Env(), outbox_config_from_env(h->ptr, overwrite ? 1 : 0));
    return info.Env().Undefined();
}

// event_field(index) -> {name, kind} | null past the last field (kind: 0 text, 1 JSON, 2 flag)
Napi::Value EventField(const Napi::CallbackInfo &info) {
    int64_t index = int64_arg(info, 0, "index");
    const char *name = nullptr;
    outbox_field_kind kind = OUTBOX_FIELD_TEXT;
    if (index < 0) {
        return info.Env().Null();
    }
    outbox_status st = outbox_event_field(&name, &kind, static_cast<size_t>(index));
    if (st == OUTBOX_ERR_NOT_FOUND) {
        return info.Env().Null();
    }
    check(info.Env(), st);
    Napi::Object o = Napi::Object::New(info.Env());
    o.Set("name", str_or_null(info.Env(), name));
    o.Set("kind", Napi::Number::New(info.Env(), static_cast<int>(kind)));
    return o;
}

// status_for_sqlstate(sqlstate: string | null) -> the status name ('DUPLICATE', 'SCHEMA', ...)
Napi::Value StatusForSqlstate(const Napi::CallbackInfo &info) {
    std::string s;
    const bool given = info.Length() > 0 && info[0].IsString();
    if (given) {
        s = info[0].As<Napi::String>().Utf8Value();
    }
    const outbox_status st = outbox_status_for_sqlstate(given ? s.c_str() : nullptr);
    return Napi::String::New(info.Env(), outbox_status_name(st));
}

// idempotency_index(cfg | null) -> the idempotency key's unique index name
Napi::Value IdempotencyIndex(const Napi::CallbackInfo &info) {
    auto *cfg = unwrap_opt<outbox_config>(info, 0);
    char *out = nullptr;
    check(info.Env(), outbox_idempotency_index(&out, cfg != nullptr ? cfg->ptr : nullptr));
    Napi::String s = Napi::String::New(info.Env(), out);
    outbox_string_free(out);
    return s;
}

} // namespace

void register_config(Napi::Env env, Napi::Object exports) {
    def(env, exports, "config_new", ConfigNew);
    def(env, exports, "config_free", ConfigFree);
    def(env, exports, "config_set", ConfigSet);
    def(env, exports, "config_get", ConfigGet);
    def(env, exports, "config_key", ConfigKey);
    def(env, exports, "config_from_env", ConfigFromEnv);
    def(env, exports, "event_field", EventField);
    def(env, exports, "status_for_sqlstate", StatusForSqlstate);
    def(env, exports, "idempotency_index", IdempotencyIndex);
}

} // namespace outbox_node
