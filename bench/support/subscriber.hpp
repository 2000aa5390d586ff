// A subscriber on the bench queue while a drain runs: the shape of production, where the services'
// consumers take the events as they come, so the queue stays short and the broker confirms a
// persistent message once every queue has delivered it (or has written it to disk). Without it,
// a drain's queue grows by the whole backlog, and what a drain of 1M measures is the broker
// holding 1M messages as much as the relay (B itself slows down the same way).
#pragma once

#include "amqp.hpp"
#include "events.hpp"
#include "run.hpp"

#include <atomic>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

namespace bench {

class Subscriber {
  public:
    // Connects and starts consuming `queue` (no_ack) on a thread of its own; expects g's messages.
    Subscriber(const std::string &amqp_url, const std::string &queue, const Generator &g);
    ~Subscriber();
    Subscriber(const Subscriber &) = delete;
    Subscriber &operator=(const Subscriber &) = delete;

    // Waits until every one of g's messages arrived or nothing arrived for `idle_s` seconds, then
    // stops. False when some are missing.
    bool finish(int idle_s);

    [[nodiscard]] long received() const { return received_.load(); }
    [[nodiscard]] long duplicates() const { return duplicates_.load(); }
    [[nodiscard]] long foreign() const { return foreign_.load(); } // message ids not of g
    [[nodiscard]] long expected() const { return g_.count; }

  private:
    void loop();

    Amqp mq_;
    const Generator &g_;
    std::vector<uint8_t> seen_;
    std::atomic<long> received_{0}, duplicates_{0}, foreign_{0};
    std::atomic<bool> stop_{false};
    std::atomic<int64_t> last_ms_{0}; // steady-clock ms of the last delivery
    std::thread thread_;
};

// Waits for the subscriber to have every message of `who`'s publish or drain (finish), and checks
// that it got each once and that the queue is empty.
void expect_got_all(Run &run, Amqp &admin, Subscriber &s, const std::string &who);

} // namespace bench
