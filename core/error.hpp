// Errors of the core library. The numeric values are the C ABI's outbox_status values, so the
// C layer translates by value; core itself knows nothing of C.
#pragma once

#include <stdexcept>
#include <string>
#include <string_view>

namespace outbox {

enum class Errc : int {
    ok = 0,
    invalid_argument = -1, // NULL or malformed argument, unknown config key
    invalid_event = -2,    // missing field, invalid JSON, unknown operation
    too_large = -3,        // payload over the configured limit
    duplicate = -4,        // idempotency key already used
    database = -5,         // PostgreSQL answered with an error
    connection = -6,       // connection closed, broken or not reachable
    broker = -7,           // RabbitMQ error (channel/connection close, protocol)
    timeout = -8,          // a bounded wait ran out
    schema = -9,           // tables missing or at an unknown version, bad identifier
    transaction = -10,     // caller's transaction is aborted or in the wrong state
    no_memory = -11,
    stopped = -12,         // the operation was interrupted by a stop request
    internal = -13,
    unknown_key = -14,     // configuration key not known
    not_found = -15,
};

class Error : public std::runtime_error {
  public:
    Error(Errc code, const std::string &message) : std::runtime_error(message), code_(code) {}
    // A failure PostgreSQL reported, with its SQLSTATE (five characters; empty when none).
    Error(Errc code, const std::string &message, std::string_view sqlstate) : std::runtime_error(message), code_(code) {
        if (sqlstate.size() == sizeof sqlstate_ - 1) {
            sqlstate.copy(sqlstate_, sqlstate.size());
        }
    }
    [[nodiscard]] Errc code() const noexcept { return code_; }
    // The server's SQLSTATE when the error is PostgreSQL's, else "".
    [[nodiscard]] const char *sqlstate() const noexcept { return sqlstate_; }

  private:
    Errc code_;
    char sqlstate_[6] = {};
};

[[noreturn]] inline void fail(Errc code, const std::string &message) { throw Error(code, message); }

const char *errc_name(Errc code) noexcept;
// Whether a call that failed with `code` may succeed when tried again, unchanged: a server away
// or dropping the connection, a broker error, a bounded wait that ran out.
bool errc_retriable(Errc code) noexcept;

// A caller's input as error messages quote it: at most `max` bytes, and anything that is not
// printable UTF-8 (control characters, invalid bytes) as \xNN. Messages stay short and valid
// UTF-8 whatever was passed in, so bindings can always decode them.
std::string quote_input(std::string_view input, size_t max = 64);
// The same without the quotes.
std::string printable(std::string_view input, size_t max);
// An error message as callers get it: at most `max` bytes, valid UTF-8 (other bytes as \xNN),
// line breaks kept. Server messages can quote a caller's 16 MiB statement or raw bytes back.
std::string message_text(std::string_view input, size_t max = 4000);

} // namespace outbox
