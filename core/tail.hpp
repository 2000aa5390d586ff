// `outbox tail`: a temporary, exclusive queue bound to an exchange, to watch what passes through
// it. Messages are shown as they come, events or not; nothing is acknowledged (no-ack consume).
#pragma once

#include "amqp.hpp"
#include "config.hpp"
#include "consumer.hpp"

#include <optional>
#include <string>

namespace outbox {

class Tail {
  public:
    // Connects to cfg.amqp_url (Error(invalid_argument) without one), declares `exchange` (empty:
    // cfg.exchange) as configured, and binds a server-named queue to it ("#" on a topic exchange).
    Tail(const Config &cfg, const std::string &exchange);

    // The next message within timeout_ms, or nullopt. An event's envelope fields are parsed;
    // any other message comes with its body and properties only.
    std::optional<Delivery> next(int timeout_ms);

    [[nodiscard]] const std::string &exchange() const { return exchange_; }
    [[nodiscard]] const std::string &queue() const { return queue_; }

  private:
    Config cfg_;
    std::string exchange_;
    amqp::Connection conn_;
    std::string queue_;
};

} // namespace outbox
