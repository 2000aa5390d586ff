// What the partitioned inbox (core/inbox.cpp) and the partitioned events table
// (core/retention.cpp) share: their range partitions read from the catalog, and DDL run under
// short lock waits, retried, so that the sessions queued behind a lock never wait long.
#pragma once

#include "error.hpp"
#include "pg.hpp"

#include <chrono>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

namespace outbox::ranges {

struct RangePartition {
    std::string name;    // unqualified, in the parent's schema
    bool before = false; // FROM (MINVALUE)
    int64_t from = 0;    // 0 when `before`
    int64_t to = 0;
};

// The range partitions of `parent` (qualified), the default partition left out, by `from`.
std::vector<RangePartition> list(pg::Conn &conn, const std::string &parent);

// v rounded down to a multiple of width (width > 0), also for negative v.
int64_t floor_to(int64_t v, int64_t width);

// Runs fn() in a transaction of its own with lock_timeout 100 ms; a lock wait that times out
// rolls it back and tries again, `tries` times at most, then throws. On a connection inside a
// transaction fn() runs once in the caller's transaction, waiting as long as the caller allows.
template <typename Fn> auto with_short_locks(pg::Conn &conn, int tries, Fn fn) {
    if (conn.tx_status() != PQTRANS_IDLE) {
        return fn();
    }
    for (int attempt = 1;; ++attempt) {
        try {
            return pg::in_transaction(conn, [&] {
                conn.exec_simple("SET LOCAL lock_timeout = '100ms'");
                return fn();
            });
        } catch (const Error &e) {
            if (attempt >= tries || std::string(e.what()).find("SQLSTATE 55P03") == std::string::npos) {
                throw;
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(50 * (1 + attempt % 4)));
        }
    }
}

} // namespace outbox::ranges
