// RFC 8259's grammar, as PostgreSQL's json type reads it, and what the envelope's readers need
// beyond it: the only check of an event's JSON fields on the write path (no cJSON tree is built).
// cJSON is lenient where PostgreSQL's json type is not: it skips any byte up to 0x20 as whitespace,
// takes control characters unescaped inside strings and numbers such as 01, 1. and 1.e5. Text it
// accepts and PostgreSQL rejects would fail the write's INSERT with a driver error instead of
// INVALID_EVENT, and a consumer's strict parser could not read a body built from it. cJSON is the
// project's JSON library (fixed by the brief) and has no strict mode; a second JSON library for a
// check this size seemed not worth its weight, so this scanner does it, and says where the text
// breaks.
#include "json.hpp"

#include <cstdio>
#include <limits>
#include <string>
#include <vector>

namespace outbox::json {
namespace {

bool is_ws(char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

bool is_digit(char c) {
    return c >= '0' && c <= '9';
}

bool is_hex(char c) {
    return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

// One pass over the text; the first error stops it, with the byte offset where it was found.
class Scanner {
  public:
    // max_depth: the most brackets open at once; readable_escapes: every \u escape a character (a
    // surrogate only as the first of a pair), as cJSON and PostgreSQL's jsonb decode them.
    Scanner(std::string_view t, size_t max_depth, bool readable_escapes)
        : t_(t), max_depth_(max_depth), readable_escapes_(readable_escapes) {}

    std::string run();

  private:
    enum class Next { value, member, after_value };

    std::string_view t_;
    size_t max_depth_;
    bool readable_escapes_;
    size_t i_ = 0;
    std::vector<char> open_; // the brackets not yet closed, '{' or '['
    std::string error_;

    [[nodiscard]] bool at_end() const { return i_ >= t_.size(); }
    void skip_ws() {
        while (!at_end() && is_ws(t_[i_])) {
            ++i_;
        }
    }
    bool fail(const std::string &what);
    bool unexpected();
    bool string();
    bool escape();
    bool unicode_escape();
    bool number();
    bool digits();
    bool literal();
    Next value();
    Next member();
    Next after_value(bool &done);
};

bool Scanner::fail(const std::string &what) {
    if (error_.empty()) {
        error_ = what + " at byte " + std::to_string(i_);
    }
    return false;
}

bool Scanner::unexpected() {
    if (at_end()) {
        return fail("unexpected end of the text");
    }
    const auto c = static_cast<unsigned char>(t_[i_]);
    if (c < 0x20 || c >= 0x7F) {
        char hex[8];
        std::snprintf(hex, sizeof hex, "0x%02x", c);
        return fail(std::string("unexpected byte ") + hex);
    }
    return fail(std::string("unexpected '") + static_cast<char>(c) + "'");
}

// A string literal at t_[i_] == '"': escapes as RFC 8259 lists them, no control character raw.
bool Scanner::string() {
    ++i_;
    while (!at_end()) {
        const auto c = static_cast<unsigned char>(t_[i_]);
        if (c == '"') {
            ++i_;
            return true;
        }
        if (c == '\\') {
            if (!escape()) {
                return false;
            }
            continue;
        }
        if (c < 0x20) {
            char hex[8];
            std::snprintf(hex, sizeof hex, "0x%02x", c);
            return fail(std::string("a control character (") + hex + ") not escaped in a string");
        }
        ++i_;
    }
    return fail("a string not closed");
}

bool Scanner::escape() {
    ++i_;
    if (at_end()) {
        return fail("a string not closed");
    }
    const char e = t_[i_];
    if (e == 'u') {
        return unicode_escape();
    }
    if (e == '"' || e == '\\' || e == '/' || e == 'b' || e == 'f' || e == 'n' || e == 'r' || e == 't') {
        ++i_;
        return true;
    }
    return fail("an unknown escape in a string");
}

// \uXXXX at t_[i_] == 'u'. With readable_escapes_, a high surrogate (D800-DBFF) must be followed
// by a \u low one (DC00-DFFF), read with it, and a low one alone is refused: such text is valid
// JSON and PostgreSQL's json type keeps it, but no reader can decode it into a character.
bool Scanner::unicode_escape() {
    const auto code_at = [this](size_t at, unsigned &code) {
        code = 0;
        for (size_t k = 0; k < 4; ++k) {
            if (at + k >= t_.size() || !is_hex(t_[at + k])) {
                return false;
            }
            const char h = t_[at + k];
            code = code * 16 + static_cast<unsigned>(is_digit(h) ? h - '0' : (h | 0x20) - 'a' + 10);
        }
        return true;
    };
    unsigned code = 0;
    if (!code_at(i_ + 1, code)) {
        return fail("\\u not followed by 4 hex digits");
    }
    if (readable_escapes_ && code >= 0xDC00 && code <= 0xDFFF) {
        return fail("a low surrogate escape (\\u" + std::string(t_.substr(i_ + 1, 4)) +
                    ") without a high one before it");
    }
    if (readable_escapes_ && code >= 0xD800 && code <= 0xDBFF) {
        unsigned low = 0;
        if (t_.substr(i_ + 5, 2) != "\\u" || !code_at(i_ + 7, low) || low < 0xDC00 || low > 0xDFFF) {
            return fail("a high surrogate escape (\\u" + std::string(t_.substr(i_ + 1, 4)) +
                        ") not followed by a low one");
        }
        i_ += 6;
    }
    i_ += 5;
    return true;
}

bool Scanner::digits() {
    if (at_end() || !is_digit(t_[i_])) {
        return fail("a number missing its digits");
    }
    while (!at_end() && is_digit(t_[i_])) {
        ++i_;
    }
    return true;
}

// -? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)?
bool Scanner::number() {
    if (t_[i_] == '-') {
        ++i_;
    }
    if (!at_end() && t_[i_] == '0') {
        ++i_;
        if (!at_end() && is_digit(t_[i_])) {
            return fail("a number with a leading zero");
        }
    } else if (!digits()) {
        return false;
    }
    if (!at_end() && t_[i_] == '.') {
        ++i_;
        if (!digits()) {
            return false;
        }
    }
    if (!at_end() && (t_[i_] == 'e' || t_[i_] == 'E')) {
        ++i_;
        if (!at_end() && (t_[i_] == '+' || t_[i_] == '-')) {
            ++i_;
        }
        if (!digits()) {
            return false;
        }
    }
    return true;
}

bool Scanner::literal() {
    for (const std::string_view word : {"true", "false", "null"}) {
        if (t_.substr(i_, word.size()) == word) {
            i_ += word.size();
            return true;
        }
    }
    return unexpected();
}

// A value at i_: a scalar is read whole; a bracket is opened (its first member or element next).
Scanner::Next Scanner::value() {
    skip_ws();
    if (at_end()) {
        unexpected();
        return Next::value;
    }
    const char c = t_[i_];
    if (c == '{' || c == '[') {
        if (open_.size() >= max_depth_) {
            fail("nested deeper than " + std::to_string(max_depth_) + " levels");
            return Next::value;
        }
        open_.push_back(c);
        ++i_;
        skip_ws();
        const char close = c == '{' ? '}' : ']';
        if (!at_end() && t_[i_] == close) {
            ++i_;
            open_.pop_back();
            return Next::after_value;
        }
        return c == '{' ? Next::member : Next::value;
    }
    if (c == '"') {
        string();
    } else if (c == '-' || is_digit(c)) {
        number();
    } else {
        literal();
    }
    return Next::after_value;
}

// A member's name and colon; its value next.
Scanner::Next Scanner::member() {
    skip_ws();
    if (at_end() || t_[i_] != '"') {
        fail("a member name expected");
        return Next::value;
    }
    if (!string()) {
        return Next::value;
    }
    skip_ws();
    if (at_end() || t_[i_] != ':') {
        fail("':' expected after a member name");
        return Next::value;
    }
    ++i_;
    return Next::value;
}

// After a value: the end of the text, a comma, or the innermost bracket's close.
Scanner::Next Scanner::after_value(bool &done) {
    skip_ws();
    if (open_.empty()) {
        if (!at_end()) {
            fail("text after the JSON value");
        }
        done = true;
        return Next::after_value;
    }
    const char open = open_.back();
    if (!at_end() && t_[i_] == ',') {
        ++i_;
        return open == '{' ? Next::member : Next::value;
    }
    if (!at_end() && t_[i_] == (open == '{' ? '}' : ']')) {
        ++i_;
        open_.pop_back();
        return Next::after_value;
    }
    fail(open == '{' ? "',' or '}' expected" : "',' or ']' expected");
    return Next::after_value;
}

std::string Scanner::run() {
    Next next = Next::value;
    bool done = false;
    while (!done && error_.empty()) {
        switch (next) {
        case Next::value:
            next = value();
            break;
        case Next::member:
            next = member();
            break;
        case Next::after_value:
            next = after_value(done);
            break;
        }
    }
    return error_;
}

} // namespace

std::string syntax_error(std::string_view text) {
    return Scanner(text, std::numeric_limits<size_t>::max(), false).run();
}

std::string envelope_field_error(std::string_view text) {
    // The envelope holds the field one level down, and its readers (cJSON in the consumer loop)
    // refuse more than CJSON_NESTING_LIMIT levels.
    return Scanner(text, CJSON_NESTING_LIMIT - 1, true).run();
}

} // namespace outbox::json
