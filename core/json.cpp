#include "json.hpp"

#include "error.hpp"

#include <cctype>
#include <cstdio>
#include <cstdlib>

namespace outbox::json {

Ptr parse(std::string_view text) {
    const char *end = nullptr;
    Ptr root(cJSON_ParseWithLengthOpts(text.data(), text.size(), &end, false));
    if (!root || end == nullptr) {
        return nullptr;
    }
    // cJSON stops after the first value; anything but whitespace after it is not JSON.
    for (const char *p = end; p < text.data() + text.size(); ++p) {
        if (std::isspace(static_cast<unsigned char>(*p)) == 0) {
            return nullptr;
        }
    }
    return root;
}

void require_object(std::string_view text, const char *field) {
    Ptr root = parse(text);
    if (!root) {
        fail(Errc::invalid_event, std::string(field) + " is not valid JSON");
    }
    if (!cJSON_IsObject(root.get())) {
        fail(Errc::invalid_event, std::string(field) + " must be a JSON object");
    }
}

std::string print(const cJSON *node) {
    char *raw = cJSON_PrintUnformatted(node);
    if (raw == nullptr) {
        throw std::bad_alloc();
    }
    std::string out(raw);
    cJSON_free(raw);
    return out;
}

void append_string(std::string &out, std::string_view s) {
    static const char hex[] = "0123456789abcdef";
    out.push_back('"');
    for (char ch : s) {
        auto c = static_cast<unsigned char>(ch);
        switch (c) {
        case '"': out += "\\\""; break;
        case '\\': out += "\\\\"; break;
        case '\b': out += "\\b"; break;
        case '\f': out += "\\f"; break;
        case '\n': out += "\\n"; break;
        case '\r': out += "\\r"; break;
        case '\t': out += "\\t"; break;
        default:
            if (c < 0x20) {
                out += "\\u00";
                out.push_back(hex[c >> 4]);
                out.push_back(hex[c & 0xF]);
            } else {
                out.push_back(ch);
            }
        }
    }
    out.push_back('"');
}

} // namespace outbox::json

namespace outbox {

bool valid_utf8(std::string_view s) noexcept {
    const auto *p = reinterpret_cast<const unsigned char *>(s.data());
    const unsigned char *end = p + s.size();
    while (p < end) {
        unsigned char c = *p;
        if (c < 0x80) {
            ++p;
            continue;
        }
        int n = 0;
        unsigned cp = 0;
        if (c >= 0xC2 && c <= 0xDF) {
            n = 1;
            cp = c & 0x1F;
        } else if (c >= 0xE0 && c <= 0xEF) {
            n = 2;
            cp = c & 0x0F;
        } else if (c >= 0xF0 && c <= 0xF4) {
            n = 3;
            cp = c & 0x07;
        } else {
            return false;
        }
        if (end - p <= n) {
            return false;
        }
        for (int i = 1; i <= n; ++i) {
            if ((p[i] & 0xC0) != 0x80) {
                return false;
            }
            cp = (cp << 6) | (p[i] & 0x3F);
        }
        if ((n == 2 && cp < 0x800) || (n == 3 && cp < 0x10000) || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
            return false;
        }
        p += n + 1;
    }
    return true;
}

} // namespace outbox
