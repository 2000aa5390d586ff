// Event ids: RFC 9562 UUID version 7 (48-bit Unix milliseconds, then random bits), so ids of
// events written close together sit close together in the primary-key index.
// Written here because Debian 12's libuuid (util-linux 2.38) has no v7 generator.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace outbox::uuid {

// A new v7 id for the given Unix time in milliseconds; ids from one thread are strictly
// increasing, even within one millisecond (the 12-bit rand_a field is used as a counter then).
std::string v7(uint64_t unix_ms);

// True for the canonical 8-4-4-4-12 hex form (either case).
bool valid(std::string_view s) noexcept;

// Unix milliseconds carried by a v7 id, or 0 when it is not one.
uint64_t v7_millis(std::string_view s) noexcept;

} // namespace outbox::uuid
