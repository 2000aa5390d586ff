// JS values to and from the C API's: event fields and their values, rendered statements as
// node-postgres queries, node-postgres errors as the facts the library's step machines judge.
// Marshalling only: what a field, a statement or an error means is the library's.
#include "common.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <functional>

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

// The fields the library lists (outbox_event_field), in its order, by camelCase name.
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

// One field's value as the text outbox_event_set_n takes (JSON objects come as text already).
std::string field_text(Napi::Env env, const std::string &field, const Napi::Value &v) {
    std::string text;
    if (scalar_text(v, text)) {
        return text;
    }
    if (v.IsTypedArray() && v.As<Napi::TypedArray>().TypedArrayType() == napi_uint8_array) {
        auto bytes = v.As<Napi::Uint8Array>();
        return std::string(reinterpret_cast<const char *>(bytes.Data()), bytes.ByteLength());
    }
    const auto &fields = field_list();
    const bool json = std::any_of(fields.begin(), fields.end(),
                                  [&](const auto &f) { return f.second.json && f.second.name == field; });
    throw type_error(env, "event field '" + field + "' must be a string" + (json ? " or an object" : ""));
}

bool is_sqlstate(const std::string &s) {
    return s.size() == 5 && std::all_of(s.begin(), s.end(), [](char c) { return std::isdigit(c) || std::isupper(c); });
}

// node-postgres on a connection that is gone: a network errno, or one of these phrases found in the
// lower-cased message, from what it and Node say of a closed or ended connection:
//   "Client was closed and is not queryable", "Client has encountered a connection error and is not
//   queryable" (pg); "Connection terminated", "... unexpectedly", "... due to connection timeout" (pg);
//   "connection is closed" (kept from the first list; node-postgres itself does not say it); "This
//   socket has been ended by the other party" (Node's net). Not a bare "ended": it is in "extended",
//   "appended" and other words of messages about anything.
bool lost(const std::string &code, std::string message) {
    static const char *const errnos[] = {"ECONNRESET",   "ECONNREFUSED", "EPIPE",       "ETIMEDOUT",
                                         "EHOSTUNREACH", "ENOTFOUND",    "ENETUNREACH", "ECONNABORTED"};
    static const char *const words[] = {"not queryable", "connection terminated", "connection is closed",
                                        "client was closed", "socket has been ended"};
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

bool scalar_text(const Napi::Value &v, std::string &out) {
    if (v.IsString()) {
        out = v.As<Napi::String>().Utf8Value();
    } else if (v.IsNumber() || v.IsBigInt()) {
        out = v.ToString().Utf8Value();
    } else if (v.IsBoolean()) {
        out = v.As<Napi::Boolean>().Value() ? "true" : "false";
    } else {
        return false;
    }
    return true;
}

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

const std::string &StatementNames::get(const char *prefix, std::string_view sql) {
    for (const Entry &e : entries_) {
        if (e.sql == sql && e.prefix == prefix) {
            return e.name;
        }
    }
    char hash[17];
    std::snprintf(hash, sizeof hash, "%016zx", std::hash<std::string_view>{}(sql));
    Entry made{prefix, std::string(sql), std::string(prefix) + "_" + hash};
    if (entries_.size() < kMax) {
        entries_.push_back(std::move(made));
        return entries_.back().name;
    }
    Entry &slot = entries_[next_];
    next_ = (next_ + 1) % kMax;
    slot = std::move(made);
    return slot.name;
}

Napi::Object pg_query(Napi::Env env, const outbox_statement *st, const char *prefix) {
    const char *sql = outbox_statement_sql(st);
    Napi::Object q = Napi::Object::New(env);
    q.Set("text", str_or_null(env, sql));
    q.Set("values", statement_values(env, st));
    q.Set("rowMode", "array");
    if (prefix != nullptr) {
        q.Set("name", env.GetInstanceData<AddonData>()->statement_names.get(prefix, sql != nullptr ? sql : ""));
    }
    return q;
}

void set_event(Napi::Env env, outbox_event *ev, const Napi::Value &fields) {
    if (!fields.IsArray()) {
        throw type_error(env, "event must be an object like { aggregateType, aggregateId, operation, payload }");
    }
    Napi::Array arr = fields.As<Napi::Array>();
    const uint32_t n = arr.Length();
    std::vector<std::pair<std::string, std::string>> texts;
    texts.reserve(n / 2);
    for (uint32_t i = 0; i + 1 < n; i += 2) {
        Napi::Value name = arr.Get(i);
        if (!name.IsString()) {
            throw type_error(env, "event field names must be strings");
        }
        std::string field = name.As<Napi::String>().Utf8Value();
        std::string text = field_text(env, field, arr.Get(i + 1));
        texts.emplace_back(std::move(field), std::move(text));
    }
    for (const auto &[field, text] : texts) {
        check(env, outbox_event_set_n(ev, field.c_str(), text.data(), text.size()));
    }
}

void export_event_fields(Napi::Env env, Napi::Object exports) {
    Napi::Object names = Napi::Object::New(env);
    Napi::Array json = Napi::Array::New(env);
    for (const auto &[camel_name, f] : field_list()) {
        names.Set(camel_name, f.name);
        if (f.json) {
            json.Set(json.Length(), f.name);
        }
    }
    exports.Set("fields", names);
    exports.Set("json_fields", json);
}

outbox_tx_state tx_of(const Napi::Value &status) {
    const std::string s = status.IsString() ? status.As<Napi::String>().Utf8Value() : std::string();
    return s == "I" ? OUTBOX_TX_IDLE : s == "E" ? OUTBOX_TX_INERROR : OUTBOX_TX_INTRANS;
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
