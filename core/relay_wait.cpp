// Idle waiting: between steps (NOTIFY, the poll interval, a stop) and while backing off after a
// failure, servicing AMQP heartbeats and (un)block notices meanwhile.
#include "relay.hpp"

#include "relay_internal.hpp"

#include <poll.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <string>
#include <variant>

namespace outbox {

void Relay::sleep_interruptible(int ms) {
    const auto deadline = Clock::now() + std::chrono::milliseconds(ms);
    while (!stopping()) {
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
        if (left <= 0) {
            return;
        }
        // Backing off from a PostgreSQL outage must not cost the RabbitMQ connection too: without
        // its heartbeats the broker closes it after 2 x amqp.heartbeat_s, and the first step after
        // the database is back would fail on it (and back off again). wait() sends and checks them.
        if (mq_) {
            try {
                while (auto ev = mq_->wait(0)) {
                    if (std::holds_alternative<amqp::Blocked>(*ev)) {
                        blocked_ = true;
                    } else if (std::holds_alternative<amqp::Unblocked>(*ev)) {
                        blocked_ = false;
                    }
                }
            } catch (const Error &e) {
                log(LogLevel::warn, std::string("RabbitMQ connection lost while backing off: ") + e.what());
                drop_amqp();
            }
        }
        pollfd fds[2];
        nfds_t n = 0;
        fds[n++] = {stop_pipe_[0], POLLIN, 0};
        if (mq_ && mq_->fd() >= 0) {
            fds[n++] = {mq_->fd(), POLLIN, 0};
        }
        poll(fds, n, static_cast<int>(std::min<int64_t>(left, 1000)));
    }
}

void Relay::idle_wait(int timeout_ms) {
    const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
    while (!stopping()) {
        auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
        if (left <= 0) {
            return;
        }
        // Heartbeats and connection.blocked/unblocked are only seen inside wait().
        if (mq_) {
            while (auto ev = mq_->wait(0)) {
                if (std::holds_alternative<amqp::Blocked>(*ev)) {
                    blocked_ = true;
                } else if (std::holds_alternative<amqp::Unblocked>(*ev)) {
                    blocked_ = false;
                }
            }
        }
        // A notification read by libpq during the last step sits in its buffer, where poll()
        // cannot see it: look there first.
        if (listening_ && pg_ && pg_->ok()) {
            if (pg_->take_notifications() && !blocked_) {
                return;
            }
        }
        pollfd fds[3];
        nfds_t n = 0;
        fds[n++] = {stop_pipe_[0], POLLIN, 0};
        int pg_index = -1;
        if (listening_ && pg_ && pg_->ok()) {
            pg_index = static_cast<int>(n);
            fds[n++] = {pg_->socket(), POLLIN, 0};
        }
        if (mq_ && mq_->fd() >= 0) {
            fds[n++] = {mq_->fd(), POLLIN, 0};
        }
        // Wake at least every second to service AMQP heartbeats.
        int rc = poll(fds, n, static_cast<int>(std::min<int64_t>(left, 1000)));
        if (rc < 0 && errno != EINTR) {
            return;
        }
        if (pg_index >= 0 && (fds[pg_index].revents & (POLLIN | POLLERR | POLLHUP)) != 0) {
            if (!pg_->consume_input()) {
                log(LogLevel::warn, "PostgreSQL connection lost while idle");
                return; // the next step reconnects
            }
            if (pg_->take_notifications() && !blocked_) {
                return;
            }
        }
    }
}

} // namespace outbox
