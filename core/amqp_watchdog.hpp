// The send watchdog: bounds librabbitmq's sends, which poll a non-blocking socket without a
// deadline, by shutting the socket down from a thread of its own when an armed call overruns.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

namespace outbox::amqp {

using Clock = std::chrono::steady_clock;

// librabbitmq 0.11 keeps its socket O_NONBLOCK and, inside amqp_basic_publish / amqp_send_frame, polls
// for writability with an infinite deadline (cut short only by the receive-heartbeat deadline, which a
// broker that is blocked by a resource alarm keeps pushing forward). SO_SNDTIMEO does not apply to a
// non-blocking socket, so the only way to bound such a call is from outside: this thread shuts the
// socket down when an armed call overruns, the library's poll wakes up, the send fails and the call
// returns. shutdown() leaves the descriptor open, so there is no race with descriptor reuse.
class Watchdog {
  public:
    Watchdog() = default;
    Watchdog(const Watchdog &) = delete;
    Watchdog &operator=(const Watchdog &) = delete;
    ~Watchdog() { stop(); }

    void arm(int fd, long long budget_ms);

    // True when the watchdog fired during the armed call.
    bool disarm() noexcept;

    void stop() noexcept;

  private:
    void run();

    std::mutex mu_;
    std::condition_variable cv_;
    std::thread thread_;
    bool stopping_ = false;
    bool armed_ = false;
    bool fired_ = false;
    bool idle_ = false;
    int fd_ = -1;
    Clock::time_point deadline_{};
    Clock::time_point sleeping_until_ = Clock::time_point::max();
};

} // namespace outbox::amqp
