// The relay: moves committed events from the outbox table to RabbitMQ with publisher confirms.
//
// Rules it keeps (DESIGN.md, "The relay's rules"):
// - claims with FOR UPDATE SKIP LOCKED, so any number of relays share one table;
// - an event is published only after every earlier event of its aggregate was confirmed: within
//   a step each aggregate is a chain, and the next link goes out when the broker acked the
//   previous one; across aggregates, up to `relay.window` messages are in flight;
// - an event is marked PUBLISHED only when its delivery tag was acked and it was not returned
//   (unless relay.unroutable_is_failure=false); nacks and returns are failures with backoff;
// - a lost connection mid-batch never marks an unconfirmed event: what was confirmed is marked,
//   the rest stays PENDING and goes out again (at-least-once).
#pragma once

#include "amqp.hpp"
#include "config.hpp"
#include "envelope.hpp"
#include "error.hpp"
#include "log.hpp"
#include "pg.hpp"

#include <atomic>
#include <cstdint>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <vector>

namespace outbox {

struct RelayStats {
    int64_t claimed = 0;     // events claimed this step
    int64_t published = 0;   // confirmed and marked PUBLISHED
    int64_t failed = 0;      // nacked, returned or rejected: retry_count +1 with backoff (or FAILED)
    int64_t dead = 0;        // of `failed`, those that reached relay.max_attempts and are now FAILED
    int64_t held_back = 0;   // claimed but not published because an earlier event of the aggregate was not confirmed
    int64_t unroutable = 0;  // returned by the broker (no queue bound)
    int64_t nacked = 0;      // negatively confirmed by the broker
    int64_t unconfirmed = 0; // published but no confirm within relay.confirm_timeout_ms (left PENDING)
    int64_t claim_us = 0, publish_us = 0, mark_us = 0, total_us = 0;
    bool blocked = false; // the broker blocked publishing (resource alarm) during the step
};

// What one step of run() came to, for an observer (metrics, health): the stats of a step that
// succeeded, or the error of one that failed and the backoff before the next; and the state of
// the connections after it.
struct StepReport {
    RelayStats stats;            // zeroes after a failure
    Errc code = Errc::ok;        // ok, or the failed step's code
    std::string error;           // the failure's message; empty on success
    int retry_in_ms = 0;         // after a failure: the wait before the next step
    bool pg_up = false;          // the relay holds a PostgreSQL connection
    bool amqp_up = false;        // the relay holds a RabbitMQ connection
    std::string amqp_node;       // "host:port" of the current or last RabbitMQ node; "" before the first
};
using StepObserver = std::function<void(const StepReport &)>;

// Delay before attempt `attempt` (1 = the first retry): base * 2^(attempt-1) capped at max_ms,
// then "equal jitter": uniformly in [d/2, d]. Never negative, never above max_ms.
int64_t backoff_ms(int attempt, int64_t base_ms, int64_t max_ms, std::mt19937_64 &rng);

enum class RelayOutcome { pending, in_flight, published, failed, held_back };

// One claimed event while a step handles it.
struct RelayItem {
    EventRow row;
    int retry_count = 0;
    RelayOutcome outcome = RelayOutcome::pending;
    bool returned = false;
    std::string error;
    int next = -1; // index of the next event of the same aggregate in this batch
};

class Relay {
  public:
    explicit Relay(Config cfg);
    ~Relay();
    Relay(const Relay &) = delete;
    Relay &operator=(const Relay &) = delete;

    // One round: claim due events, publish with confirms, mark the outcome, commit. Connects on
    // first use. Throws Error(connection/broker/timeout/database) when a server fails; the
    // failed connection is dropped first, so the next step reconnects.
    RelayStats step();

    // Waits until every outcome of earlier steps is committed and releases a batch claimed ahead
    // (rolled back, its events due again at once), adding the collected marks to `st`
    // (published, failed, dead, mark_us). For a caller that steps by hand and wants to know, or
    // exit with, everything its steps did: after step() + settle() the counts are complete.
    void settle(RelayStats &st);

    // Steps until stop(): wakes on NOTIFY (relay.listen) or after relay.poll_interval_ms,
    // reconnects with backoff on failures, services AMQP heartbeats while idle. Returns after a
    // stop with nothing half-done.
    void run(const std::function<void(const RelayStats &)> &on_step = {});

    // Async-signal-safe and thread-safe: asks step()/run() to finish what is in flight and return.
    void stop() noexcept;
    [[nodiscard]] bool stopping() const noexcept { return stop_.load(std::memory_order_relaxed); }
    // Clears a previous stop so run() can be called again.
    void reset_stop() noexcept;

    void set_logger(LogFn fn) { log_ = std::move(fn); }
    // Called by run() after every step, on the relay's thread, whether it succeeded or failed.
    void set_step_observer(StepObserver fn) { observer_ = std::move(fn); }
    // Whether the relay holds a PostgreSQL connection (as of the last step; a connection that broke
    // since is noticed by the next step). Safe while a batch's marks commit in the background.
    [[nodiscard]] bool pg_connected() const { return pg_up_.load(std::memory_order_relaxed); }
    [[nodiscard]] bool amqp_connected() const { return mq_ != nullptr; }
    // The RabbitMQ node ("host:port") of the current or last connection; "" before the first.
    [[nodiscard]] std::string amqp_node() const;
    [[nodiscard]] const Config &config() const { return cfg_; }

  private:
    void report(const RelayStats &st, Errc code, const std::string &error, int retry_in_ms);
    // Outcomes of one batch as the mark statement wants them (arrays as literals).
    struct MarkArgs {
        std::string ok_ids, bad_ids, bad_errors, bad_delays;
        bool empty = true;
    };
    struct MarkResult {
        int64_t published = 0, failed = 0, dead = 0, mark_us = 0;
    };
    struct Batch {
        int slot = 0; // the connection whose transaction holds the batch's locks
        std::vector<RelayItem> items;
        MarkResult prior; // marks of an earlier batch committed on this slot before the claim
    };
    struct PublishRound;
    // The stages of step(), in order.
    Batch take_batch(RelayStats &st);
    void claim_ahead(const Batch &cur);
    static std::vector<int> build_chains(std::vector<RelayItem> &items);
    std::optional<std::string> publish(PublishRound &round);
    void send_ready(PublishRound &round, amqp::Connection &mq);
    void on_broker_event(PublishRound &round, const amqp::Event &ev);
    MarkArgs mark_args(const std::vector<RelayItem> &items, RelayStats &st);
    void mark_batch(const Batch &cur, RelayStats &st, bool amqp_failed);
    void commit_empty(int slot);
    std::vector<RelayItem> claim(pg::Conn &db);
    MarkResult mark(pg::Conn &db, const MarkArgs &args);
    void flush_marks(RelayStats &st);
    static void add_marks(RelayStats &st, const MarkResult &m);
    void drop_broken_pg() noexcept;
    void discard_prefetch() noexcept;
    void ensure_pg(int slot);
    void ensure_amqp();
    void drop_pg(int slot) noexcept;
    void drop_amqp() noexcept;
    void idle_wait(int timeout_ms);
    void sleep_interruptible(int ms);
    void log(LogLevel level, const std::string &msg) const;

    Config cfg_;
    // Two connections: while a batch is published on one (its transaction holds the claim), the
    // next batch is claimed on the other. Slot 0 also LISTENs for wake-ups.
    std::optional<pg::Conn> pg_[2];
    std::future<Batch> prefetch_;
    // Under a backlog a batch's marks are committed in the background while the next batch is
    // published; the following claim on that connection waits for them (see step()).
    std::future<MarkResult> marking_;
    int marking_slot_ = -1;
    std::atomic<bool> pg_up_{false};
    std::unique_ptr<amqp::Connection> mq_;
    size_t broker_next_ = 0; // the address of amqp.url tried first at the next connect (after a loss: the next node)
    mutable std::mutex node_mu_;
    StepObserver observer_;
    std::string amqp_node_;
    bool listening_ = false;
    bool blocked_ = false;
    std::string visit_sql_;
    std::string claim_sql_;
    // Where the next visit starts: the aggregate after this key ('' '' = the first). Rotating
    // through aggregates keeps the relay fair when more aggregates have work than a batch holds.
    std::string cursor_type_;
    std::string cursor_id_;
    std::string mark_sql_;
    std::atomic<bool> stop_{false};
    int stop_pipe_[2] = {-1, -1};
    std::mt19937_64 rng_;
    LogFn log_;
};

} // namespace outbox
