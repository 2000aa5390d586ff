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

} // namespace

void register_config(Napi::Env env, Napi::Object exports) {
    def(env, exports, "config_new", ConfigNew);
    def(env, exports, "config_free", ConfigFree);
    def(env, exports, "config_set", ConfigSet);
    def(env, exports, "config_get", ConfigGet);
    def(env, exports, "config_key", ConfigKey);
}

} // namespace outbox_node
