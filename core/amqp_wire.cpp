#include "amqp_wire.hpp"

#include <algorithm>
#include <optional>

namespace outbox::amqp {

amqp_bytes_t bytes_of(std::string_view s) {
    amqp_bytes_t b;
    b.len = s.size();
    b.bytes = const_cast<char *>(s.data());
    return b;
}

std::string str_of(const amqp_bytes_t &b) {
    if (b.bytes == nullptr || b.len == 0) {
        return {};
    }
    return std::string(static_cast<const char *>(b.bytes), b.len);
}

EncodedTable::EncodedTable(const Table &t) {
    entries_.reserve(t.size());
    for (const auto &[key, value] : t) {
        amqp_table_entry_t e{};
        e.key = bytes_of(key);
        if (const auto *s = std::get_if<std::string>(&value)) {
            e.value.kind = AMQP_FIELD_KIND_UTF8;
            e.value.value.bytes = bytes_of(*s);
        } else if (const auto *i = std::get_if<int64_t>(&value)) {
            e.value.kind = AMQP_FIELD_KIND_I64;
            e.value.value.i64 = *i;
        } else {
            e.value.kind = AMQP_FIELD_KIND_BOOLEAN;
            e.value.value.boolean = std::get<bool>(value) ? 1 : 0;
        }
        entries_.push_back(e);
    }
}

amqp_table_t EncodedTable::get() const {
    amqp_table_t t;
    t.num_entries = static_cast<int>(entries_.size());
    t.entries = entries_.empty() ? nullptr : const_cast<amqp_table_entry_t *>(entries_.data());
    return t;
}

namespace {

std::optional<FieldValue> decode_value(const amqp_field_value_t &v) {
    switch (v.kind) {
    case AMQP_FIELD_KIND_BOOLEAN:
        return FieldValue(v.value.boolean != 0);
    case AMQP_FIELD_KIND_I8:
        return FieldValue(static_cast<int64_t>(v.value.i8));
    case AMQP_FIELD_KIND_U8:
        return FieldValue(static_cast<int64_t>(v.value.u8));
    case AMQP_FIELD_KIND_I16:
        return FieldValue(static_cast<int64_t>(v.value.i16));
    case AMQP_FIELD_KIND_U16:
        return FieldValue(static_cast<int64_t>(v.value.u16));
    case AMQP_FIELD_KIND_I32:
        return FieldValue(static_cast<int64_t>(v.value.i32));
    case AMQP_FIELD_KIND_U32:
        return FieldValue(static_cast<int64_t>(v.value.u32));
    case AMQP_FIELD_KIND_I64:
        return FieldValue(v.value.i64);
    case AMQP_FIELD_KIND_U64:
    case AMQP_FIELD_KIND_TIMESTAMP:
        // Wraps above INT64_MAX; no real header carries such values and the type stays simple.
        return FieldValue(static_cast<int64_t>(v.value.u64));
    case AMQP_FIELD_KIND_UTF8:
    case AMQP_FIELD_KIND_BYTES:
        return FieldValue(str_of(v.value.bytes));
    default:
        return std::nullopt; // float, decimal, void, nested table/array (e.g. x-death): not representable
    }
}

} // namespace

Table decode_table(const amqp_table_t &t) {
    Table out;
    if (t.entries == nullptr) {
        return out;
    }
    out.reserve(static_cast<size_t>(std::max(t.num_entries, 0)));
    for (int i = 0; i < t.num_entries; ++i) {
        if (auto v = decode_value(t.entries[i].value)) {
            out.emplace_back(str_of(t.entries[i].key), std::move(*v));
        }
    }
    return out;
}

Properties decode_properties(const amqp_basic_properties_t &p) {
    Properties out;
    const amqp_flags_t f = p._flags;
    if ((f & AMQP_BASIC_CONTENT_TYPE_FLAG) != 0) {
        out.content_type = str_of(p.content_type);
    }
    if ((f & AMQP_BASIC_MESSAGE_ID_FLAG) != 0) {
        out.message_id = str_of(p.message_id);
    }
    if ((f & AMQP_BASIC_TYPE_FLAG) != 0) {
        out.type = str_of(p.type);
    }
    if ((f & AMQP_BASIC_CORRELATION_ID_FLAG) != 0) {
        out.correlation_id = str_of(p.correlation_id);
    }
    if ((f & AMQP_BASIC_APP_ID_FLAG) != 0) {
        out.app_id = str_of(p.app_id);
    }
    if ((f & AMQP_BASIC_DELIVERY_MODE_FLAG) != 0) {
        out.delivery_mode = p.delivery_mode;
    }
    if ((f & AMQP_BASIC_TIMESTAMP_FLAG) != 0) {
        out.timestamp = static_cast<int64_t>(p.timestamp);
    }
    if ((f & AMQP_BASIC_HEADERS_FLAG) != 0) {
        out.headers = decode_table(p.headers);
    }
    return out;
}

amqp_table_entry_t bool_entry(const char *key, bool v) {
    amqp_table_entry_t e{};
    e.key = amqp_cstring_bytes(key);
    e.value.kind = AMQP_FIELD_KIND_BOOLEAN;
    e.value.value.boolean = v ? 1 : 0;
    return e;
}

amqp_table_entry_t string_entry(const char *key, const std::string &v) {
    amqp_table_entry_t e{};
    e.key = amqp_cstring_bytes(key);
    e.value.kind = AMQP_FIELD_KIND_UTF8;
    e.value.value.bytes = bytes_of(v);
    return e;
}

} // namespace outbox::amqp
