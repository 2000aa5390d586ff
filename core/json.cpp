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

// One pass of the scanner, no parse: a write checks each JSON field once and builds nothing from
// it (a cJSON tree of the payload, built and freed, was a fifth of outbox_write's instructions).
void require_object(std::string_view text, const char *field) {
    const std::string error = envelope_field_error(text);
    if (!error.empty()) {
        fail(Errc::invalid_event, std::string(field) + " is not valid JSON: " + error);
    }
    const size_t first = text.find_first_not_of(" \t\n\r");
    if (first == std::string_view::npos || text[first] != '{') {
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

namespace {

void skip_ws(std::string_view t, size_t &i) {
    while (i < t.size() && (t[i] == ' ' || t[i] == '\t' || t[i] == '\n' || t[i] == '\r')) {
        ++i;
    }
}

// Moves i past one string literal starting at t[i] == '"'.
bool skip_string(std::string_view t, size_t &i) {
    ++i;
    while (i < t.size()) {
        if (t[i] == '\\') {
            i += 2;
        } else if (t[i] == '"') {
            ++i;
            return true;
        } else {
            ++i;
        }
    }
    return false;
}

// Moves i past one value (of already validated JSON).
bool skip_value(std::string_view t, size_t &i) {
    if (i >= t.size()) {
        return false;
    }
    if (t[i] == '"') {
        return skip_string(t, i);
    }
    if (t[i] == '{' || t[i] == '[') {
        int depth = 0;
        while (i < t.size()) {
            char c = t[i];
            if (c == '"') {
                if (!skip_string(t, i)) {
                    return false;
                }
                continue;
            }
            if (c == '{' || c == '[') {
                ++depth;
            } else if (c == '}' || c == ']') {
                --depth;
                if (depth == 0) {
                    ++i;
                    return true;
                }
            }
            ++i;
        }
        return false;
    }
    while (i < t.size() && t[i] != ',' && t[i] != '}' && t[i] != ']' && t[i] != ' ' && t[i] != '\n' &&
           t[i] != '\t' && t[i] != '\r') {
        ++i;
    }
    return true;
}

void append_utf8(std::string &out, unsigned cp) {
    if (cp < 0x80) {
        out.push_back(static_cast<char>(cp));
    } else if (cp < 0x800) {
        out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
        out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else if (cp < 0x10000) {
        out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
        out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
        out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else {
        out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
        out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
        out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
        out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
}

bool hex4(std::string_view t, size_t i, unsigned &v) {
    if (i + 4 > t.size()) {
        return false;
    }
    v = 0;
    for (size_t k = i; k < i + 4; ++k) {
        char c = t[k];
        v <<= 4;
        if (c >= '0' && c <= '9') {
            v |= unsigned(c - '0');
        } else if (c >= 'a' && c <= 'f') {
            v |= unsigned(c - 'a' + 10);
        } else if (c >= 'A' && c <= 'F') {
            v |= unsigned(c - 'A' + 10);
        } else {
            return false;
        }
    }
    return true;
}

} // namespace

bool decode_string(std::string_view raw, std::string &out) {
    out.clear();
    if (raw.size() < 2 || raw.front() != '"' || raw.back() != '"') {
        return false;
    }
    for (size_t i = 1; i + 1 < raw.size(); ++i) {
        char c = raw[i];
        if (c != '\\') {
            out.push_back(c);
            continue;
        }
        if (++i >= raw.size() - 1) {
            return false; // a backslash right before the closing quote
        }
        switch (raw[i]) {
        case '"': out.push_back('"'); break;
        case '\\': out.push_back('\\'); break;
        case '/': out.push_back('/'); break;
        case 'b': out.push_back('\b'); break;
        case 'f': out.push_back('\f'); break;
        case 'n': out.push_back('\n'); break;
        case 'r': out.push_back('\r'); break;
        case 't': out.push_back('\t'); break;
        case 'u': {
            unsigned cp = 0;
            if (!hex4(raw, i + 1, cp)) {
                return false;
            }
            i += 4;
            if (cp >= 0xD800 && cp <= 0xDBFF && i + 6 < raw.size() && raw[i + 1] == '\\' && raw[i + 2] == 'u') {
                unsigned lo = 0;
                if (hex4(raw, i + 3, lo) && lo >= 0xDC00 && lo <= 0xDFFF) {
                    cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                    i += 6;
                }
            }
            append_utf8(out, cp);
            break;
        }
        default: return false;
        }
    }
    return true;
}

bool object_members(std::string_view t, std::vector<Member> &out) {
    out.clear();
    size_t i = 0;
    skip_ws(t, i);
    if (i >= t.size() || t[i] != '{') {
        return false;
    }
    ++i;
    skip_ws(t, i);
    if (i < t.size() && t[i] == '}') {
        return true;
    }
    while (i < t.size()) {
        skip_ws(t, i);
        size_t k0 = i;
        if (i >= t.size() || t[i] != '"' || !skip_string(t, i)) {
            return false;
        }
        Member m;
        if (!decode_string(t.substr(k0, i - k0), m.key)) {
            return false;
        }
        skip_ws(t, i);
        if (i >= t.size() || t[i] != ':') {
            return false;
        }
        ++i;
        skip_ws(t, i);
        size_t v0 = i;
        if (!skip_value(t, i)) {
            return false;
        }
        m.value = t.substr(v0, i - v0);
        out.push_back(std::move(m));
        skip_ws(t, i);
        if (i < t.size() && t[i] == ',') {
            ++i;
            continue;
        }
        return i < t.size() && t[i] == '}';
    }
    return false;
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
