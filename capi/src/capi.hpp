// Shared by the capi/*-c.cpp files: handle definitions and the guard that turns every
// exception into a status code and a thread-local message. No logic lives here.
#pragma once

#include "outbox.h"

#include "config.hpp"
#include "consumer.hpp"
#include "error.hpp"
#include "event.hpp"
#include "inbox.hpp"
#include "pg.hpp"
#include "relay.hpp"
#include "schema.hpp"
#include "store.hpp"

#include <new>
#include <vector>
#include <string>

// The C API passes core's enums through by value: each C constant must equal its core value.
#define OUTBOX_SAME_VALUE(c, core) static_assert(static_cast<int>(c) == static_cast<int>(core), #c " == " #core)
OUTBOX_SAME_VALUE(OUTBOX_OK, outbox::Errc::ok);
OUTBOX_SAME_VALUE(OUTBOX_ERR_INVALID_ARGUMENT, outbox::Errc::invalid_argument);
OUTBOX_SAME_VALUE(OUTBOX_ERR_INVALID_EVENT, outbox::Errc::invalid_event);
OUTBOX_SAME_VALUE(OUTBOX_ERR_TOO_LARGE, outbox::Errc::too_large);
OUTBOX_SAME_VALUE(OUTBOX_ERR_DUPLICATE, outbox::Errc::duplicate);
OUTBOX_SAME_VALUE(OUTBOX_ERR_DATABASE, outbox::Errc::database);
OUTBOX_SAME_VALUE(OUTBOX_ERR_CONNECTION, outbox::Errc::connection);
OUTBOX_SAME_VALUE(OUTBOX_ERR_BROKER, outbox::Errc::broker);
OUTBOX_SAME_VALUE(OUTBOX_ERR_TIMEOUT, outbox::Errc::timeout);
OUTBOX_SAME_VALUE(OUTBOX_ERR_SCHEMA, outbox::Errc::schema);
OUTBOX_SAME_VALUE(OUTBOX_ERR_TRANSACTION, outbox::Errc::transaction);
OUTBOX_SAME_VALUE(OUTBOX_ERR_NO_MEMORY, outbox::Errc::no_memory);
OUTBOX_SAME_VALUE(OUTBOX_ERR_STOPPED, outbox::Errc::stopped);
OUTBOX_SAME_VALUE(OUTBOX_ERR_INTERNAL, outbox::Errc::internal);
OUTBOX_SAME_VALUE(OUTBOX_ERR_UNKNOWN_KEY, outbox::Errc::unknown_key);
OUTBOX_SAME_VALUE(OUTBOX_ERR_NOT_FOUND, outbox::Errc::not_found);
OUTBOX_SAME_VALUE(OUTBOX_LOG_DEBUG, outbox::LogLevel::debug);
OUTBOX_SAME_VALUE(OUTBOX_LOG_INFO, outbox::LogLevel::info);
OUTBOX_SAME_VALUE(OUTBOX_LOG_WARN, outbox::LogLevel::warn);
OUTBOX_SAME_VALUE(OUTBOX_LOG_ERROR, outbox::LogLevel::error);
OUTBOX_SAME_VALUE(OUTBOX_ORDER_UNCHECKED, outbox::inbox::Order::unchecked);
OUTBOX_SAME_VALUE(OUTBOX_ORDER_IN_ORDER, outbox::inbox::Order::in_order);
OUTBOX_SAME_VALUE(OUTBOX_ORDER_STALE, outbox::inbox::Order::stale);
OUTBOX_SAME_VALUE(OUTBOX_ORDER_GAP, outbox::inbox::Order::gap);
OUTBOX_SAME_VALUE(OUTBOX_MIGRATE_ALL, outbox::schema::What::all);
OUTBOX_SAME_VALUE(OUTBOX_MIGRATE_OUTBOX, outbox::schema::What::outbox);
OUTBOX_SAME_VALUE(OUTBOX_MIGRATE_INBOX, outbox::schema::What::inbox);
OUTBOX_SAME_VALUE(OUTBOX_OUTCOME_HANDLED, outbox::Outcome::handled);
OUTBOX_SAME_VALUE(OUTBOX_OUTCOME_DUPLICATE, outbox::Outcome::duplicate);
OUTBOX_SAME_VALUE(OUTBOX_OUTCOME_HANDLER_FAILED, outbox::Outcome::handler_failed);
OUTBOX_SAME_VALUE(OUTBOX_OUTCOME_NOT_PROCESSED, outbox::Outcome::not_processed);
OUTBOX_SAME_VALUE(OUTBOX_SETTLED_ACKED, outbox::Settled::acked);
OUTBOX_SAME_VALUE(OUTBOX_SETTLED_REQUEUED, outbox::Settled::requeued);
OUTBOX_SAME_VALUE(OUTBOX_SETTLED_DEAD_LETTERED, outbox::Settled::dead_lettered);
OUTBOX_SAME_VALUE(OUTBOX_FIELD_TEXT, outbox::FieldKind::text);
OUTBOX_SAME_VALUE(OUTBOX_FIELD_JSON, outbox::FieldKind::json);
OUTBOX_SAME_VALUE(OUTBOX_FIELD_FLAG, outbox::FieldKind::flag);
OUTBOX_SAME_VALUE(OUTBOX_WRITE_DONE, outbox::store::Wait::done);
OUTBOX_SAME_VALUE(OUTBOX_WRITE_READABLE, outbox::store::Wait::readable);
OUTBOX_SAME_VALUE(OUTBOX_WRITE_WRITABLE, outbox::store::Wait::writable);
OUTBOX_SAME_VALUE(OUTBOX_WRITE_BLOCKING, outbox::store::Wait::blocking);
#undef OUTBOX_SAME_VALUE

struct outbox_config {
    outbox::Config cfg;
};

struct outbox_db {
    outbox::pg::Conn conn;
    outbox::Config cfg;
};

struct outbox_event {
    outbox::Event ev;
};

struct outbox_relay {
    explicit outbox_relay(outbox::Config c) : relay(std::move(c)) {}
    outbox::Relay relay;
};

struct outbox_consumer {
    outbox_consumer(outbox::Config c, std::string name) : consumer(std::move(c), std::move(name)) {}
    outbox::Consumer consumer;
};

struct outbox_message {
    outbox::Delivery d;
    // Text forms of properties and headers, made on first request and kept for borrowing.
    mutable std::vector<std::pair<std::string, std::string>> texts;
};

struct outbox_statement {
    outbox::store::Statement st;
};

struct outbox_rows {
    outbox::pg::Result res;
};

namespace outbox::capi {

// sqlstate: the server's SQLSTATE for outbox_last_sqlstate(); "" when the error is not the server's.
void set_error(outbox_status status, const char *message, const char *sqlstate = "") noexcept;
void clear_error() noexcept;
outbox_status fail_null(const char *what) noexcept;

// Runs fn (returning void) and converts what it throws. Every entry point body goes through here.
template <typename Fn> outbox_status guard(Fn &&fn) noexcept {
    try {
        clear_error();
        fn();
        return OUTBOX_OK;
    } catch (const outbox::Error &e) {
        auto st = static_cast<outbox_status>(static_cast<int>(e.code()));
        set_error(st, e.what(), e.sqlstate());
        return st;
    } catch (const std::bad_alloc &) {
        set_error(OUTBOX_ERR_NO_MEMORY, "out of memory");
        return OUTBOX_ERR_NO_MEMORY;
    } catch (const std::exception &e) {
        set_error(OUTBOX_ERR_INTERNAL, e.what());
        return OUTBOX_ERR_INTERNAL;
    } catch (...) {
        set_error(OUTBOX_ERR_INTERNAL, "unknown internal error");
        return OUTBOX_ERR_INTERNAL;
    }
}

// Copies a string into memory freed by outbox_string_free().
char *dup_string(const std::string &s);

} // namespace outbox::capi

#define OUTBOX_REQUIRE(arg)                                                                                            \
    do {                                                                                                               \
        if ((arg) == nullptr) {                                                                                        \
            return outbox::capi::fail_null(#arg);                                                                      \
        }                                                                                                              \
    } while (0)
