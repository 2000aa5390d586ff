// One place that turns the configuration into connection options, so every component (relay,
// consumer, replay, tail) honours the same TLS, heartbeat and timeout settings.
#pragma once

#include "amqp.hpp"
#include "config.hpp"

#include <string>

namespace outbox {

amqp::Options amqp_options(const Config &cfg, std::string connection_name);

} // namespace outbox
