// Regression tests for bad input found by the security review and the fuzzers (tests/fuzz):
// each case failed before its fix in core.
#include "config.hpp"
#include "consumer.hpp"
#include "error.hpp"
#include "event.hpp"
#include "pg.hpp"
#include "redact.hpp"

#include <gtest/gtest.h>

using namespace outbox;

namespace {

std::string envelope(const std::string &aggregate_id_json) {
    return R"({"OUTBOX_ID":"0190f5c2-1c1e-7c2a-9d1b-2f4c5e6a7b8c","EVENT_TYPE":"ProductCreated",)"
           R"("AGGREGATE_ID":)" +
           aggregate_id_json + R"(,"AGGREGATE_TYPE":"PRD","OPERATION":"POST","PAYLOAD":{"a":1}})";
}

std::string parse(const std::string &body, Delivery &d) {
    amqp::Message m;
    m.body = body;
    m.props.content_type = "application/json";
    return parse_delivery(std::move(m), 1 << 20, d);
}

} // namespace

// A \u0000 escape decoded into an id that libpq cut short at the NUL, so "a\u0000b" and "a"
// shared one inbox order position (and outbox_message_field() returned a truncated string).
// Lone surrogate escapes are refused by cJSON already; the check after decoding stays as a
// second line, so the message stays precise if the JSON parser ever changes.
TEST(DeliveryParsing, RefusesEscapesThatAreNotText) {
    Delivery d;
    EXPECT_EQ(parse(envelope(R"("a\u0000b")"), d), "field AGGREGATE_ID contains a NUL character (\\u0000)");
    EXPECT_EQ(parse(envelope(R"("\ud800")"), d), "body is not valid JSON");
    EXPECT_EQ(parse(envelope(R"("\udc00x")"), d), "body is not valid JSON");
    // A surrogate pair is one character.
    ASSERT_EQ(parse(envelope(R"("\ud83d\ude00")"), d), "");
    EXPECT_EQ(d.aggregate_id, "\xF0\x9F\x98\x80");
}

TEST(DeliveryParsing, ForgedNegativeDeliveryCountIsUnknown) {
    amqp::Message m;
    m.body = envelope(R"("1")");
    m.props.headers.emplace_back("x-delivery-count", int64_t{-5});
    Delivery d;
    ASSERT_EQ(parse_delivery(std::move(m), 1 << 20, d), "");
    EXPECT_EQ(d.delivery_count, -1);
}

TEST(Redaction, LibpqMessagesNeverQuoteAPassword) {
    // libpq quotes the token it cannot decode: here, the password.
    const std::string url = "postgresql://u:S3cr%zzet@127.0.0.1:1/db";
    const std::string msg = redact::pg_message(url, "invalid percent-encoded token: \"S3cr%zzet\"");
    EXPECT_EQ(msg.find("S3cr"), std::string::npos) << msg;
    EXPECT_EQ(msg, "invalid percent-encoded token: \"***\"");
    EXPECT_EQ(pg::redact_conninfo(url).find("S3cr"), std::string::npos);
    // A parsable string: the password is scrubbed wherever it appears.
    EXPECT_EQ(redact::pg_message("host=h password=hunter2", "server said hunter2"), "server said ***");
}

TEST(Redaction, AwkwardPasswordsInEveryConninfoForm) {
    struct Case {
        const char *conninfo;
        const char *secret;
    };
    for (const Case &c : {Case{"host=h password='S3\\'cret' dbname=d", "cret"},
                          Case{"host=h password=S3\\ cret dbname=d", "cret"},
                          Case{"postgresql://u:pa@ss@h/db", "ss@"},
                          Case{"postgresql://u:pa/ss@h/db", "pa/ss"},
                          Case{"postgresql://u@h/db?sslpassword=K3y&password=S3cret", "S3cret"},
                          Case{"postgresql://u@h/db?sslpassword=K3y&password=S3cret", "K3y"},
                          Case{"postgresql://u:%53%33cret@h/db", "%53%33cret"},
                          Case{"host=h passfile=/x password = S3cret", "S3cret"}}) {
        const std::string r = pg::redact_conninfo(c.conninfo);
        EXPECT_EQ(r.find(c.secret), std::string::npos) << c.conninfo << " -> " << r;
    }
    EXPECT_EQ(pg::redact_conninfo("outbox"), "outbox");
}

TEST(ConfigNames, AmqpNamesArePrintableUtf8WithinLimits) {
    Config cfg;
    for (const char *key : {"amqp.exchange", "consumer.queue", "consumer.dead_letter_queue", "relay.name"}) {
        for (const std::string &bad : {std::string("a\nb"), std::string("\xc3\x28"), std::string(201, 'q'),
                                      std::string("tab\there")}) {
            try {
                cfg.set(key, bad);
                ADD_FAILURE() << key << " accepted a bad name";
            } catch (const Error &e) {
                EXPECT_EQ(e.code(), Errc::invalid_argument) << key;
            }
        }
        cfg.set(key, "orders.v2-\xc3\xa9 'quoted' \"name\"; DROP"); // printable UTF-8 is data
        EXPECT_EQ(cfg.get(key), "orders.v2-\xc3\xa9 'quoted' \"name\"; DROP");
    }
    EXPECT_THROW(cfg.set("consumer.queue", "amq.gen-1"), Error);
    cfg.set("consumer.queue", ""); // empty: the consumer's name
    EXPECT_THROW(cfg.set("event.type_map", "PRD=Pro\nduct"), Error);
    EXPECT_THROW(Consumer(Config{}, "bad\x01name"), Error);
    EXPECT_THROW(Consumer(Config{}, "amq.reserved"), Error);
}

// fuzz_event, 2026-11-28: a previous_payload of "\x01\n{...}" was accepted (cJSON skips every byte
// up to 0x20 as whitespace), its envelope body was not JSON a strict parser reads, and PostgreSQL's
// json type would have failed the INSERT with a driver error instead of INVALID_EVENT.
TEST(EventJson, ControlCharactersAroundOrInsideJsonAreInvalidEvents) {
    for (const char *field : {"payload", "previous_payload", "metadata"}) {
        for (const std::string &text :
             {std::string("\x01\n{\n\"\":\"\"}"), std::string("{}\x0b"), std::string("{\"a\":\"\x1f\"}")}) {
            Event ev;
            ev.set("aggregate_type", "PRD");
            ev.set("aggregate_id", "1");
            ev.set("operation", "POST");
            ev.set("payload", "{}");
            ev.set(field, text);
            try {
                ev.prepare(Config{});
                ADD_FAILURE() << field << " accepted " << text;
            } catch (const Error &e) {
                EXPECT_EQ(e.code(), Errc::invalid_event) << field;
                EXPECT_EQ(std::string(e.what()).rfind(std::string(field) + " is not valid JSON: ", 0), 0U) << e.what();
            }
        }
    }
}
