// Shared by the relay integration tests: a fresh schema and exchange per test on the real
// PostgreSQL and RabbitMQ, events written through the real write path.
#pragma once

#include "amqp_collector.hpp"
#include "config.hpp"
#include "envelope.hpp"
#include "event.hpp"
#include "pg.hpp"
#include "relay.hpp"
#include "schema.hpp"
#include "store.hpp"
#include "test_env.hpp"

#include <gtest/gtest.h>

#include <random>
#include <string>

namespace outbox_test {

inline std::string random_suffix() {
    static std::mt19937_64 rng{std::random_device{}()};
    return std::to_string(rng() % 100000000);
}

class RelayTest : public ::testing::Test {
  protected:
    void SetUp() override {
        suffix = random_suffix();
        cfg.set("outbox.schema", "r_" + suffix);
        cfg.set("amqp.exchange", "test.relay." + suffix);
        cfg.set("event.type_map", "PRD=Product,ORD=Order");
        cfg.set("relay.backoff_base_ms", "50");
        cfg.set("relay.backoff_max_ms", "200");
        cfg.set("relay.name", "outbox-test-relay-" + suffix);
        cfg.pg_url = pg_url();
        cfg.amqp_url = amqp_url();
        db.emplace(outbox::pg::Conn::open(pg_url()));
        outbox::schema::migrate(*db, cfg);
    }
    void TearDown() override {
        if (db && db->ok()) {
            db->exec_simple("DROP SCHEMA IF EXISTS \"" + cfg.schema + "\" CASCADE");
        }
        try {
            outbox::amqp::Connection c(Collector::options());
            c.delete_exchange(cfg.exchange);
        } catch (...) {
        }
    }

    // Writes `n` events over `aggregates` aggregates; returns their ids in write order.
    std::vector<std::string> write_events(int n, int aggregates = 100, const std::string &tag = "w") {
        std::vector<std::string> ids;
        outbox::Event ev;
        ev.set("aggregate_type", "PRD");
        ev.set("operation", "POST");
        for (int i = 0; i < n; ++i) {
            ev.set("aggregate_id", tag + std::to_string(i % aggregates));
            ev.set("payload", "{\"i\":" + std::to_string(i) + ",\"name\":\"Widget \\\"Pro\\\"\"}");
            ev.set("metadata", i % 7 == 0 ? R"({"traceparent":"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"})"
                                          : R"({"source":"test"})");
            outbox::store::write(*db, cfg, ev);
            ids.push_back(ev.resolved_id);
        }
        return ids;
    }

    // Steps until a step claims nothing; returns the summed stats.
    outbox::RelayStats drain(outbox::Relay &relay, int max_steps = 10000) {
        outbox::RelayStats total;
        for (int i = 0; i < max_steps; ++i) {
            outbox::RelayStats s = relay.step();
            total.claimed += s.claimed;
            total.published += s.published;
            total.failed += s.failed;
            total.held_back += s.held_back;
            total.unroutable += s.unroutable;
            total.nacked += s.nacked;
            if (s.claimed == 0) {
                break;
            }
        }
        return total;
    }

    long scalar_long(const std::string &sql) {
        outbox::pg::Result r = db->exec(sql);
        return static_cast<long>(r.get_int(0, 0));
    }

    std::string table() const { return cfg.outbox_qualified(); }

    std::string suffix;
    outbox::Config cfg;
    std::optional<outbox::pg::Conn> db;
};

} // namespace outbox_test
