#include "capi.hpp"

#include <algorithm>
#include <cstring>

using outbox::capi::guard;

namespace {

// Copies the fields the caller's (possibly older, smaller) struct has; NULL is fine. The public
// struct keeps version 1's names: claimed = read, claim_us = read_us, mark_us = record_us.
void copy_stats(outbox_relay_stats *stats, const outbox::RelayStats &s) {
    if (stats == nullptr) {
        return;
    }
    outbox_relay_stats full{};
    full.size = stats->size;
    full.claimed = s.read;
    full.published = s.published;
    full.failed = s.failed;
    full.dead = s.dead;
    full.held_back = s.held_back;
    full.unroutable = s.unroutable;
    full.nacked = s.nacked;
    full.unconfirmed = s.unconfirmed;
    full.claim_us = s.read_us;
    full.publish_us = s.publish_us;
    full.mark_us = s.record_us;
    full.total_us = s.total_us;
    full.blocked = s.blocked ? 1 : 0;
    std::memcpy(stats, &full, std::min(stats->size, sizeof full));
}

} // namespace

extern "C" {

outbox_status outbox_relay_new(outbox_relay **out, const outbox_config *cfg) {
    OUTBOX_REQUIRE(out);
    *out = nullptr;
    OUTBOX_REQUIRE(cfg);
    return guard([&] { *out = new outbox_relay(cfg->cfg); });
}

void outbox_relay_free(outbox_relay *relay) {
    delete relay;
}

outbox_status outbox_relay_set_logger(outbox_relay *relay, outbox_log_fn fn, void *user_data) {
    OUTBOX_REQUIRE(relay);
    return guard([&] {
        if (fn == nullptr) {
            relay->relay.set_logger({});
            return;
        }
        relay->relay.set_logger([fn, user_data](outbox::LogLevel level, const std::string &msg) {
            fn(static_cast<outbox_log_level>(static_cast<int>(level)), msg.c_str(), user_data);
        });
    });
}

outbox_status outbox_relay_set_step_callback(outbox_relay *relay, outbox_relay_step_fn fn, void *user_data) {
    OUTBOX_REQUIRE(relay);
    return guard([&] {
        if (fn == nullptr) {
            relay->relay.set_step_observer({});
            return;
        }
        relay->relay.set_step_observer([fn, user_data](const outbox::StepReport &r) {
            outbox_relay_stats stats;
            outbox_relay_stats_init(&stats);
            copy_stats(&stats, r.stats);
            outbox_relay_step_info info{};
            info.size = sizeof info;
            info.status = static_cast<outbox_status>(static_cast<int>(r.code));
            info.error = r.error.c_str();
            info.stats = &stats;
            info.pg_up = r.pg_up ? 1 : 0;
            info.amqp_up = r.amqp_up ? 1 : 0;
            info.amqp_node = r.amqp_node.c_str();
            info.retry_in_ms = r.retry_in_ms;
            fn(&info, user_data);
        });
    });
}

outbox_status outbox_relay_step(outbox_relay *relay, outbox_relay_stats *stats) {
    OUTBOX_REQUIRE(relay);
    if (stats != nullptr && stats->size < sizeof(size_t)) {
        outbox::capi::set_error(OUTBOX_ERR_INVALID_ARGUMENT, "stats->size must be set (outbox_relay_stats_init)");
        return OUTBOX_ERR_INVALID_ARGUMENT;
    }
    return guard([&] { copy_stats(stats, relay->relay.step()); });
}

outbox_status outbox_relay_settle(outbox_relay *relay, outbox_relay_stats *stats) {
    OUTBOX_REQUIRE(relay);
    if (stats != nullptr && stats->size < sizeof(size_t)) {
        outbox::capi::set_error(OUTBOX_ERR_INVALID_ARGUMENT, "stats->size must be set (outbox_relay_stats_init)");
        return OUTBOX_ERR_INVALID_ARGUMENT;
    }
    return guard([&] { copy_stats(stats, relay->relay.settle()); });
}

outbox_status outbox_relay_run(outbox_relay *relay) {
    OUTBOX_REQUIRE(relay);
    return guard([&] { relay->relay.run(); });
}

void outbox_relay_stop(outbox_relay *relay) {
    if (relay != nullptr) {
        relay->relay.stop();
    }
}

outbox_status outbox_relay_reset(outbox_relay *relay) {
    OUTBOX_REQUIRE(relay);
    return guard([&] { relay->relay.reset_stop(); });
}

} // extern "C"
