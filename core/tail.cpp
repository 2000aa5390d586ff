#include "tail.hpp"

#include "connect.hpp"

#include <chrono>
#include <variant>

namespace outbox {
namespace {

amqp::Options tail_options(const Config &cfg, const std::string &exchange) {
    if (!exchange.empty()) {
        validate_amqp_name(exchange, "exchange", false);
    }
    cfg.require_amqp_url("outbox tail");
    return amqp_options(cfg, "outbox-tail");
}

} // namespace

Tail::Tail(const Config &cfg, const std::string &exchange)
    : cfg_(cfg), exchange_(exchange.empty() ? cfg.exchange : exchange), conn_(tail_options(cfg, exchange)) {
    conn_.declare_exchange(exchange_, cfg_.exchange_type, true, false);
    queue_ = conn_.declare_queue("", false, true, true);
    conn_.bind_queue(queue_, exchange_, exchange.empty() && cfg_.exchange_type != "fanout" ? "#" : "");
    conn_.consume(queue_, true);
}

std::optional<Delivery> Tail::next(int timeout_ms) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    do {
        const auto left =
            std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
        auto ev = conn_.wait(static_cast<int>(std::max<int64_t>(0, std::min<int64_t>(left.count(), 200))));
        if (!ev) {
            continue;
        }
        auto *m = std::get_if<amqp::Message>(&*ev);
        if (m == nullptr) {
            continue;
        }
        Delivery d;
        amqp::Message copy = *m;
        if (!parse_delivery(std::move(*m), cfg_.consumer_max_body_bytes, d).empty()) {
            d = Delivery{};
            d.raw = std::move(copy); // not an event: shown as it is
        }
        return d;
    } while (std::chrono::steady_clock::now() < deadline);
    return std::nullopt;
}

} // namespace outbox
