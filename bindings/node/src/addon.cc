// Module entry point of the native layer: registers each area's functions.
#include "common.h"

namespace outbox_node {

namespace {

Napi::Value Version(const Napi::CallbackInfo &info) {
    return Napi::String::New(info.Env(), outbox_version());
}

Napi::Value VersionNumber(const Napi::CallbackInfo &info) {
    return Napi::Number::New(info.Env(), outbox_version_number());
}

Napi::Value StatusName(const Napi::CallbackInfo &info) {
    auto st = static_cast<outbox_status>(int64_arg(info, 0, "status"));
    return Napi::String::New(info.Env(), outbox_status_name(st));
}

// The JS layer's error class: new ErrorClass(message, code, status).
Napi::Value SetErrorClass(const Napi::CallbackInfo &info) {
    if (!info[0].IsFunction()) {
        throw type_error(info.Env(), "error class must be a function");
    }
    info.Env().GetInstanceData<AddonData>()->error_class = Napi::Persistent(info[0].As<Napi::Function>());
    return info.Env().Undefined();
}

} // namespace

void register_common(Napi::Env env, Napi::Object exports) {
    def(env, exports, "version", Version);
    def(env, exports, "version_number", VersionNumber);
    def(env, exports, "status_name", StatusName);
    def(env, exports, "set_error_class", SetErrorClass);
    Napi::Object codes = Napi::Object::New(env);
    for (int s = OUTBOX_OK; s >= OUTBOX_ERR_NOT_FOUND; --s) {
        codes.Set(outbox_status_name(static_cast<outbox_status>(s)), Napi::Number::New(env, s));
    }
    exports.Set("status", codes);
    // The C enums a face names, from outbox.h as the addon was compiled against it.
    auto table = [&](const auto &items) {
        Napi::Object o = Napi::Object::New(env);
        for (const auto &e : items) {
            o.Set(e.name, Napi::Number::New(env, e.value));
        }
        return o;
    };
    Napi::Object enums = Napi::Object::New(env);
    enums.Set("tx", table(kTxStates));
    enums.Set("order", table(kOrders));
    enums.Set("migrate", table(kMigrateTargets));
    exports.Set("enums", enums);
}

} // namespace outbox_node

namespace {

Napi::Object Init(Napi::Env env, Napi::Object exports) {
    env.SetInstanceData(new outbox_node::AddonData());
    outbox_node::register_common(env, exports);
    outbox_node::register_config(env, exports);
    outbox_node::register_db(env, exports);
    outbox_node::register_event(env, exports);
    outbox_node::register_relay(env, exports);
    outbox_node::register_consumer(env, exports);
    outbox_node::register_loop(env, exports);
    outbox_node::register_write_plan(env, exports);
    outbox_node::register_parked(env, exports);
    return exports;
}

} // namespace

NODE_API_MODULE(outbox, Init)
