#include "error.hpp"

namespace outbox {

const char *errc_name(Errc code) noexcept {
    switch (code) {
    case Errc::ok: return "OK";
    case Errc::invalid_argument: return "INVALID_ARGUMENT";
    case Errc::invalid_event: return "INVALID_EVENT";
    case Errc::too_large: return "TOO_LARGE";
    case Errc::duplicate: return "DUPLICATE";
    case Errc::database: return "DATABASE";
    case Errc::connection: return "CONNECTION";
    case Errc::broker: return "BROKER";
    case Errc::timeout: return "TIMEOUT";
    case Errc::schema: return "SCHEMA";
    case Errc::transaction: return "TRANSACTION";
    case Errc::no_memory: return "NO_MEMORY";
    case Errc::stopped: return "STOPPED";
    case Errc::internal: return "INTERNAL";
    case Errc::unknown_key: return "UNKNOWN_KEY";
    case Errc::not_found: return "NOT_FOUND";
    }
    return "UNKNOWN";
}

namespace {

// The printable text of `input` up to `max` bytes; `used` gets how many bytes it covers.
// keep_lines leaves '\n' and '\t' as they are (multi-line messages).
std::string printable_prefix(std::string_view input, size_t max, size_t &used, bool keep_lines = false) {
    static const char hex[] = "0123456789abcdef";
    std::string out;
    size_t i = 0;
    while (i < input.size() && i < max) {
        const auto c = static_cast<unsigned char>(input[i]);
        size_t n = c < 0x80 ? 1 : (c >= 0xC2 && c <= 0xDF) ? 2 : (c >= 0xE0 && c <= 0xEF) ? 3 : (c >= 0xF0 && c <= 0xF4) ? 4 : 0;
        bool ok = n > 0 && i + n <= input.size() &&
                  !(n == 1 && (c < 0x20 || c == 0x7F) && !(keep_lines && (c == '\n' || c == '\t')));
        for (size_t k = 1; ok && k < n; ++k) {
            ok = (static_cast<unsigned char>(input[i + k]) & 0xC0) == 0x80;
        }
        if (ok && n == 3) {
            const auto c1 = static_cast<unsigned char>(input[i + 1]);
            ok = !(c == 0xE0 && c1 < 0xA0) && !(c == 0xED && c1 >= 0xA0); // overlong, surrogate
        } else if (ok && n == 4) {
            const auto c1 = static_cast<unsigned char>(input[i + 1]);
            ok = !(c == 0xF0 && c1 < 0x90) && !(c == 0xF4 && c1 >= 0x90); // overlong, > U+10FFFF
        }
        if (ok) {
            out.append(input.substr(i, n));
            i += n;
        } else {
            out += "\\x";
            out.push_back(hex[c >> 4]);
            out.push_back(hex[c & 0xF]);
            ++i;
        }
    }
    used = i;
    return out;
}

std::string shortened(std::string_view input, size_t used) {
    return used < input.size() ? " (" + std::to_string(input.size()) + " bytes, shortened)" : std::string();
}

} // namespace

std::string printable(std::string_view input, size_t max) {
    size_t used = 0;
    std::string p = printable_prefix(input, max, used);
    return p + shortened(input, used);
}

std::string message_text(std::string_view input, size_t max) {
    size_t used = 0;
    std::string p = printable_prefix(input, max, used, true);
    return p + shortened(input, used);
}

std::string quote_input(std::string_view input, size_t max) {
    size_t used = 0;
    std::string p = printable_prefix(input, max, used);
    return "'" + p + "'" + shortened(input, used);
}

bool errc_retriable(Errc code) noexcept {
    return code == Errc::connection || code == Errc::broker || code == Errc::timeout;
}

} // namespace outbox
