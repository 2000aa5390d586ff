// outbox_config_*: options by key.
#include "common.h"

#include <algorithm>

namespace outbox_node {
namespace {

// Sets every key of `options` but those named in `skip` (an array) and those set to undefined.
void set_options(Napi::Env env, outbox_config *cfg, const Napi::Value &options, const Napi::Value &skip) {
    if (options.Type() != napi_object || options.IsArray()) {
        throw type_error(env, "options must be an object of configuration keys");
    }
    std::vector<std::string> skipped;
    if (skip.IsArray()) {
        for (uint32_t i = 0; i < skip.As<Napi::Array>().Length(); ++i) {
            skipped.push_back(skip.As<Napi::Array>().Get(i).ToString().Utf8Value());
        }
    }
    Napi::Object o = options.As<Napi::Object>();
    Napi::Array keys = own_keys(env, o);
    for (uint32_t i = 0; i < keys.Length(); ++i) {
        const std::string key = keys.Get(i).ToString().Utf8Value();
        Napi::Value v = o.Get(key);
        if (v.IsUndefined() || std::find(skipped.begin(), skipped.end(), key) != skipped.end()) {
            continue;
        }
        std::string text;
        if (!scalar_text(v, text)) {
            throw type_error(env, "option '" + key + "' must be a string, number or boolean");
        }
        check(env, outbox_config_set(cfg, key.c_str(), text.c_str()));
    }
}

// config_new(options?: object, skip?: string[]) -> outbox_config holding the options' keys
// (outbox_config_set each: UNKNOWN_KEY, INVALID_ARGUMENT as the library says).
Napi::Value ConfigNew(const Napi::CallbackInfo &info) {
    Napi::Env env = info.Env();
    outbox_config *raw = nullptr;
    check(env, outbox_config_new(&raw));
    std::unique_ptr<outbox_config, void (*)(outbox_config *)> cfg(raw, outbox_config_free);
    if (!info[0].IsUndefined() && !info[0].IsNull()) {
        set_options(env, cfg.get(), info[0], info[1]);
    }
    return wrap(env, cfg.release());
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

// driver_error(context, error of node-postgres) -> the library's error for it (outbox_driver_error),
// its `cause` the driver's; an OutboxError is returned as it is.
Napi::Value DriverError(const Napi::CallbackInfo &info) {
    Napi::Env env = info.Env();
    const std::string context = str_arg(info, 0, "context");
    if (!info[1].IsObject()) {
        throw type_error(env, "error must be an object");
    }
    auto *data = env.GetInstanceData<AddonData>();
    if (!data->error_class.IsEmpty() && info[1].As<Napi::Object>().InstanceOf(data->error_class.Value())) {
        return info[1];
    }
    const DriverFailure f(info[1]);
    const outbox_status st =
        outbox_driver_error(context.c_str(), f.sqlstate.c_str(), f.message.c_str(), f.closed ? 1 : 0);
    Napi::Error e = status_error(env, st, outbox_last_error());
    e.Set("cause", info[1]);
    return e.Value();
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
    def(env, exports, "driver_error", DriverError);
    def(env, exports, "idempotency_index", IdempotencyIndex);
}

} // namespace outbox_node
