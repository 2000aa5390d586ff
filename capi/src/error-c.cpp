#include "capi.hpp"

#include <cstdlib>
#include <cstring>

namespace outbox::capi {
namespace {

struct LastError {
    outbox_status status = OUTBOX_OK;
    std::string message;
    char sqlstate[6] = {}; // fixed size: set even when the message cannot be stored
};
thread_local LastError last;
// Used when even the message cannot be stored: outbox_last_error() never returns NULL.
const char *const oom_message = "out of memory";
thread_local bool last_is_oom = false;

} // namespace

void set_error(outbox_status status, const char *message, const char *sqlstate) noexcept {
    last.status = status;
    const bool five = sqlstate != nullptr && std::strlen(sqlstate) == sizeof last.sqlstate - 1;
    std::memcpy(last.sqlstate, five ? sqlstate : "\0\0\0\0\0", sizeof last.sqlstate);
    try {
        last.message = message != nullptr ? outbox::message_text(message) : "";
        last_is_oom = false;
    } catch (...) {
        last_is_oom = true;
    }
}

void clear_error() noexcept {
    last.status = OUTBOX_OK;
    last.message.clear();
    last.sqlstate[0] = '\0';
    last_is_oom = false;
}

outbox_status fail_null(const char *what) noexcept {
    std::string msg;
    try {
        msg = std::string(what) + " must not be NULL";
    } catch (...) {
    }
    set_error(OUTBOX_ERR_INVALID_ARGUMENT, msg.c_str());
    return OUTBOX_ERR_INVALID_ARGUMENT;
}

char *dup_string(const std::string &s) {
    auto *p = static_cast<char *>(std::malloc(s.size() + 1));
    if (p == nullptr) {
        throw std::bad_alloc();
    }
    std::memcpy(p, s.c_str(), s.size() + 1);
    return p;
}

} // namespace outbox::capi

extern "C" {

const char *outbox_last_error(void) { return outbox::capi::last_is_oom ? outbox::capi::oom_message : outbox::capi::last.message.c_str(); }

outbox_status outbox_last_status(void) { return outbox::capi::last.status; }

const char *outbox_last_sqlstate(void) {
    return outbox::capi::last.sqlstate;
}

const char *outbox_status_name(outbox_status status) {
    // Read as an int: a value outside the enum's range (from a newer or a confused caller) is
    // legal C but undefined as a C++ enum load.
    int value = 0;
    std::memcpy(&value, &status, sizeof value);
    return outbox::errc_name(static_cast<outbox::Errc>(value));
}

int outbox_status_retriable(outbox_status status) {
    int value = 0;
    std::memcpy(&value, &status, sizeof value);
    return outbox::errc_retriable(static_cast<outbox::Errc>(value)) ? 1 : 0;
}

void outbox_string_free(char *s) { std::free(s); }

const char *outbox_version(void) { return OUTBOX_VERSION_STRING; }

int outbox_version_number(void) { return OUTBOX_VERSION_NUMBER; }

} // extern "C"
