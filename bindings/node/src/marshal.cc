// JS values to and from the C API's: events from plain objects, rendered statements as
// node-postgres queries, node-postgres errors as the facts the library's step machines judge.
// Marshalling only: what a field, a statement or an error means is the library's.
#include "common.h"

#include <cctype>
#include <functional>
#include <unordered_map>

namespace outbox_node {
namespace {

struct Field {
    std::string name; // the C name
    bool json = false;
};

std::string camel(const char *name) {
    std::string out;
    for (const char *p = name; *p != '\0'; ++p) {
        if (*p == '_' && p[1] != '\0') {
            out += static_cast<char>(std::toupper(static_cast<unsigned char>(*++p)));
        } else {
            out += *p;
        }
    }
    return out;
}

// The fields the library lists (outbox_event_field), in its order, by camelCase and by C name.
const std::vector<std::pair<std::string, Field>> &field_list() {
    static const auto list = [] {
        std::vector<std::pair<std::string, Field>> out;
        const char *name = nullptr;
        outbox_field_kind kind = OUTBOX_FIELD_TEXT;
        for (size_t i = 0; outbox_event_field(&name, &kind, i) == OUTBOX_OK; ++i) {
            out.emplace_back(camel(name), Field{name, kind == OUTBOX_FIELD_JSON});
        }
        return out;
    }();
    return list;
}

const Field *find_field(const std::string &key) {
    static const auto index = [] {
        std::unordered_map<std::string, const Field *> m;
        for (const auto &[camel_name, f] : field_list()) {
            m.emplace(camel_name, &f);
            m.emplace(f.name, &f);
        }
        return m;
    }();
    auto it = index.find(key);
    return it != index.end() ? it->second : nullptr;
}

// One field's value as the text outbox_event_set_n takes.
std::string field_text(Napi::Env env, const std::string &field, bool json, const Napi::Value &v) {
    if (v.IsString()) {
        return v.As<Napi::String>().Utf8Value();
    }
    if (v.IsTypedArray() && v.As<Napi::TypedArray>().TypedArrayType() == napi_uint8_array) {
        auto bytes = v.As<Napi::Uint8Array>();
        return std::string(reinterpret_cast<const char *>(bytes.Data()), bytes.ByteLength());
    }
    if (v.IsBoolean()) {
        return v.As<Napi::Boolean>().Value() ? "true" : "false";
    }
    if (v.IsNumber() || v.IsBigInt()) {
        return v.ToString().Utf8Value();
    }
    if (json && v.Type() == napi_object) {
        Napi::Value text = env.GetInstanceData<AddonData>()->stringify.Call({v});
        if (text.IsString()) {
            return text.As<Napi::String>().Utf8Value();
        }
    }
    throw type_error(env, "event field '" + field + "' must be a string" + (json ? " or an object" : ""));
}

bool is_sqlstate(const std::string &s) {
    return s.size() == 5 && std::all_of(s.begin(), s.end(), [](char c) { return std::isdigit(c) || std::isupper(c); });
}

// node-postgres on a connection that is gone: a network errno, or its words for a closed client.
bool lost(const std::string &code, std::string message) {
    static const char *const errnos[] = {"ECONNRESET",   "ECONNREFUSED", "EPIPE",       "ETIMEDOUT",
                                         "EHOSTUNREACH", "ENOTFOUND",    "ENETUNREACH", "ECONNABORTED"};
    static const char *const words[] = {"not queryable", "connection terminated", "connection is closed",
                                        "client was closed", "ended"};
    for (const char *e : errnos) {
        if (code == e) {
            return true;
        }
    }
    std::transform(message.begin(), message.end(), message.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    return std::any_of(std::begin(words), std::end(words),
                       [&](const char *w) { return message.find(w) != std::string::npos; });
}

std::string string_property(const Napi::Object &o, const char *name) {
    Napi::Value v = o.Get(name);
    return v.IsString() ? v.As<Napi::String>().Utf8Value() : std::string();
}

} // namespace

Napi::Array own_keys(Napi::Env env, const Napi::Object &o) {
    napi_value keys = nullptr;
    napi_status st = napi_get_all_property_names(
        env, o, napi_key_own_only, static_cast<napi_key_filter>(napi_key_enumerable | napi_key_skip_symbols),
        napi_key_numbers_to_strings, &keys);
    if (st != napi_ok) {
        throw Napi::Error::New(env);
    }
    return Napi::Array(env, keys);
}

Napi::Object pg_query(Napi::Env env, const outbox_statement *st, const char *prefix) {
    const char *sql = outbox_statement_sql(st);
    Napi::Object q = Napi::Object::New(env);
    q.Set("text", str_or_null(env, sql));
    q.Set("values", statement_values(env, st));
    q.Set("rowMode", "array");
    if (prefix != nullptr) {
        char hash[17];
        std::snprintf(hash, sizeof hash, "%016zx", std::hash<std::string_view>{}(sql != nullptr ? sql : ""));
        q.Set("name", std::string(prefix) + "_" + hash);
    }
    return q;
}

void set_event(Napi::Env env, outbox_event *ev, const Napi::Value &event) {
    if (event.Type() != napi_object || event.IsArray()) {
        throw type_error(env, "event must be an object like { aggregateType, aggregateId, operation, payload }");
    }
    Napi::Object o = event.As<Napi::Object>();
    Napi::Array keys = own_keys(env, o);
    std::vector<std::pair<std::string, std::string>> texts;
    for (uint32_t i = 0; i < keys.Length(); ++i) {
        Napi::Value key = keys.Get(i);
        Napi::Value v = o.Get(key);
        if (v.IsUndefined() || v.IsNull()) {
            continue;
        }
        const std::string name = key.As<Napi::String>().Utf8Value();
        const Field *f = find_field(name);
        const std::string &field = f != nullptr ? f->name : name;
        texts.emplace_back(field, field_text(env, field, f != nullptr && f->json, v));
    }
    for (const auto &[field, text] : texts) {
        check(env, outbox_event_set_n(ev, field.c_str(), text.data(), text.size()));
    }
}

Napi::Object event_field_names(Napi::Env env) {
    Napi::Object o = Napi::Object::New(env);
    for (const auto &[camel_name, f] : field_list()) {
        o.Set(camel_name, f.name);
    }
    return o;
}

DriverFailure::DriverFailure(const Napi::Value &err) {
    std::string code;
    if (err.IsObject()) {
        Napi::Object o = err.As<Napi::Object>();
        code = string_property(o, "code");
        constraint = string_property(o, "constraint");
        Napi::Value m = o.Get("message");
        if (m.ToBoolean()) {
            message = m.ToString().Utf8Value();
        }
    }
    if (message.empty()) {
        message = err.ToString().Utf8Value();
    }
    if (is_sqlstate(code)) {
        sqlstate = code;
    } else {
        closed = lost(code, message);
    }
}

} // namespace outbox_node
