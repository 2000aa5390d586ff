// The consumer runtime: a durable queue of one's own on the fanout exchange, messages handed
// over one at a time, and a run loop that makes each event's effect happen exactly once by
// recording it in the inbox in the same transaction as the handler's own writes.
#pragma once

#include "amqp.hpp"
#include "config.hpp"
#include "inbox.hpp"
#include "log.hpp"
#include "pg.hpp"

#include <atomic>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

namespace outbox {

namespace partitions {
class Membership; // core/partitions.hpp
} // namespace partitions

// Thrown by a handler: this event can never succeed, so its aggregate is parked at once (with
// consumer.on_failure=park) instead of being retried. Any other exception is a transient failure.
class PermanentFailure : public std::runtime_error {
  public:
    using std::runtime_error::runtime_error;
};

// One delivered event: the raw message and its envelope fields.
struct Delivery {
    amqp::Message raw;
    // Envelope fields: strings decoded; PAYLOAD/PREVIOUS_PAYLOAD/METADATA as their exact JSON text.
    std::vector<std::pair<std::string, std::string>> fields;
    std::vector<std::string> null_fields; // present with a JSON null value
    std::string event_id, event_type, aggregate_type, aggregate_id;
    int64_t seq = 0;             // from the outbox-seq header (0 = not given)
    int64_t delivery_count = -1; // deliveries before this one (quorum queues), -1 = unknown
    int partition = -1;          // partitioned subscribers: the partition queue it came from
    uint64_t generation = 0;     // the broker connection it came on (delivery tags are per connection)
    inbox::Result dedupe;        // filled by the run loop

    [[nodiscard]] const std::string *field(const std::string &name) const;
    // A property by name ("message_id", "type", "content_type", "app_id", "correlation_id",
    // "routing_key", "exchange", "consumer_tag", "timestamp", "delivery_mode") or a header;
    // numbers and booleans as text. nullopt when absent (or empty, but for routing_key and exchange).
    [[nodiscard]] std::optional<std::string> property(const std::string &name) const;
};

// Why a message cannot be an event; empty when it is a valid one. Fills `d` when valid.
std::string parse_delivery(amqp::Message &&msg, size_t max_body, Delivery &d);

// How a consumer loop's transaction for one delivery ended, as the loop tells settle().
enum class Outcome {
    handled = 0,        // committed with the handler's effects: ack
    duplicate = 1,      // committed, the inbox said already processed (handler not run): ack
    handler_failed = 2, // the handler failed, rolled back: an attempt; requeue or dead-letter
    not_processed = 3,  // not the handler's failure (database lost, BEGIN/dedupe/COMMIT failed): requeue, uncounted
    held = 4,           // committed to PostgreSQL among its aggregate's held events (core/held.hpp): ack
};

// What settle() did with the delivery.
enum class Settled { acked = 1, requeued = 2, dead_lettered = 3 };

struct Settlement {
    Settled action = Settled::acked;
    int64_t attempt = 0;  // handler_failed: the attempt this was (counted); 0 when none was counted
    bool db_lost = false; // the loop's database connection was lost: the attempt was not counted
};

class Consumer {
  public:
    // The handler runs inside the consumer's transaction; throwing means failure (rollback, redeliver).
    using Handler = std::function<void(pg::Conn &tx, const Delivery &event)>;

    Consumer(Config cfg, std::string name);
    ~Consumer();
    Consumer(const Consumer &) = delete;
    Consumer &operator=(const Consumer &) = delete;

    // Declares the exchange, the dead-letter exchange and queue, the consumer's queue (bound to
    // the exchange) and starts consuming. Called by next() when not connected. A partitioned
    // subscriber (consumer.partitions > 0) declares its partition topology instead of the queue
    // and consumes the partitions its membership assigns it (core/partitions.hpp); next()
    // re-reads the membership between messages and reconnects when the assignment changed.
    // A quorum queue that another instance declared an instant before may not be ready for
    // consumers yet (the broker then closes the connection on basic.consume): connecting is
    // retried a few times, within about 1.5 s, before that error is thrown.
    void connect();

    // The next valid event, waiting at most timeout_ms; nullopt on timeout or stop. Messages
    // that are not events (not JSON, missing fields, too large, wrong content type) are sent to
    // the dead-letter queue with the reason in header x-outbox-dead-reason, and skipped.
    std::optional<Delivery> next(int timeout_ms);

    void ack(const Delivery &d);
    void nack(const Delivery &d, bool requeue);
    // Publishes the message to the dead-letter queue with the reason (confirmed), then acks it.
    void dead_letter(const Delivery &d, const std::string &reason);

    // Handles deliveries until stop(): BEGIN, dedupe, handler (first time only), COMMIT, ack.
    // A failing handler rolls back and the message is redelivered, until consumer.delivery_limit,
    // then dead-lettered with the handler's error. Reconnects to the broker, and to the database
    // when it owns the connection (db == nullptr: opened from pg.url).
    void run(pg::Conn *db, const Handler &handler);

    void stop() noexcept;
    [[nodiscard]] bool stopping() const noexcept { return stop_.load(std::memory_order_relaxed); }
    void reset_stop() noexcept { stop_.store(false, std::memory_order_relaxed); }

    void set_logger(LogFn fn) { log_ = std::move(fn); }
    [[nodiscard]] const std::string &name() const { return name_; }
    [[nodiscard]] const std::string &queue() const { return queue_; }
    [[nodiscard]] const std::string &dead_letter_queue() const { return dlq_; }
    [[nodiscard]] const Config &config() const { return cfg_; }
    // Partitioned subscribers: the partitions this instance consumes now (empty otherwise) and
    // its instance name.
    // Safe to call from any thread (a copy, taken under a lock).
    [[nodiscard]] std::vector<int> partitions_held() const;
    [[nodiscard]] const std::string &instance() const { return cfg_.consumer_instance; }

    // Attempts so far for a message, this one included (from the broker's delivery count less
    // the redeliveries that were not the handler's failure, or counted here for classic queues,
    // which have none).
    int64_t attempts(const Delivery &d) const;

    // The one decision after a delivery's transaction ended, for every consumer loop (run() here,
    // and the Python and Node loops through outbox_consumer_settle). The loop has already
    // committed or rolled back. `conn` (may be null) is the loop's database connection: a handler
    // failure on a connection that is lost is not the handler's, and is not counted.
    //  - handled, duplicate: ack (a duplicate is logged);
    //  - handler_failed: count the attempt; below consumer.delivery_limit requeue, at it
    //    dead-letter with "handler failed N time(s): <reason>"; logged;
    //  - not_processed: requeue without counting an attempt; logged.
    Settlement settle(const Delivery &d, Outcome outcome, const std::string &reason, const pg::Conn *conn);

    // The wait before a loop's next try after `failures` (>= 1) consecutive failures of its
    // connections: 100 ms doubling to 30 s. Logs "consumer <name>: <why>; retrying in N ms"
    // unless why is empty.
    int retry_delay_ms(int failures, const std::string &why) const;

    // Whether the delivery was acked, requeued or dead-lettered already (by a handler itself).
    [[nodiscard]] bool was_settled(const Delivery &d) const {
        return settled_generation_ == d.generation && settled_tag_ == d.raw.delivery_tag && d.generation != 0;
    }

  private:
    friend class ConsumerLoop; // core/consumer_loop.hpp: drops the connection after a failure, logs
    void drop() noexcept;
    [[nodiscard]] bool broker_alive() const { return mq_ && mq_->alive(); }
    void mark_settled(const Delivery &d) {
        settled_generation_ = d.generation;
        settled_tag_ = d.raw.delivery_tag;
    }
    void log(LogLevel level, const std::string &msg) const;

    Config cfg_;
    std::string name_;
    std::string queue_;
    std::string dlx_;
    std::string dlq_;
    std::unique_ptr<amqp::Connection> mq_;
    // Partitioned subscribers only (core/partitions.hpp).
    std::unique_ptr<partitions::Membership> members_;
    std::vector<int> held_;
    mutable std::mutex held_mu_;
    void connect_once();
    void connect_partitioned(amqp::Connection &conn);
    void rebalance_if_due();
    [[nodiscard]] int partition_of(const std::string &consumer_tag) const;
    [[nodiscard]] std::string source_queue(const Delivery &d) const;
    size_t broker_next_ = 0; // the address of amqp.url tried first at the next connect (after a loss: the next node)
    std::deque<amqp::Message> pending_; // deliveries read while waiting for a confirm
    std::unordered_map<std::string, int64_t> classic_attempts_; // handler failures per event (classic queues)
    std::unordered_map<std::string, int64_t> uncounted_;        // requeues that were not the handler's failure
    uint64_t generation_ = 0; // broker connections made so far
    uint64_t settled_generation_ = 0, settled_tag_ = 0;
    std::atomic<bool> stop_{false};
    LogFn log_;
};

} // namespace outbox
