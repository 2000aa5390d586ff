// The events of a scenario, generated from their index, and the backlog written from them.
#pragma once

#include "pg.hpp"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <string>

namespace bench {

// The events of one scenario, generated from their index: the backlog rows written to PostgreSQL and
// the messages the baseline publishes are the same bytes the relay sends (checked with basic.get).
// Every body has the same length: fixed-width ids and a payload padded to exactly payload_bytes.
struct Generator {
    uint32_t run = 0;
    uint16_t code = 0; // scenario code inside the uuid
    char prefix = 'r'; // aggregate id prefix
    long count = 0;
    long aggregates = 1;
    int payload_bytes = 1024;
    int64_t base_us = 0; // created_at of event 0, microseconds since the epoch

    // Per-aggregate order: aggregate = i % aggregates, seq = i / aggregates + 1 (events of one aggregate
    // are spread through the backlog, as updates of one record are spread over time).
    [[nodiscard]] long aggregate_of(long i) const { return i % aggregates; }
    [[nodiscard]] long seq_of(long i) const { return i / aggregates + 1; }

    void id(std::string &out, long i) const {
        char buf[48];
        std::snprintf(buf, sizeof buf, "%08x-%04x-7000-8000-%012lx", run, code, static_cast<unsigned long>(i));
        out.assign(buf);
    }
    void aggregate_id(std::string &out, long i) const {
        char buf[32];
        std::snprintf(buf, sizeof buf, "%c%09ld", prefix, aggregate_of(i));
        out.assign(buf);
    }
    [[nodiscard]] const char *operation(long i) const { return seq_of(i) == 1 ? "POST" : "PUT"; }
    [[nodiscard]] const char *event_type(long i) const { return seq_of(i) == 1 ? "ProductCreated" : "ProductUpdated"; }
    [[nodiscard]] const char *routing_key(long i) const { return seq_of(i) == 1 ? "prd.post" : "prd.put"; }
    static const char *aggregate_type() { return "PRD"; }
    static const char *metadata() { return "{\"source\":\"relay_bench\"}"; }
    static const char *user() { return "bench"; }

    void payload(std::string &out, long i) const {
        char buf[160];
        std::snprintf(buf, sizeof buf,
                      "{\"PRD_ID\":\"%c%09ld\",\"XPRD01\":\"Widget %09ld\",\"XPRD02\":\"%09ld\",\"pad\":\"", prefix,
                      aggregate_of(i), i, seq_of(i));
        out.assign(buf);
        const long pad = static_cast<long>(payload_bytes) - static_cast<long>(out.size()) - 2;
        if (pad > 0) {
            out.append(static_cast<size_t>(pad), 'x');
        }
        out += "\"}";
    }
    [[nodiscard]] int64_t created_us(long i) const { return base_us + i; }
    [[nodiscard]] int64_t created_epoch_s(long i) const { return created_us(i) / 1000000; }
    // CREATED_AT of the envelope: YYYYMMDDHHMMSS, UTC.
    void created_compact(std::string &out, long i) const {
        const time_t t = static_cast<time_t>(created_epoch_s(i));
        tm u{};
        gmtime_r(&t, &u);
        char buf[32];
        std::snprintf(buf, sizeof buf, "%04d%02d%02d%02d%02d%02d", u.tm_year + 1900, u.tm_mon + 1, u.tm_mday, u.tm_hour,
                      u.tm_min, u.tm_sec);
        out.assign(buf);
    }
    // timestamptz in COPY text format.
    void created_sql(std::string &out, long i) const {
        const int64_t us = created_us(i);
        const time_t t = static_cast<time_t>(us / 1000000);
        tm u{};
        gmtime_r(&t, &u);
        char buf[48];
        std::snprintf(buf, sizeof buf, "%04d-%02d-%02d %02d:%02d:%02d.%06ld+00", u.tm_year + 1900, u.tm_mon + 1,
                      u.tm_mday, u.tm_hour, u.tm_min, u.tm_sec, static_cast<long>(us % 1000000));
        out.assign(buf);
    }
    // The index encoded in a message id this generator made, or -1.
    [[nodiscard]] long index_of(const std::string &message_id) const {
        if (message_id.size() != 36) {
            return -1;
        }
        return std::strtol(message_id.c_str() + 24, nullptr, 16);
    }
};

// The envelope of DESIGN.md ("the message on the wire"), built as the relay builds it.
void envelope(std::string &out, const std::string &id, const char *event_type, const std::string &aggregate_id,
              const char *aggregate_type, const char *operation, const std::string &payload, const char *metadata,
              const char *user, const std::string &created_at);

// One message of a generator, with reusable buffers.
struct Message {
    std::string id, aggregate_id, payload, created, body;
    void build(const Generator &g, long i);
};

// Writes the generator's events as committed PENDING rows (COPY), plus their aggregate counter rows.
void load_backlog(Pg &pg, const std::string &table, const std::string &aggregates_table, const Generator &g);

} // namespace bench
