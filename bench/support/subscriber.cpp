#include "subscriber.hpp"

#include "util.hpp"

#include <chrono>

namespace bench {

namespace {

int64_t now_ms() {
    return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now().time_since_epoch()).count();
}

} // namespace

Subscriber::Subscriber(const std::string &amqp_url, const std::string &queue, const Generator &g)
    : mq_(amqp_url, 30), g_(g), seen_(static_cast<size_t>(g.count), 0) {
    mq_.consume(queue);
    last_ms_ = now_ms();
    thread_ = std::thread([this] { loop(); });
}

Subscriber::~Subscriber() {
    stop_ = true;
    if (thread_.joinable()) {
        thread_.join();
    }
}

void Subscriber::loop() {
    Amqp::Delivery d;
    while (!stop_.load()) {
        if (!mq_.next(d, 200)) {
            continue;
        }
        last_ms_ = now_ms();
        const long i = g_.index_of(d.message_id);
        if (i < 0 || i >= g_.count) {
            ++foreign_;
        } else if (seen_[static_cast<size_t>(i)] != 0) {
            ++duplicates_;
        } else {
            seen_[static_cast<size_t>(i)] = 1;
        }
        ++received_;
    }
}

bool Subscriber::finish(int idle_s) {
    while (received_.load() - duplicates_.load() - foreign_.load() < g_.count &&
           now_ms() - last_ms_.load() < idle_s * 1000L) {
        check_interrupt();
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    stop_ = true;
    thread_.join();
    return received_.load() - duplicates_.load() - foreign_.load() == g_.count;
}

void expect_got_all(Run &run, Amqp &admin, Subscriber &s, const std::string &who) {
    const bool all = s.finish(15);
    expect(run, all && s.duplicates() == 0 && s.foreign() == 0,
           who + ": the subscriber got each of the " + std::to_string(s.expected()) + " messages once (" +
               std::to_string(s.received()) + " received, " + std::to_string(s.duplicates()) + " duplicate(s), " +
               std::to_string(s.foreign()) + " foreign)");
    expect_queue_holds(run, admin, 0, who);
}

} // namespace bench
