// The relay: moves committed events from the outbox table to RabbitMQ with publisher confirms.
//
// Rules it keeps (DESIGN.md, "The relay's rules"):
// - one relay per table is active: the one holding the table's session advisory lock (the
//   others stand by and take over from the stored cursor); it reads the events in position order;
// - an event is published only after every earlier event of its aggregate was confirmed: within
//   a step each aggregate is a chain, and the next link goes out when the broker acked the
//   previous one; across aggregates, up to `relay.window` messages are in flight;
// - an event is recorded published (a receipt; the outbox view shows it PUBLISHED) only when its
//   delivery tag was acked and it was not returned (unless relay.unroutable_is_failure=false);
//   nacks and returns are failures with backoff (the event parked with its retries);
// - a lost connection mid-batch never records an unconfirmed event: what was confirmed is
//   recorded, the rest stays pending and goes out again (at-least-once).
//
// Where it lives: relay.cpp (construction, step() and run()), relay_connections.cpp,
// relay_leader.cpp (the relay lock and the progress it loads), relay_read.cpp (the read and the
// read made ahead), relay_upkeep.cpp (partitions), relay_publish.cpp (chains and the publish
// round), relay_record.cpp (the outcome record), relay_wait.cpp (idle waiting);
// relay_internal.hpp holds what they share.
#pragma once

#include "amqp.hpp"
#include "config.hpp"
#include "envelope.hpp"
#include "error.hpp"
#include "log.hpp"
#include "pg.hpp"
#include "retention.hpp"
#include "stream.hpp"

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <vector>

namespace outbox {

struct RelayStats {
    int64_t read = 0;        // events read this step (new ones, and ones due for a retry)
    int64_t published = 0;   // confirmed and recorded published
    int64_t failed = 0;      // nacked, returned or rejected: retry_count +1 with backoff (or FAILED)
    int64_t dead = 0;        // of `failed`, those that reached relay.max_attempts and are now FAILED
    int64_t held_back = 0;   // read but not published because an earlier event of the aggregate was not confirmed
    int64_t unroutable = 0;  // returned by the broker (no queue bound)
    int64_t nacked = 0;      // negatively confirmed by the broker
    int64_t unconfirmed = 0; // published but no confirm within relay.confirm_timeout_ms (left PENDING)
    // Reading, publishing with confirms, recording the outcomes (one statement), the whole step.
    // (outbox_relay_stats keeps version 1's names for the ABI: claimed, claim_us, mark_us.)
    int64_t read_us = 0, publish_us = 0, record_us = 0, total_us = 0;
    bool blocked = false; // the broker blocked publishing (resource alarm) during the step
};

// What one step of run() came to, for an observer (metrics, health): the stats of a step that
// succeeded, or the error of one that failed and the backoff before the next; and the state of
// the connections after it.
struct StepReport {
    RelayStats stats;      // zeroes after a failure
    Errc code = Errc::ok;  // ok, or the failed step's code
    std::string error;     // the failure's message; empty on success
    int retry_in_ms = 0;   // after a failure: the wait before the next step
    bool pg_up = false;    // the relay holds a PostgreSQL connection
    bool amqp_up = false;  // the relay holds a RabbitMQ connection
    std::string amqp_node; // "host:port" of the current or last RabbitMQ node; "" before the first
};
using StepObserver = std::function<void(const StepReport &)>;

// Delay before attempt `attempt` (1 = the first retry): base * 2^(attempt-1) capped at max_ms,
// then "equal jitter": uniformly in [d/2, d]. Never negative, never above max_ms.
int64_t backoff_ms(int attempt, int64_t base_ms, int64_t max_ms, std::mt19937_64 &rng);

enum class RelayOutcome { pending, in_flight, published, failed, held_back };

// One event read, while a step handles it.
struct RelayItem {
    EventRow row;
    int64_t position = 0;
    bool parked = false; // read from the parked events (a retry), not from the stream
    bool park = false;   // to be parked without being sent: its aggregate has parked events
    int retry_count = 0;
    RelayOutcome outcome = RelayOutcome::pending;
    bool returned = false;
    bool refused = false; // nacked: the broker refused it (a queue electing its leader, a full queue), not its fault
    std::string error;
    int next = -1; // index of the next event of the same aggregate in this batch
};

class Relay {
  public:
    explicit Relay(Config cfg);
    ~Relay();
    Relay(const Relay &) = delete;
    Relay &operator=(const Relay &) = delete;

    // One round: read due events, publish with confirms, record the outcomes. Connects on
    // first use. Throws Error(connection/broker/timeout/database) when a server fails; the
    // failed connection is dropped first, so the next step reconnects.
    RelayStats step();
    // Publishes and records the batch a step left in flight (relay.overlap), publishing nothing new
    // and reading nothing; zeroes when there is none. run() ends with it.
    RelayStats settle();

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
    // since is noticed by the next step). Safe from any thread.
    [[nodiscard]] bool pg_connected() const { return pg_up_.load(std::memory_order_relaxed); }
    [[nodiscard]] bool amqp_connected() const { return mq_ != nullptr; }
    // The RabbitMQ node ("host:port") of the current or last connection; "" before the first.
    [[nodiscard]] std::string amqp_node() const;
    [[nodiscard]] const Config &config() const { return cfg_; }

  private:
    void report(const RelayStats &st, Errc code, const std::string &error, int retry_in_ms);
    struct PublishRound;
    // The stages of step(), in order.
    bool ensure_active();
    std::vector<RelayItem> read_batch(pg::Conn &db, RelayStats &st);
    void read_parked(pg::Conn &db, std::vector<RelayItem> &items);
    void read_stream(pg::Conn &db, std::vector<RelayItem> &items, int limit);
    // The parameters of the stream read read_stream() makes now: the positions read again, the
    // frontier (or nothing past it), the limit.
    struct StreamRead {
        stream::Runs runs;                      // read again (gaps and retries)
        std::string firsts, lasts, past, limit; // the statement's parameters
        bool operator==(const StreamRead &o) const {
            return firsts == o.firsts && lasts == o.lasts && past == o.past && limit == o.limit;
        }
        [[nodiscard]] pg::Params params() const { return {firsts, past, limit, lasts}; }
    };
    [[nodiscard]] StreamRead stream_read(int limit) const;
    void send_prefetch(pg::Conn &db, const std::vector<RelayItem> &items);
    void collect_prefetch(pg::Conn &db) noexcept;
    bool advance_prefetch(pg::Conn &db) noexcept;
    // One step; `overlap`: publish the next batch while this one is confirmed, and leave it in flight.
    RelayStats step_batch(bool overlap);
    void chain(PublishRound &round, size_t from);
    bool can_open_next(const PublishRound &round) const;
    void open_next(PublishRound &round) noexcept;
    void abandon_next() noexcept;
    std::vector<RelayItem> finish_round();
    std::optional<std::string> publish(PublishRound &round, bool overlap);
    void send_ready(PublishRound &round, amqp::Connection &mq);
    void on_broker_event(PublishRound &round, const amqp::Event &ev);
    void record(pg::Conn &db, std::vector<RelayItem> &items, RelayStats &st);
    int64_t retry_delay_ms(int attempt, bool refused);
    void reload_parked(pg::Conn &db);
    void maintain_partitions(pg::Conn &db);
    void discard_prefetch() noexcept;
    void ensure_pg();
    void ensure_amqp();
    void drop_pg() noexcept;
    void drop_amqp() noexcept;
    void idle_wait(int timeout_ms);
    void sleep_interruptible(int ms);
    void log(LogLevel level, const std::string &msg) const;

    Config cfg_;
    // The relay's one connection: reads, records, the relay lock and LISTEN. The closed
    // partitions' indexes use a connection of their own (retention::Indexer).
    std::optional<pg::Conn> pg_;
    std::atomic<bool> pg_up_{false};
    std::unique_ptr<amqp::Connection> mq_;
    size_t broker_next_ = 0; // the address of amqp.url tried first at the next connect (after a loss: the next node)
    mutable std::mutex node_mu_;
    StepObserver observer_;
    std::string amqp_node_;
    bool listening_ = false;
    bool blocked_ = false;
    std::string read_sql_;
    std::string parked_sql_;
    std::string record_sql_;
    // Whether this relay holds the table's relay lock (one relay per table is active; the others
    // stand by), its progress, and the aggregates that have parked events.
    bool active_ = false;
    bool standby_logged_ = false;
    stream::Progress progress_;
    int64_t stored_cursor_ = -1;
    std::set<std::pair<std::string, std::string>> parked_aggs_;
    // The next stream read, sent while a full batch is published (the broker waits for nothing
    // between batches): used by the next step only when it would make the very same read, so it
    // is that read made a little earlier. `sent` until collected, before anything else uses the connection.
    // Its rows are taken in and turned into items a slice at a time while the relay would otherwise
    // wait for confirms (advance_prefetch), so that opening the next batch does not stop publishing.
    struct Prefetch {
        StreamRead read;
        pg::Result result;
        bool sent = false;
        std::vector<RelayItem> items; // the result's first `converted` rows, in result order
        int converted = 0;
    };
    std::optional<Prefetch> prefetch_;
    // The publish round a step left in flight (relay.overlap): the next batch, already read and
    // partly sent, recorded by the next step (or settle()).
    std::unique_ptr<PublishRound> round_;
    std::chrono::steady_clock::time_point next_partition_check_{};
    int64_t partitions_end_ = 0; // where the events partitions end, as last seen (0: not known)
    retention::Indexer indexer_; // closed partitions' aggregate indexes, built in the background
    std::atomic<bool> stop_{false};
    int stop_pipe_[2] = {-1, -1};
    std::mt19937_64 rng_;
    LogFn log_;
};

} // namespace outbox
