// The send watchdog's thread: arming before a send, disarming after it, and the thread that shuts
// down the socket of a call that overran its budget.
#include "amqp_watchdog.hpp"

#include "error.hpp"

#include <sys/socket.h>

#include <string>
#include <system_error>

namespace outbox::amqp {

using std::chrono::milliseconds;

void Watchdog::arm(int fd, long long budget_ms) {
    std::unique_lock<std::mutex> lk(mu_);
    if (!thread_.joinable()) {
        try {
            thread_ = std::thread([this] { run(); });
        } catch (const std::system_error &e) {
            fail(Errc::internal, std::string("cannot start the AMQP send watchdog thread: ") + e.what());
        }
    }
    fd_ = fd;
    deadline_ = Clock::now() + milliseconds(budget_ms);
    armed_ = true;
    fired_ = false;
    const bool wake = idle_ || deadline_ < sleeping_until_;
    lk.unlock();
    // A watchdog sleeping towards an earlier deadline re-checks on its own when it wakes; only an
    // idle one, or one sleeping past the new deadline, needs a notification. That keeps a publish
    // loop (steadily later deadlines) free of context switches.
    if (wake) {
        cv_.notify_one();
    }
}

bool Watchdog::disarm() noexcept {
    std::lock_guard<std::mutex> lk(mu_);
    armed_ = false;
    return fired_;
}

void Watchdog::stop() noexcept {
    {
        std::lock_guard<std::mutex> lk(mu_);
        stopping_ = true;
        armed_ = false;
    }
    cv_.notify_one();
    if (thread_.joinable()) {
        thread_.join();
    }
}

void Watchdog::run() {
    std::unique_lock<std::mutex> lk(mu_);
    while (!stopping_) {
        if (!armed_) {
            idle_ = true;
            cv_.wait(lk);
            idle_ = false;
            continue;
        }
        if (Clock::now() >= deadline_) {
            ::shutdown(fd_, SHUT_RDWR);
            fired_ = true;
            armed_ = false;
            continue;
        }
        const auto until = deadline_;
        sleeping_until_ = until;
        cv_.wait_until(lk, until);
        sleeping_until_ = Clock::time_point::max();
    }
}

} // namespace outbox::amqp
