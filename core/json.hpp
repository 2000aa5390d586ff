// cJSON behind RAII, plus the validation the write path needs.
#pragma once

#include <cJSON.h>

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace outbox::json {

struct Deleter {
    void operator()(cJSON *p) const noexcept { cJSON_Delete(p); }
};
using Ptr = std::unique_ptr<cJSON, Deleter>;

// Parses exactly `text` (trailing whitespace allowed); nullptr when it is not one JSON value.
Ptr parse(std::string_view text);

// Throws Error(invalid_event) naming `field` unless `text` is a single JSON object that the
// envelope can carry (envelope_field_error()).
void require_object(std::string_view text, const char *field);

// Where `text` first breaks RFC 8259's grammar ("unexpected byte 0x01 at byte 0"); empty when it
// is one JSON value with nothing but JSON whitespace (space, tab, LF, CR) around it. Stricter than
// cJSON, as PostgreSQL's json type is (core/json_syntax.cpp).
std::string syntax_error(std::string_view text);

// syntax_error(), and what a reader of the envelope needs beyond the grammar: every \u escape a
// character (surrogates paired: cJSON, jsonb and the consumers refuse a lone one, though
// PostgreSQL's json type keeps it) and at most CJSON_NESTING_LIMIT - 1 levels of brackets (the
// envelope adds one; cJSON refuses more). Empty when the text passes.
std::string envelope_field_error(std::string_view text);

// Compact JSON text of a node (cJSON's printer), owned by the caller.
std::string print(const cJSON *node);

// The exact source text of each top-level member value of a JSON object, in order. Objects
// and numbers are handed on byte for byte (no re-printing: 64-bit integers stay exact).
// Call only on text parse() accepted. Returns false when `text` is not an object.
struct Member {
    std::string key;        // decoded key
    std::string_view value; // raw value text, a view into `text`
};
bool object_members(std::string_view text, std::vector<Member> &out);

// Decodes a JSON string literal's raw text (with quotes) into UTF-8; false when it is not one.
bool decode_string(std::string_view raw, std::string &out);

// Appends `s` as a JSON string literal (quotes and escapes) to `out`.
void append_string(std::string &out, std::string_view s);

} // namespace outbox::json

namespace outbox {
// True when `s` is well-formed UTF-8 (no overlongs, no surrogates, nothing above U+10FFFF).
bool valid_utf8(std::string_view s) noexcept;
} // namespace outbox
