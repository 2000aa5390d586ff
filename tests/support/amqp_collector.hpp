// Test helper: a queue bound to an exchange and a consumer that collects every message, so
// tests can check exactly what reached the broker. Real RabbitMQ (OUTBOX_AMQP_URL), no mocks.
#pragma once

#include "amqp.hpp"
#include "test_env.hpp"

#include <chrono>
#include <map>
#include <string>
#include <vector>

namespace outbox_test {

inline std::string header_string(const outbox::amqp::Properties &p, const std::string &name) {
    for (const auto &[k, v] : p.headers) {
        if (k == name) {
            if (const auto *s = std::get_if<std::string>(&v)) {
                return *s;
            }
            if (const auto *i = std::get_if<int64_t>(&v)) {
                return std::to_string(*i);
            }
            if (const auto *b = std::get_if<bool>(&v)) {
                return *b ? "true" : "false";
            }
        }
    }
    return "";
}

class Collector {
  public:
    // Declares `exchange` (fanout, durable) and a fresh exclusive queue bound to it.
    explicit Collector(const std::string &exchange, const outbox::amqp::Table &queue_args = {})
        : conn_(options()) {
        conn_.declare_exchange(exchange, "fanout", true, false);
        queue_ = conn_.declare_queue("", false, true, true, queue_args);
        conn_.bind_queue(queue_, exchange, "");
        conn_.qos(1000);
        conn_.consume(queue_, true);
    }

    static outbox::amqp::Options options() {
        outbox::amqp::Options o;
        o.url = amqp_url();
        o.connection_name = "outbox-test-collector";
        return o;
    }

    // Collects until `count` messages arrived or `timeout_ms` passed without any new message.
    const std::vector<outbox::amqp::Message> &collect(size_t count, int idle_timeout_ms = 5000) {
        auto last = std::chrono::steady_clock::now();
        while (messages_.size() < count) {
            auto ev = conn_.wait(100);
            if (ev) {
                if (auto *m = std::get_if<outbox::amqp::Message>(&*ev)) {
                    messages_.push_back(std::move(*m));
                    last = std::chrono::steady_clock::now();
                }
                continue;
            }
            if (std::chrono::steady_clock::now() - last > std::chrono::milliseconds(idle_timeout_ms)) {
                break;
            }
        }
        return messages_;
    }
    // Drains whatever arrives within `quiet_ms` of quiet.
    const std::vector<outbox::amqp::Message> &drain(int quiet_ms = 500) { return collect(SIZE_MAX, quiet_ms); }

    [[nodiscard]] const std::string &queue() const { return queue_; }
    [[nodiscard]] const std::vector<outbox::amqp::Message> &messages() const { return messages_; }
    outbox::amqp::Connection &connection() { return conn_; }

  private:
    outbox::amqp::Connection conn_;
    std::string queue_;
    std::vector<outbox::amqp::Message> messages_;
};

} // namespace outbox_test
