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
#include "stream.hpp"
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
            ev.set("metadata", i % 7 == 0
                                   ? R"({"traceparent":"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"})"
                                   : R"({"source":"test"})");
            outbox::store::write(*db, cfg, ev);
            ids.push_back(ev.resolved_id);
        }
        return ids;
    }

    // Steps until a step reads nothing; returns the summed stats.
    outbox::RelayStats drain(outbox::Relay &relay, int max_steps = 10000) {
        outbox::RelayStats total;
        for (int i = 0; i < max_steps; ++i) {
            outbox::RelayStats s = relay.step();
            total.read += s.read;
            total.published += s.published;
            total.failed += s.failed;
            total.held_back += s.held_back;
            total.unroutable += s.unroutable;
            total.nacked += s.nacked;
            if (s.read == 0) {
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
    std::string events() const { return outbox::stream::events_table(cfg); }

    // Storage version 2: parks an event as the relay does with a failed one (a copy of the row with
    // its status, retries, error and next attempt).
    void park(const std::string &id, const std::string &status, int retry_count, const std::string &error,
              int next_attempt_in_s = 0) {
        db->exec("INSERT INTO " + outbox::stream::parked_table(cfg) +
                     " (position, outbox_id, event_type, aggregate_type, aggregate_id, seq, operation, payload,"
                     " previous_payload, metadata, actor, created_at, idempotency_key, status, retry_count,"
                     " error_message, next_attempt_at) SELECT position, outbox_id, event_type, aggregate_type,"
                     " aggregate_id, seq, operation, payload, previous_payload, metadata, actor, created_at,"
                     " idempotency_key, $2, CAST($3 AS int), $4, now() + CAST($5 AS int) * interval '1 second' FROM " +
                     events() + " WHERE outbox_id = CAST($1 AS uuid)",
                 {id, status, std::to_string(retry_count),
                  error.empty() ? std::nullopt : std::optional<std::string>(error), std::to_string(next_attempt_in_s)});
    }

    // Storage version 2: forgets that the events from `position` on were published (their receipts
    // and the cursor), so a relay that starts afresh publishes them again.
    void unpublish_from(int64_t position) {
        const std::string p = std::to_string(position);
        db->exec("DELETE FROM " + outbox::stream::receipts_table(cfg) + " WHERE from_position >= CAST($1 AS bigint)",
                 {p});
        db->exec("UPDATE " + outbox::stream::receipts_table(cfg) +
                     " SET to_position = CAST($1 AS bigint) - 1 WHERE to_position >= CAST($1 AS bigint)",
                 {p});
        db->exec("UPDATE " + outbox::stream::relay_table(cfg) + " SET cursor = LEAST(cursor, CAST($1 AS bigint) - 1)",
                 {p});
    }

    std::string suffix;
    outbox::Config cfg;
    std::optional<outbox::pg::Conn> db;
};

} // namespace outbox_test
