// The relay's life and its loop: construction, stop, one step (read, chains, publish, record in
// order) and run() (adaptive polling, backoff after failures, the observer's reports).
#include "relay.hpp"

#include "relay_internal.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <optional>
#include <string>
#include <vector>

namespace outbox {

Relay::Relay(Config cfg)
    : cfg_(std::move(cfg)), read_sql_(stream::read_sql(cfg_)), parked_sql_(stream::parked_sql(cfg_)),
      record_sql_(stream::record_sql(cfg_)), rng_(std::random_device{}()) {
    cfg_.require_pg_url("the relay");
    cfg_.require_amqp_url("the relay");
    if (pipe2(stop_pipe_, O_CLOEXEC | O_NONBLOCK) != 0) {
        fail(Errc::internal, "cannot create the relay's stop pipe");
    }
}

Relay::~Relay() {
    discard_prefetch();
    drop_amqp();
    drop_pg();
    for (int fd : stop_pipe_) {
        if (fd >= 0) {
            close(fd);
        }
    }
}

void Relay::stop() noexcept {
    stop_.store(true, std::memory_order_relaxed);
    char c = 1;
    // write(2) is async-signal-safe; a full pipe already holds a wake-up.
    ssize_t r = write(stop_pipe_[1], &c, 1);
    (void)r;
}

void Relay::reset_stop() noexcept {
    stop_.store(false, std::memory_order_relaxed);
    char buf[64];
    while (read(stop_pipe_[0], buf, sizeof buf) > 0) {
    }
}

void Relay::log(LogLevel level, const std::string &msg) const {
    if (log_) {
        log_(level, msg);
    }
}

RelayStats Relay::step() {
    return step_batch(cfg_.relay_overlap);
}

RelayStats Relay::settle() {
    if (!round_) {
        return RelayStats{};
    }
    return step_batch(false);
}

// Stages 1-5. The batch is the one the last step left in flight, if any (relay.overlap), else
// read now. Only the batch's outcomes are recorded; with `overlap` the next batch can be in flight
// when the step returns (round_), its positions held below the cursor.
RelayStats Relay::step_batch(bool overlap) {
    RelayStats st;
    const auto t0 = Clock::now();
    if (round_ && (!mq_ || !pg_)) {
        abandon_next(); // its tags, or the progress it was read with, are gone
    }
    ensure_amqp();
    ensure_pg();
    pg::Conn &db = *pg_;
    collect_prefetch(db); // left sent only when the last step ended early, by an exception
    std::vector<RelayItem> items;
    try {
        if (!ensure_active()) {
            abandon_next();
            st.total_us = micros_since(t0);
            return st;
        }
        maintain_partitions(db);
        if (!round_) {
            items = read_batch(db, st);
        }
    } catch (const Error &) {
        if (!db.ok()) {
            drop_pg();
        }
        throw;
    }
    if (!round_ && items.empty()) {
        st.read_us = micros_since(t0);
        record(db, items, st); // the cursor may pass gaps that became final
        st.total_us = micros_since(t0);
        return st;
    }
    if (round_) {
        round_->promote(st);
    } else {
        round_ = std::make_unique<PublishRound>(std::move(items));
        round_->st = &st;
        chain(*round_, 0);
    }
    st.read = static_cast<int64_t>(round_->current_end);
    st.read_us = micros_since(t0);
    try {
        send_prefetch(db, round_->items);
    } catch (const Error &) {
        prefetch_.reset(); // the next step reads afresh (and finds a lost connection itself)
    }
    const auto t1 = Clock::now();
    const std::optional<std::string> amqp_error = publish(*round_, overlap);
    st.publish_us = micros_since(t1);
    collect_prefetch(db);
    std::vector<RelayItem> batch = finish_round();
    record(db, batch, st);
    st.total_us = micros_since(t0);
    if (amqp_error) {
        fail(Errc::broker, "RabbitMQ connection lost during a batch (" + std::to_string(st.published) +
                               " confirmed events were recorded, the rest stay pending): " + *amqp_error);
    }
    return st;
}

// After publishing: the step's batch, taken out of the round to be recorded. The next batch stays
// in flight with the round only when the batch ended cleanly (every link confirmed, failed or held
// back; no nack, so the connection stays); otherwise it is given up.
std::vector<RelayItem> Relay::finish_round() {
    PublishRound &r = *round_;
    if (!(r.current_done() && mq_ && r.st->nacked == 0)) {
        abandon_next();
    }
    if (!round_) {
        return {};
    }
    if (!round_->next_open()) {
        std::vector<RelayItem> batch = std::move(round_->items);
        round_.reset();
        return batch;
    }
    std::vector<RelayItem> batch = round_->take_current();
    round_->st = nullptr;
    return batch;
}

void Relay::report(const RelayStats &st, Errc code, const std::string &error, int retry_in_ms) {
    if (observer_) {
        observer_(StepReport{st, code, error, retry_in_ms, pg_connected(), amqp_connected(), amqp_node()});
    }
}

void Relay::run(const std::function<void(const RelayStats &)> &on_step) {
    int backoff = 100;
    // Adaptive polling: while events keep coming the relay looks again within relay.busy_poll_ms,
    // so latency stays low without the writers' NOTIFY (which costs them a commit-time lock).
    // It keeps that pace for relay.linger_ms after the last event, so the gaps of a bursty load
    // do not grow the next event's wait (the p99 latency); after that the interval doubles up to
    // relay.poll_interval_ms, where an idle relay's poll is one statement.
    const int idle_max = std::max(cfg_.relay_poll_interval_ms, 1);
    const int busy_ms = std::min(cfg_.relay_busy_poll_ms, idle_max);
    int poll_ms = busy_ms;
    auto last_work = Clock::now();
    while (!stopping()) {
        try {
            RelayStats st = step_batch(true);
            backoff = 100;
            if (on_step) {
                on_step(st);
            }
            report(st, Errc::ok, {}, 0);
            if (st.read > 0 || st.published > 0 || st.failed > 0) {
                log(LogLevel::debug, "batch: read " + std::to_string(st.read) + ", published " +
                                        std::to_string(st.published) + ", failed " + std::to_string(st.failed) +
                                        ", held back " + std::to_string(st.held_back) + " in " +
                                        std::to_string(st.total_us / 1000) + " ms");
            }
            // A full batch means more is waiting (and a batch in flight, round_, never waits); a
            // blocked broker means wait for unblocked.
            if (round_) {
                poll_ms = busy_ms;
                last_work = Clock::now();
            } else if (st.blocked || blocked_) {
                discard_prefetch(); // no read left on its way while blocked; idle_wait uses the connection
                idle_wait(cfg_.relay_poll_interval_ms);
            } else if (st.read > 0 && st.read < cfg_.relay_batch_size) {
                poll_ms = busy_ms;
                last_work = Clock::now();
                idle_wait(poll_ms);
            } else if (st.read == 0) {
                idle_wait(poll_ms);
                if (Clock::now() - last_work > std::chrono::milliseconds(cfg_.relay_linger_ms)) {
                    poll_ms = static_cast<int>(std::min<int64_t>(int64_t{poll_ms} * 2, idle_max));
                }
            } else {
                poll_ms = busy_ms;
                last_work = Clock::now();
            }
        } catch (const Error &e) {
            if (e.code() == Errc::invalid_argument || e.code() == Errc::schema) {
                // Configuration errors do not heal by retrying fast.
                backoff = std::max(backoff, 5000);
            }
            log(LogLevel::warn, std::string(errc_name(e.code())) + ": " + e.what() + "; retrying in " +
                                    std::to_string(backoff) + " ms");
            if (e.code() == Errc::broker || e.code() == Errc::timeout) {
                drop_amqp();
            }
            report(RelayStats{}, e.code(), e.what(), backoff);
            sleep_interruptible(backoff);
            backoff = std::min(backoff * 2, 30000);
        }
    }
    // The batch left in flight is confirmed and recorded (nothing new is sent after a stop); then
    // the connection goes, and with it the table's relay lock, so a relay standing by takes over at once.
    if (round_) {
        try {
            settle();
        } catch (const Error &e) {
            log(LogLevel::warn, std::string("the last batch was not recorded (its events stay pending): ") + e.what());
        }
    }
    drop_pg();
    log(LogLevel::info, "relay stopped");
}

} // namespace outbox
