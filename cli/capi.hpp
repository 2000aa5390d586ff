// The CLI's side of the public C API (outbox.h, nothing else of the library): handles that free
// themselves, and one exception carrying a status and the library's message.
#pragma once

#include <outbox.h>

#include <memory>
#include <stdexcept>
#include <string>

namespace outbox::cli {

class Failure : public std::runtime_error {
  public:
    Failure(outbox_status status, const std::string &message) : std::runtime_error(message), status_(status) {}
    [[nodiscard]] outbox_status status() const { return status_; }

  private:
    outbox_status status_;
};

// Throws the calling thread's last error unless `st` is OUTBOX_OK.
inline void check(outbox_status st) {
    if (st != OUTBOX_OK) {
        throw Failure(st, outbox_last_error());
    }
}

// A bad option value: a usage error.
[[noreturn]] inline void usage(const std::string &message) {
    throw Failure(OUTBOX_ERR_INVALID_ARGUMENT, message);
}

template <typename T, void (*Free)(T *)> struct Deleter {
    void operator()(T *p) const { Free(p); }
};
using ConfigPtr = std::unique_ptr<outbox_config, Deleter<outbox_config, outbox_config_free>>;
using DbPtr = std::unique_ptr<outbox_db, Deleter<outbox_db, outbox_db_close>>;
using RelayPtr = std::unique_ptr<outbox_relay, Deleter<outbox_relay, outbox_relay_free>>;
using TailPtr = std::unique_ptr<outbox_tail, Deleter<outbox_tail, outbox_tail_close>>;
using MessagePtr = std::unique_ptr<outbox_message, Deleter<outbox_message, outbox_message_free>>;
using StringPtr = std::unique_ptr<char, Deleter<char, outbox_string_free>>;

// The current value of a configuration key (secrets read back as "***").
std::string config_get(const outbox_config *cfg, const char *key);
void config_set(outbox_config *cfg, const std::string &key, const std::string &value);
// A connection to the configuration's pg.url (a usage error without one).
DbPtr open_db(const outbox_config *cfg);

} // namespace outbox::cli
