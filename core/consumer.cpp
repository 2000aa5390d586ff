#include "consumer.hpp"

#include "connect.hpp"
#include "consumer_loop.hpp"
#include "envelope.hpp"
#include "error.hpp"
#include "json.hpp"
#include "partitions.hpp"
#include "uuid.hpp"

#include <poll.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <ctime>

namespace outbox {
namespace {

using Clock = std::chrono::steady_clock;

// Declares one of the consumer's own queues. A queue that already exists with other arguments (a
// classic queue from before quorum queues were the default, another delivery limit...) cannot be
// changed in place, and retrying would fail forever: that is a configuration error, said once with
// what to do, not a broker hiccup to retry.
void declare_own_queue(amqp::Connection &conn, const std::string &queue, const std::string &type,
                       const amqp::Table &args) {
    try {
        conn.declare_queue(queue, true, false, false, args);
    } catch (const Error &e) {
        const std::string what = e.what();
        if (e.code() != Errc::broker || what.find(" 406 ") == std::string::npos ||
            what.find("inequivalent arg") == std::string::npos) {
            throw;
        }
        fail(Errc::invalid_argument,
             "queue " + queue +
                 " already exists with other arguments than this consumer declares (consumer.queue_type=" + type +
                 "; a classic queue left from before, say): " + what +
                 ". A queue's type and arguments cannot change in place: move its messages and delete it (it is "
                 "then declared anew), or name another queue with consumer.queue, or set consumer.queue_type to "
                 "the existing queue's type");
    }
}

} // namespace

Consumer::Consumer(Config cfg, std::string name) : cfg_(std::move(cfg)), name_(std::move(name)) {
    // The name is also the inbox key, the consumer tag and, by default, the queue name.
    validate_amqp_name(name_, "consumer name", cfg_.consumer_queue.empty());
    cfg_.require_amqp_url("the consumer");
    queue_ = cfg_.consumer_queue.empty() ? name_ : cfg_.consumer_queue;
    dlx_ = queue_ + ".dlx";
    dlq_ = cfg_.consumer_dead_letter_queue.empty() ? queue_ + ".dead" : cfg_.consumer_dead_letter_queue;
    if (cfg_.consumer_partitions > 0) {
        // Partition queues are quorum queues: single active consumer, delivery counts, and
        // unacknowledged messages returned to the head of the queue when a consumer goes.
        if (cfg_.consumer_queue_type != "quorum") {
            fail(Errc::invalid_argument, "consumer.partitions needs consumer.queue_type=quorum");
        }
        if (cfg_.consumer_instance.empty()) {
            cfg_.consumer_instance = partitions::default_instance();
        }
        members_ = std::make_unique<partitions::Membership>(cfg_, name_, cfg_.consumer_instance);
    }
}

Consumer::~Consumer() {
    drop();
}

void Consumer::log(LogLevel level, const std::string &msg) const {
    if (log_) {
        log_(level, msg);
    }
}

void Consumer::drop() noexcept {
    mq_.reset();
    pending_.clear(); // unacked deliveries return to the queue with the connection
}

void Consumer::stop() noexcept {
    stop_.store(true, std::memory_order_relaxed);
}

namespace {

// RabbitMQ (3.10 to 4.0 at least) answers basic.consume on a quorum queue whose Raft member has
// not started yet with an internal error that closes the connection ({error,noproc} in the
// broker's log). That happens when instances start together: one declares the queue, another
// sees it declared and consumes before the queue is ready. It passes within moments.
bool quorum_queue_not_ready(const Error &e) {
    const std::string what = e.what();
    return e.code() == Errc::broker && what.find("basic.consume '") != std::string::npos &&
           what.find("connection closed by broker: 541 ") != std::string::npos;
}

} // namespace

void Consumer::connect() {
    constexpr int kAttempts = 5;
    for (int attempt = 1;; ++attempt) {
        try {
            connect_once();
            return;
        } catch (const Error &e) {
            if (attempt >= kAttempts || cfg_.consumer_queue_type != "quorum" || !quorum_queue_not_ready(e) ||
                stopping()) {
                throw;
            }
            const int delay_ms = 100 << (attempt - 1); // 100, 200, 400, 800
            log(LogLevel::warn, "consumer " + name_ + ": a quorum queue is not ready for consumers yet (" + e.what() +
                                    "); connecting again in " + std::to_string(delay_ms) + " ms");
            for (int waited = 0; waited < delay_ms && !stopping(); waited += 10) {
                poll(nullptr, 0, 10);
            }
        }
    }
}

void Consumer::connect_once() {
    drop();
    amqp::Options o = amqp_options(cfg_, "outbox-consumer " + name_);
    o.first = broker_next_;
    auto conn = std::make_unique<amqp::Connection>(o);
    ++generation_;
    broker_next_ = conn->address_index() + 1; // after a loss, the next node first
    const bool quorum = cfg_.consumer_queue_type == "quorum";
    if (cfg_.exchange_declare) {
        conn->declare_exchange(cfg_.exchange, cfg_.exchange_type, true, false);
    }
    conn->declare_exchange(dlx_, "fanout", true, false);
    declare_own_queue(*conn, dlq_, cfg_.consumer_queue_type, {{"x-queue-type", cfg_.consumer_queue_type}});
    conn->bind_queue(dlq_, dlx_, "");
    if (members_) {
        connect_partitioned(*conn);
        mq_ = std::move(conn);
        return;
    }
    amqp::Table args{{"x-queue-type", cfg_.consumer_queue_type}, {"x-dead-letter-exchange", dlx_}};
    if (quorum) {
        // Backstop for a message that kills its consumer before the runtime can count it; the
        // runtime itself dead-letters at the limit with the handler's error as the reason.
        args.emplace_back("x-delivery-limit", int64_t{cfg_.consumer_delivery_limit});
    }
    declare_own_queue(*conn, queue_, cfg_.consumer_queue_type, args);
    conn->bind_queue(queue_, cfg_.exchange, "");
    conn->qos(static_cast<uint16_t>(cfg_.consumer_prefetch));
    conn->confirm_select(); // dead-letter publishes are confirmed before the original is acked
    conn->consume(queue_, false, "outbox-" + name_);
    mq_ = std::move(conn);
    log(LogLevel::info, "consumer " + name_ + " connected to RabbitMQ node " + mq_->node() + " (" + amqp::redact_url(cfg_.amqp_url) +
               "), queue " + queue_ + " (" + cfg_.consumer_queue_type + "), dead letters to " + dlq_);
}

std::optional<Delivery> Consumer::next(int timeout_ms) {
    const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
    while (!stopping()) {
        if (!mq_ || !mq_->alive()) {
            connect();
        } else if (members_) {
            rebalance_if_due();
        }
        std::optional<amqp::Message> msg;
        if (!pending_.empty()) {
            msg = std::move(pending_.front());
            pending_.pop_front();
        } else {
            auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
            if (left < 0) {
                return std::nullopt;
            }
            // Short slices keep stop() prompt; wait() services heartbeats meanwhile.
            auto ev = mq_->wait(static_cast<int>(std::min<int64_t>(left, 200)));
            if (!ev) {
                if (Clock::now() >= deadline) {
                    return std::nullopt;
                }
                continue;
            }
            if (auto *m = std::get_if<amqp::Message>(&*ev)) {
                msg = std::move(*m);
            } else if (std::holds_alternative<amqp::Cancelled>(*ev)) {
                drop();
                fail(Errc::broker, "the broker cancelled consumer " + name_ + " (queue " + queue_ + " deleted?)");
            } else {
                continue; // late confirms, blocked notices: nothing to hand over
            }
        }
        Delivery d;
        std::string why = parse_delivery(std::move(*msg), cfg_.consumer_max_body_bytes, d);
        if (!why.empty()) {
            log(LogLevel::warn, "consumer " + name_ + ": dead-lettering message " +
                       (d.raw.props.message_id.empty() ? std::string("(no id)") : d.raw.props.message_id) + ": " + why);
            dead_letter(d, why);
            continue;
        }
        if (members_) {
            d.partition = partition_of(d.raw.consumer_tag);
        }
        d.generation = generation_;
        return d;
    }
    return std::nullopt;
}

void Consumer::ack(const Delivery &d) {
    if (!mq_) {
        fail(Errc::connection, "consumer is not connected; the message will be redelivered");
    }
    mq_->ack(d.raw.delivery_tag);
    mark_settled(d);
    classic_attempts_.erase(d.event_id);
    uncounted_.erase(d.event_id);
}

void Consumer::nack(const Delivery &d, bool requeue) {
    if (!mq_) {
        fail(Errc::connection, "consumer is not connected; the message will be redelivered");
    }
    mq_->nack(d.raw.delivery_tag, false, requeue);
    mark_settled(d);
}

void Consumer::dead_letter(const Delivery &d, const std::string &reason) {
    if (!mq_) {
        fail(Errc::connection, "consumer is not connected; the message will be redelivered");
    }
    amqp::Properties props = d.raw.props;
    // Properties travel in one frame (128 KiB): a handler's 16 MiB error text would make the
    // publish fail and the message could never leave the queue. Shortened, printable UTF-8.
    props.headers.emplace_back("x-outbox-dead-reason", printable(reason, 1024));
    props.headers.emplace_back("x-outbox-dead-queue", source_queue(d));
    if (members_) {
        // A partitioned subscriber's poison event is reported with its aggregate: the
        // aggregate's later events go on (they are not held back); the order check reports the
        // gap at the next one.
        props.headers.emplace_back("x-outbox-dead-aggregate", partition_key(d.aggregate_type, d.aggregate_id));
        log(LogLevel::warn, "consumer " + name_ + ": dead-lettering event " + d.event_id + " of aggregate " + d.aggregate_type +
                   ":" + d.aggregate_id + " from " + source_queue(d) +
                   "; later events of this aggregate go on and the order check reports the gap");
    }
    props.headers.emplace_back("x-outbox-dead-consumer", name_);
    props.headers.emplace_back("x-outbox-dead-at", static_cast<int64_t>(std::time(nullptr)));
    if (props.delivery_mode == 0) {
        props.delivery_mode = 2;
    }
    // Mandatory: when the dead-letter queue is gone, the broker returns the message (before its
    // ack) instead of dropping it, and the original is not acked.
    uint64_t tag = mq_->publish(dlx_, queue_, true, props, d.raw.body);
    bool returned = false;
    const auto deadline = Clock::now() + std::chrono::milliseconds(cfg_.amqp_io_timeout_ms);
    while (true) {
        auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
        if (left <= 0) {
            drop();
            fail(Errc::timeout, "no confirm for a dead-letter publish; the message will be redelivered");
        }
        auto ev = mq_->wait(static_cast<int>(left));
        if (!ev) {
            continue;
        }
        if (auto *m = std::get_if<amqp::Message>(&*ev)) {
            pending_.push_back(std::move(*m));
        } else if (std::holds_alternative<amqp::Returned>(*ev)) {
            returned = true; // only one dead-letter publish is ever outstanding
        } else if (auto *a = std::get_if<amqp::Ack>(&*ev)) {
            if (a->tag == tag || (a->multiple && a->tag > tag)) {
                if (returned) {
                    drop(); // the next connect() declares the dead-letter queue again
                    fail(Errc::broker, "the dead-letter publish was returned (queue " + dlq_ +
                                           " missing?); the message stays queued");
                }
                break;
            }
        } else if (auto *n = std::get_if<amqp::Nack>(&*ev)) {
            if (n->tag == tag || (n->multiple && n->tag > tag)) {
                fail(Errc::broker, "the broker refused the dead-letter publish; the message stays queued");
            }
        }
    }
    mq_->ack(d.raw.delivery_tag);
    mark_settled(d);
    classic_attempts_.erase(d.event_id);
    uncounted_.erase(d.event_id);
}

// The partition topology, and consumers on the partitions the membership assigns this
// instance, prefetch 1 each: at most one unsettled message per partition. Why this keeps a
// partition with one instance at a time is in core/partitions.hpp.
void Consumer::connect_partitioned(amqp::Connection &conn) {
    members_->tick(true);
    partitions::declare(conn, cfg_, queue_, dlx_, [&](const std::string &q, const amqp::Table &args) {
        declare_own_queue(conn, q, cfg_.consumer_queue_type, args);
    });
    conn.qos(1);
    conn.confirm_select();
    {
        std::lock_guard<std::mutex> lock(held_mu_);
        held_ = members_->owned();
    }
    std::string list;
    for (int p : members_->owned()) {
        conn.consume(partitions::partition_queue(queue_, p), false, "outbox-" + name_ + ".p" + std::to_string(p));
        list += (list.empty() ? "" : ",") + std::to_string(p);
    }
    log(LogLevel::info, "consumer " + name_ + " instance " + cfg_.consumer_instance + " connected to RabbitMQ node " + conn.node() +
               ", partitions [" + list + "] of " + std::to_string(cfg_.consumer_partitions) + " (" +
               std::to_string(members_->members().size()) + " instance(s)), dead letters to " + dlq_);
}

// Between messages only (the one handed out before is settled): a changed assignment is taken
// up by reconnecting. Closing the connection (never basic.cancel) returns what this instance
// holds to the head of its queues before a standby is activated (core/partitions.hpp, point 2).
void Consumer::rebalance_if_due() {
    try {
        if (!members_->tick()) {
            return;
        }
    } catch (const Error &e) {
        if (e.code() == Errc::invalid_argument) {
            throw;
        }
        // PostgreSQL is away: keep the partitions held (the broker keeps them exclusive); the
        // others take them over when this instance's lease runs out.
        log(LogLevel::warn, "consumer " + name_ + ": membership heartbeat failed: " + e.what());
        return;
    }
    log(LogLevel::info, "consumer " + name_ + " instance " + cfg_.consumer_instance + ": partition assignment changed (" +
               std::to_string(members_->members().size()) + " instance(s)); reconnecting");
    connect();
}

std::vector<int> Consumer::partitions_held() const {
    std::lock_guard<std::mutex> lock(held_mu_);
    return held_;
}

int Consumer::partition_of(const std::string &consumer_tag) const {
    const std::string prefix = "outbox-" + name_ + ".p";
    if (consumer_tag.rfind(prefix, 0) != 0) {
        return -1;
    }
    return std::atoi(consumer_tag.c_str() + prefix.size());
}

std::string Consumer::source_queue(const Delivery &d) const {
    const int p = members_ ? partition_of(d.raw.consumer_tag) : -1;
    return p >= 0 ? partitions::partition_queue(queue_, p) : queue_;
}

int64_t Consumer::attempts(const Delivery &d) const {
    if (d.delivery_count >= 0 && cfg_.consumer_queue_type == "quorum") {
        // The broker counts every requeue; those that were not the handler's failure are not attempts.
        auto it = uncounted_.find(d.event_id);
        return std::max<int64_t>(1, d.delivery_count + 1 - (it == uncounted_.end() ? 0 : it->second));
    }
    auto it = classic_attempts_.find(d.event_id);
    return (it == classic_attempts_.end() ? 0 : it->second) + 1;
}

namespace {
// Per-event counts kept between deliveries are bounded: a queue of a million distinct failing
// events forgets counts rather than memory growing without end (the broker's x-delivery-limit
// stays the backstop on quorum queues).
constexpr size_t kMaxTracked = 100000;

void bump(std::unordered_map<std::string, int64_t> &counts, const std::string &id) {
    if (counts.size() > kMaxTracked) {
        counts.clear();
    }
    ++counts[id];
}
} // namespace

Settlement Consumer::settle(const Delivery &d, Outcome outcome, const std::string &reason, const pg::Conn *conn) {
    Settlement s;
    if (outcome == Outcome::handler_failed && conn != nullptr && !conn->ok()) {
        // The database went away under the handler: not the handler's failure. Nothing was
        // committed; the message is requeued and no attempt is counted.
        s.db_lost = true;
        outcome = Outcome::not_processed;
    }
    switch (outcome) {
    case Outcome::handled:
        ack(d);
        return s;
    case Outcome::duplicate:
        log(LogLevel::info, "consumer " + name_ + ": event " + d.event_id + " (" + d.event_type + " " + d.aggregate_type + ":" +
                   d.aggregate_id + ") was already processed; acknowledged without running the handler");
        ack(d);
        return s;
    case Outcome::held:
        ack(d);
        return s;
    case Outcome::handler_failed: {
        s.attempt = attempts(d);
        if (s.attempt >= cfg_.consumer_delivery_limit) {
            log(LogLevel::warn, "consumer " + name_ + ": event " + d.event_id + " failed " + std::to_string(s.attempt) +
                       " time(s), dead-lettering: " + reason);
            dead_letter(d, "handler failed " + std::to_string(s.attempt) + " time(s): " + reason);
            s.action = Settled::dead_lettered;
            return s;
        }
        log(LogLevel::warn, "consumer " + name_ + ": event " + d.event_id + " failed (attempt " + std::to_string(s.attempt) +
                   "), redelivering: " + reason);
        bump(classic_attempts_, d.event_id);
        nack(d, true);
        s.action = Settled::requeued;
        return s;
    }
    case Outcome::not_processed:
        log(LogLevel::warn, "consumer " + name_ + ": event " + d.event_id + " not processed, redelivering without counting an " +
                   "attempt: " + (s.db_lost ? "PostgreSQL connection lost in the handler: " : "") + reason);
        nack(d, true);
        bump(uncounted_, d.event_id);
        s.action = Settled::requeued;
        return s;
    }
    fail(Errc::invalid_argument, "unknown outcome " + std::to_string(static_cast<int>(outcome)));
}

int Consumer::retry_delay_ms(int failures, const std::string &why) const {
    int delay = 100;
    for (int i = 1; i < failures && delay < 30000; ++i) {
        delay *= 2;
    }
    delay = std::min(delay, 30000);
    if (!why.empty()) {
        log(LogLevel::warn, "consumer " + name_ + ": " + why + "; retrying in " + std::to_string(delay) + " ms");
    }
    return delay;
}

// One loop for every face (core/consumer_loop.hpp), here on a connection of the library's.
void Consumer::run(pg::Conn *db, const Handler &handler) {
    ConsumerLoop loop(*this, db != nullptr ? LoopConn::library_lent : LoopConn::library_own, db, LoopOptions{});
    try {
        run_blocking(loop, *this, handler);
    } catch (...) {
        drop();
        throw;
    }
    drop();
    log(LogLevel::info, "consumer " + name_ + " stopped");
}

} // namespace outbox
