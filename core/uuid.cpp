#include "uuid.hpp"

#include "error.hpp"

#include <sys/random.h>

#include <array>
#include <cerrno>
#include <cstring>

namespace outbox::uuid {
namespace {

void random_bytes(unsigned char *buf, size_t n) {
    size_t got = 0;
    while (got < n) {
        ssize_t r = getrandom(buf + got, n - got, 0);
        if (r < 0) {
            if (errno == EINTR) {
                continue;
            }
            fail(Errc::internal, std::string("getrandom failed: ") + std::strerror(errno));
        }
        got += static_cast<size_t>(r);
    }
}

struct Last {
    uint64_t ms = 0;
    uint16_t counter = 0;
};
thread_local Last last;

} // namespace

std::string v7(uint64_t unix_ms) {
    std::array<unsigned char, 16> b{};
    random_bytes(b.data(), b.size());
    // Monotonic within a thread: same (or earlier, clock stepped back) millisecond -> bump the
    // 12-bit counter seeded from random bits; on overflow borrow the next millisecond.
    uint16_t counter = static_cast<uint16_t>(((b[6] & 0x0F) << 8 | b[7]) & 0x7FF); // leave headroom
    if (unix_ms <= last.ms) {
        unix_ms = last.ms;
        counter = static_cast<uint16_t>(last.counter + 1);
        if (counter > 0xFFF) {
            unix_ms += 1;
            counter = 0;
        }
    }
    last.ms = unix_ms;
    last.counter = counter;
    for (int i = 0; i < 6; ++i) {
        b[static_cast<size_t>(i)] = static_cast<unsigned char>(unix_ms >> (8 * (5 - i)));
    }
    b[6] = static_cast<unsigned char>(0x70 | ((counter >> 8) & 0x0F));
    b[7] = static_cast<unsigned char>(counter & 0xFF);
    b[8] = static_cast<unsigned char>((b[8] & 0x3F) | 0x80);
    static const char hex[] = "0123456789abcdef";
    std::string out;
    out.reserve(36);
    for (size_t i = 0; i < 16; ++i) {
        if (i == 4 || i == 6 || i == 8 || i == 10) {
            out.push_back('-');
        }
        out.push_back(hex[b[i] >> 4]);
        out.push_back(hex[b[i] & 0xF]);
    }
    return out;
}

bool valid(std::string_view s) noexcept {
    if (s.size() != 36) {
        return false;
    }
    for (size_t i = 0; i < 36; ++i) {
        char c = s[i];
        if (i == 8 || i == 13 || i == 18 || i == 23) {
            if (c != '-') {
                return false;
            }
        } else if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'))) {
            return false;
        }
    }
    return true;
}

uint64_t v7_millis(std::string_view s) noexcept {
    if (!valid(s) || s[14] != '7') {
        return 0;
    }
    uint64_t ms = 0;
    for (size_t i = 0; i < 13; ++i) {
        if (i == 8) {
            continue;
        }
        char c = s[i];
        unsigned v = (c >= '0' && c <= '9') ? unsigned(c - '0') : unsigned((c | 0x20) - 'a' + 10);
        ms = (ms << 4) | v;
    }
    return ms;
}

} // namespace outbox::uuid
