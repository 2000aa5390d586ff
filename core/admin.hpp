// Operator tools over the outbox table: stats, retry-failed, purge and replay. Every query is
// bounded by an index (the partial indexes of schema.cpp), so each stays fast on a table with
// millions of rows; no full-table COUNT(*) ever runs.
#pragma once

#include "config.hpp"
#include "pg.hpp"

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace outbox::admin {

struct TypeCounts {
    std::string aggregate_type;
    int64_t pending = 0;
    int64_t failed = 0;
};

struct Stats {
    // Exact counts, each over a partial index (bounded by the backlog or the last hour's traffic).
    int64_t pending = 0;
    int64_t pending_due = 0; // of `pending`, those whose next_attempt_at has come
    int64_t failed = 0;
    int64_t published_last_minute = 0;
    int64_t published_last_hour = 0;
    std::optional<double> oldest_pending_age_s; // now() - min(created_at) over PENDING rows
    double lag_s = 0;                           // now() - min(next_attempt_at) over due PENDING rows (0 = none due)
    std::optional<double> last_published_age_s; // now() - max(published_at)
    // Planner estimates (pg_class.reltuples): never a full count.
    int64_t total_estimate = 0;
    int64_t published_estimate = 0;
    std::vector<TypeCounts> per_type; // pending/failed grouped by aggregate type
    // "idle" (nothing pending), "ok" (lag under lag_threshold_s) or "lagging".
    std::string relay_health;
};

// Reads the figures above. lag_threshold_s decides relay_health.
Stats stats(pg::Conn &conn, const Config &cfg, double lag_threshold_s = 60);
// The lag alone (one index probe): seconds since the oldest due PENDING event became due; 0 when none.
double lag_seconds(pg::Conn &conn, const Config &cfg);
// {"pending":..,"failed":..,...,"estimates":["total_estimate","published_estimate"]}
std::string stats_json(const Stats &s);

// FAILED -> PENDING with next_attempt_at = now(); retry_count and error_message are kept.
// Empty aggregate_type / event_id: any; max_retries <= 0: any, else only retry_count < max_retries.
// Returns how many rows moved.
int64_t retry_failed(pg::Conn &conn, const Config &cfg, const std::string &aggregate_type,
                     const std::string &event_id, int max_retries);

// Deletes PUBLISHED rows whose published_at is older than older_than_s, `batch` rows per
// statement, each statement its own transaction (call outside a transaction). Never touches a
// PENDING or FAILED row. on_progress(deleted so far) runs after each batch. Returns the total.
int64_t purge_published(pg::Conn &conn, const Config &cfg, int64_t older_than_s, int batch,
                        const std::function<void(int64_t)> &on_progress = {});

// The planner's estimate (EXPLAIN, nothing is counted) of how many rows purge_published would delete;
// for progress displays only.
int64_t purge_estimate(pg::Conn &conn, const Config &cfg, int64_t older_than_s);

// The seq of event `event_id` of the aggregate; Error(not_found) when it is not one of its events.
int64_t seq_of_event(pg::Conn &conn, const Config &cfg, const std::string &aggregate_type,
                     const std::string &aggregate_id, const std::string &event_id);
// The lowest seq of the aggregate's events created at or after `since` (an ISO timestamp);
// 0 when there are none (then a replay from it publishes nothing).
int64_t seq_since(pg::Conn &conn, const Config &cfg, const std::string &aggregate_type,
                  const std::string &aggregate_id, const std::string &since);

// Republishes the aggregate's events with seq >= from_seq (any status, in seq order) to
// cfg.exchange over cfg.amqp_url, with publisher confirms and header outbox-replay=true. Rows are
// not changed. Throws Error(broker) when a message is nacked or returned. Returns how many were confirmed.
int64_t replay(pg::Conn &conn, const Config &cfg, const std::string &aggregate_type,
               const std::string &aggregate_id, int64_t from_seq);

// The replay the operator asks for: from the event `event_id` (empty: the first), and only
// events created at or after `since` (an ISO timestamp; empty: any), the later of the two.
// When nothing was created since `since`, nothing is published. `from_seq` is where it started
// (0 when nothing was replayed for lack of events since `since`).
struct ReplayResult {
    int64_t published = 0;
    int64_t from_seq = 0;
};
ReplayResult replay_from(pg::Conn &conn, const Config &cfg, const std::string &aggregate_type,
                         const std::string &aggregate_id, const std::string &event_id, const std::string &since);

} // namespace outbox::admin
