// cJSON behind RAII, plus the validation the write path needs.
#pragma once

#include <cJSON.h>

#include <memory>
#include <string>
#include <string_view>

namespace outbox::json {

struct Deleter {
    void operator()(cJSON *p) const noexcept { cJSON_Delete(p); }
};
using Ptr = std::unique_ptr<cJSON, Deleter>;

// Parses exactly `text` (trailing whitespace allowed); nullptr when it is not one JSON value.
Ptr parse(std::string_view text);

// Throws Error(invalid_event) naming `field` unless `text` is a single JSON object.
void require_object(std::string_view text, const char *field);

// Compact JSON text of a node (cJSON's printer), owned by the caller.
std::string print(const cJSON *node);

// Appends `s` as a JSON string literal (quotes and escapes) to `out`.
void append_string(std::string &out, std::string_view s);

} // namespace outbox::json

namespace outbox {
// True when `s` is well-formed UTF-8 (no overlongs, no surrogates, nothing above U+10FFFF).
bool valid_utf8(std::string_view s) noexcept;
} // namespace outbox
