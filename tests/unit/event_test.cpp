#include "config.hpp"
#include "consumer.hpp"
#include "error.hpp"
#include "event.hpp"
#include "identifiers.hpp"
#include "json.hpp"
#include "pg.hpp"
#include "store.hpp"
#include "uuid.hpp"

#include <gtest/gtest.h>

#include <set>

using namespace outbox;

namespace {

Errc code_of(const std::function<void()> &fn) {
    try {
        fn();
    } catch (const Error &e) {
        return e.code();
    }
    return Errc::ok;
}

Event valid_event() {
    Event ev;
    ev.set("aggregate_type", "PRD");
    ev.set("aggregate_id", "123");
    ev.set("operation", "POST");
    ev.set("payload", R"({"PRD_ID":"123","XPRD01":"Widget Pro"})");
    return ev;
}

} // namespace

TEST(Uuid, V7IsCanonicalTimeOrderedAndMonotonic) {
    std::set<std::string> seen;
    std::string prev;
    for (int i = 0; i < 10000; ++i) {
        std::string id = uuid::v7(1700000000000ULL); // same millisecond every time
        ASSERT_TRUE(uuid::valid(id)) << id;
        EXPECT_EQ(id[14], '7');
        EXPECT_TRUE(id[19] == '8' || id[19] == '9' || id[19] == 'a' || id[19] == 'b') << id;
        EXPECT_GT(id, prev);
        prev = id;
        seen.insert(id);
    }
    EXPECT_EQ(seen.size(), 10000U);
    EXPECT_GE(uuid::v7_millis(prev), 1700000000000ULL);
    EXPECT_EQ(uuid::v7_millis(uuid::v7(1800000000000ULL)), 1800000000000ULL);
}

TEST(Uuid, Validation) {
    EXPECT_TRUE(uuid::valid("550e8400-e29b-41d4-a716-446655440000"));
    EXPECT_TRUE(uuid::valid("550E8400-E29B-41D4-A716-446655440000"));
    EXPECT_FALSE(uuid::valid("550e8400e29b41d4a716446655440000"));
    EXPECT_FALSE(uuid::valid("660f9511-f3a-42e5-b827-557766550001")); // the documents' malformed example
    EXPECT_FALSE(uuid::valid("550e8400-e29b-41d4-a716-44665544000g"));
}

TEST(Utf8, AcceptsValidRejectsInvalid) {
    EXPECT_TRUE(valid_utf8("plain"));
    EXPECT_TRUE(valid_utf8("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"));
    EXPECT_FALSE(valid_utf8("\xc3"));             // truncated
    EXPECT_FALSE(valid_utf8("\xc0\xaf"));         // overlong
    EXPECT_FALSE(valid_utf8("\xed\xa0\x80"));     // surrogate
    EXPECT_FALSE(valid_utf8("\xf4\x90\x80\x80")); // above U+10FFFF
    EXPECT_FALSE(valid_utf8("\xff"));
}

TEST(Json, ObjectValidation) {
    EXPECT_NO_THROW(json::require_object(R"({"a":1})", "payload"));
    EXPECT_NO_THROW(json::require_object(" {\"a\":[1,2,{}]} \n", "payload"));
    EXPECT_EQ(code_of([] { json::require_object("[1]", "payload"); }), Errc::invalid_event);
    EXPECT_EQ(code_of([] { json::require_object("{\"a\":1} x", "payload"); }), Errc::invalid_event);
    EXPECT_EQ(code_of([] { json::require_object("{\"a\":}", "payload"); }), Errc::invalid_event);
    EXPECT_EQ(code_of([] { json::require_object("", "payload"); }), Errc::invalid_event);
    std::string s;
    json::append_string(s, "q\"b\\n\n\x01");
    EXPECT_EQ(s, "\"q\\\"b\\\\n\\n\\u0001\"");
}

// RFC 8259's grammar, as PostgreSQL's json type reads it: what cJSON alone lets through (bytes up to
// 0x20 as whitespace, control characters raw in strings, 01, 1., 1.e5, \v and \f) is rejected,
// with where.
TEST(Json, SyntaxIsStrictAsPostgresqlJson) {
    for (const char *ok : {"{}", " {}\n", "\t{\"a\" :\r\n 1}", R"({"a":-0.5e+10})", R"({"a":"\u00e9\/\b\f\n\r\t"})",
                           R"({"a":"\ud800"})", R"({"a":[true,false,null,0,-0,1E3,2e-1,[],{}]})", R"("x")", "0"}) {
        EXPECT_EQ(json::syntax_error(ok), "") << ok;
    }
    const std::pair<std::string, std::string> bad[] = {
        {"\x01{}", "unexpected byte 0x01 at byte 0"},
        {"{}\v", "text after the JSON value at byte 2"},
        {"{}\f", "text after the JSON value at byte 2"},
        {"{\"a\":\"x\ny\"}", "a control character (0x0a) not escaped in a string at byte 7"},
        {"{\"a\":\"x\ty\"}", "a control character (0x09) not escaped in a string at byte 7"},
        {R"({"a":01})", "a number with a leading zero at byte 6"},
        {R"({"a":1.})", "a number missing its digits at byte 7"},
        {R"({"a":1.e5})", "a number missing its digits at byte 7"},
        {R"({"a":-})", "a number missing its digits at byte 6"},
        {R"({"a":"\u12"})", "\\u not followed by 4 hex digits at byte 7"},
        {R"({"a":"\x"})", "an unknown escape in a string at byte 7"},
        {R"({"a":tru})", "unexpected 't' at byte 5"},
        {R"({"a":NaN})", "unexpected 'N' at byte 5"},
        {R"({"a":[1,]})", "unexpected ']' at byte 8"},
        {R"({"a":1,})", "a member name expected at byte 7"},
        {R"({"a" 1})", "':' expected after a member name at byte 5"},
        {R"({"a":1 "b":2})", "',' or '}' expected at byte 7"},
        {R"([1 2])", "',' or ']' expected at byte 3"},
        {R"({"a":1}x)", "text after the JSON value at byte 7"},
        {R"({"a":"x)", "a string not closed at byte 7"},
        {"", "unexpected end of the text at byte 0"},
        {"{", "a member name expected at byte 1"},
        {std::string("{\"a\":\"\0\"}", 9), "a control character (0x00) not escaped in a string at byte 6"},
    };
    for (const auto &[text, error] : bad) {
        EXPECT_EQ(json::syntax_error(text), error) << text;
        EXPECT_EQ(code_of([&] { json::require_object(text, "payload"); }), Errc::invalid_event) << text;
    }
    try {
        json::require_object("\x01{}", "previous_payload");
        ADD_FAILURE() << "accepted";
    } catch (const Error &e) {
        EXPECT_STREQ(e.what(), "previous_payload is not valid JSON: unexpected byte 0x01 at byte 0");
    }
}

// What an envelope's reader needs beyond the grammar (require_object checks it without building a
// cJSON tree since 2026-11-28, and must refuse what cJSON refused): every \u escape a character,
// and nesting the envelope's one extra level keeps within cJSON's limit.
TEST(Json, EnvelopeFieldsAreTextTheConsumersCanRead) {
    for (const char *ok :
         {R"({"a":"\ud83d\ude00"})", R"({"a":"\uDBFF\uDFFF x"})", R"({"a":"\u0000"})", R"({"\ud800\udc00":1})"}) {
        EXPECT_EQ(json::envelope_field_error(ok), "") << ok;
        EXPECT_NO_THROW(json::require_object(ok, "payload")) << ok;
    }
    const std::pair<std::string, std::string> bad[] = {
        {R"({"a":"\ud800"})", "a high surrogate escape (\\ud800) not followed by a low one at byte 7"},
        {R"({"a":"\ud800\u0041"})", "a high surrogate escape (\\ud800) not followed by a low one at byte 7"},
        {R"({"a":"\ud800\ud800"})", "a high surrogate escape (\\ud800) not followed by a low one at byte 7"},
        {R"({"a":"\ud800\n"})", "a high surrogate escape (\\ud800) not followed by a low one at byte 7"},
        {R"({"a":"\udc00x"})", "a low surrogate escape (\\udc00) without a high one before it at byte 7"},
        {R"({"\uDFFF":1})", "a low surrogate escape (\\uDFFF) without a high one before it at byte 3"},
    };
    for (const auto &[text, error] : bad) {
        EXPECT_EQ(json::syntax_error(text), "") << text; // valid JSON: PostgreSQL's json type keeps it
        EXPECT_EQ(json::envelope_field_error(text), error) << text;
        try {
            json::require_object(text, "metadata");
            ADD_FAILURE() << "accepted " << text;
        } catch (const Error &e) {
            EXPECT_EQ(e.code(), Errc::invalid_event);
            EXPECT_EQ(std::string(e.what()), "metadata is not valid JSON: " + error);
        }
    }
    // Nesting: the deepest field the envelope can carry is read back by cJSON inside an object.
    const auto nested = [](size_t depth) {
        return "{\"a\":" + std::string(depth - 1, '[') + std::string(depth - 1, ']') + "}";
    };
    const std::string deepest = nested(CJSON_NESTING_LIMIT - 1);
    EXPECT_EQ(json::envelope_field_error(deepest), "");
    EXPECT_NE(json::parse("{\"PAYLOAD\":" + deepest + "}"), nullptr);
    const std::string deeper = nested(CJSON_NESTING_LIMIT);
    EXPECT_EQ(json::parse("{\"PAYLOAD\":" + deeper + "}"), nullptr);
    EXPECT_EQ(json::envelope_field_error(deeper), "nested deeper than " + std::to_string(CJSON_NESTING_LIMIT - 1) +
                                                      " levels at byte " + std::to_string(5 + CJSON_NESTING_LIMIT - 2));
    EXPECT_EQ(code_of([&] { json::require_object(deeper, "payload"); }), Errc::invalid_event);
    EXPECT_EQ(json::syntax_error(deeper), "");
    // Not an object: a valid value of another kind.
    for (const char *other : {"[]", " \"x\"", "0", "null"}) {
        try {
            json::require_object(other, "payload");
            ADD_FAILURE() << "accepted " << other;
        } catch (const Error &e) {
            EXPECT_STREQ(e.what(), "payload must be a JSON object") << other;
        }
    }
}

TEST(EventNaming, DocumentsConvention) {
    Config cfg;
    cfg.set("event.type_map", "PRD=Product,ORD=Order");
    EXPECT_EQ(event_type_for(cfg, "PRD", Operation::post, false), "ProductCreated");
    EXPECT_EQ(event_type_for(cfg, "PRD", Operation::put, false), "ProductUpdated");
    EXPECT_EQ(event_type_for(cfg, "PRD", Operation::patch, false), "ProductUpdated");
    EXPECT_EQ(event_type_for(cfg, "PRD", Operation::del, false), "ProductDeleted");
    EXPECT_EQ(event_type_for(cfg, "PRD", Operation::del, true), "ProductForceDeleted");
    EXPECT_EQ(event_type_for(cfg, "ORD", Operation::post, false), "OrderCreated");
    EXPECT_EQ(event_type_for(cfg, "CUS", Operation::post, false), "CUSCreated"); // unmapped: the type itself
}

TEST(EventNaming, ExplicitTypeWinsAndForceDelete) {
    Config cfg;
    cfg.set("event.type_map", "PRD=Product");
    Event ev = valid_event();
    ev.set("event_type", "PriceChanged");
    ev.prepare(cfg);
    EXPECT_EQ(ev.resolved_type, "PriceChanged");

    Event del = valid_event();
    del.set("operation", "force_delete");
    del.prepare(cfg);
    EXPECT_EQ(del.resolved_type, "ProductForceDeleted");
    EXPECT_EQ(std::string(operation_name(del.operation)), "DELETE");
}

TEST(EventValidation, EachBadInputHasItsCode) {
    Config cfg;
    cfg.set("event.max_payload_bytes", "64");
    auto prepared = [&](const std::function<void(Event &)> &mutate) {
        return code_of([&] {
            Event ev = valid_event();
            mutate(ev);
            ev.prepare(cfg);
        });
    };
    EXPECT_EQ(prepared([](Event &) {}), Errc::ok);
    EXPECT_EQ(prepared([](Event &e) { e.aggregate_type.clear(); }), Errc::invalid_event);
    EXPECT_EQ(prepared([](Event &e) { e.aggregate_id.clear(); }), Errc::invalid_event);
    EXPECT_EQ(prepared([](Event &e) { e.operation = Operation::none; }), Errc::invalid_event);
    EXPECT_EQ(prepared([](Event &e) { e.payload.clear(); }), Errc::invalid_event);
    EXPECT_EQ(prepared([](Event &e) { e.set("payload", "{not json"); }), Errc::invalid_event);
    EXPECT_EQ(prepared([](Event &e) { e.set("payload", "[1,2]"); }), Errc::invalid_event);
    EXPECT_EQ(prepared([](Event &e) { e.set("metadata", "nope"); }), Errc::invalid_event);
    EXPECT_EQ(prepared([](Event &e) { e.set("previous_payload", "3"); }), Errc::invalid_event);
    EXPECT_EQ(prepared([](Event &e) { e.set("payload", "{\"x\":\"" + std::string(100, 'a') + "\"}"); }),
              Errc::too_large);
    EXPECT_EQ(prepared([](Event &e) { e.set("aggregate_type", "PR D"); }), Errc::invalid_event);
    EXPECT_EQ(prepared([](Event &e) { e.set("aggregate_type", "a.b"); }), Errc::invalid_event);
    EXPECT_EQ(prepared([](Event &e) { e.set("event_id", "not-a-uuid"); }), Errc::invalid_event);
    EXPECT_EQ(prepared([](Event &e) { e.set("force_delete", "true"); }), Errc::invalid_event); // POST + force
    EXPECT_EQ(code_of([] { Event e; e.set("operation", "MERGE"); }), Errc::invalid_event);
    EXPECT_EQ(code_of([] { Event e; e.set("aggregate_id", std::string("a\0b", 3)); }), Errc::invalid_event);
    EXPECT_EQ(code_of([] { Event e; e.set("user", "\xff\xfe"); }), Errc::invalid_event);
    EXPECT_EQ(code_of([] { Event e; e.set("colour", "red"); }), Errc::unknown_key);
}

TEST(EventIdentity, RetryKeepsIdReuseMakesNew) {
    Config cfg;
    Event ev = valid_event();
    ev.prepare(cfg);
    std::string first = ev.resolved_id;
    ev.prepare(cfg); // a failed write is retried: same event
    EXPECT_EQ(ev.resolved_id, first);
    ev.written = true; // after a successful write, the builder makes a new event
    ev.prepare(cfg);
    EXPECT_NE(ev.resolved_id, first);
    ev.set("event_id", "550E8400-E29B-41D4-A716-446655440000");
    ev.written = true;
    ev.prepare(cfg);
    EXPECT_EQ(ev.resolved_id, "550e8400-e29b-41d4-a716-446655440000");
}

TEST(Config, KeysValidateAndRoundTrip) {
    Config cfg;
    EXPECT_EQ(code_of([&] { cfg.set("no.such.key", "1"); }), Errc::unknown_key);
    EXPECT_EQ(code_of([&] { cfg.set("relay.batch_size", "zero"); }), Errc::invalid_argument);
    EXPECT_EQ(code_of([&] { cfg.set("relay.batch_size", "0"); }), Errc::invalid_argument);
    EXPECT_EQ(code_of([&] { cfg.set("relay.listen", "maybe"); }), Errc::invalid_argument);
    EXPECT_EQ(code_of([&] { cfg.set("event.type_map", "PRD"); }), Errc::invalid_argument);
    cfg.set("relay.batch_size", "250");
    EXPECT_EQ(cfg.get("relay.batch_size"), "250");
    cfg.set("amqp.url", "amqp://u:secret@h/%2f");
    EXPECT_EQ(cfg.get("amqp.url"), "***");
    for (const auto &k : Config::keys()) {
        EXPECT_NO_THROW((void)cfg.get(k.key)) << k.key;
        EXPECT_GT(std::string(k.help).size(), 5U) << k.key;
    }
}

TEST(Identifiers, HostileNamesRejected) {
    Config cfg;
    for (const char *bad : {"outbox; DROP TABLE x", "Outbox", "out\"box", "1outbox", "", "a-b", "ä"}) {
        EXPECT_EQ(code_of([&] { cfg.set("outbox.table", bad); }), Errc::invalid_argument) << bad;
        EXPECT_EQ(code_of([&] { cfg.set("outbox.schema", bad); }), Errc::invalid_argument) << bad;
    }
    EXPECT_EQ(code_of([&] { cfg.set("outbox.table", std::string(60, 'a')); }), Errc::invalid_argument);
    cfg.set("outbox.schema", "app_events");
    cfg.set("outbox.table", "order_outbox");
    EXPECT_EQ(cfg.outbox_qualified(), "\"app_events\".\"order_outbox\"");
    EXPECT_EQ(cfg.aggregates_qualified(), "\"app_events\".\"order_outbox_aggregates\"");
}

TEST(Redaction, PasswordsNeverShown) {
    EXPECT_EQ(pg::redact_conninfo("postgresql://u:s3cret@h:5432/db"), "postgresql://u:***@h:5432/db");
    EXPECT_EQ(pg::redact_conninfo("host=h password=s3cret dbname=d"), "host=h password=*** dbname=d");
    EXPECT_EQ(pg::redact_conninfo("host=h password='s3 cret' dbname=d"), "host=h password=*** dbname=d");
    EXPECT_EQ(pg::redact_conninfo("postgresql://h/db?password=s3cret&sslmode=require"),
              "postgresql://h/db?password=***&sslmode=require");
}

TEST(Render, ParametersInOrderAndQmarkStyle) {
    Config cfg;
    Event ev = valid_event();
    ev.set("idempotency_key", "k-1");
    store::Statement st = store::render_write(cfg, ev);
    ASSERT_EQ(st.params.size(), 11U);
    // Each $n appears exactly once, in increasing order: safe to convert to '?'.
    size_t pos = 0;
    for (int i = 1; i <= 11; ++i) {
        std::string ph = "$" + std::to_string(i) + " ";
        size_t at = st.sql.find(ph, pos);
        ASSERT_NE(at, std::string::npos) << ph;
        EXPECT_EQ(st.sql.find(ph, at + 1), std::string::npos) << ph;
        pos = at;
    }
    EXPECT_EQ(*st.params[0], "PRD");
    EXPECT_EQ(*st.params[2], ev.resolved_id);
    EXPECT_EQ(*st.params[10], "k-1");
    EXPECT_FALSE(st.params[6].has_value()); // previous_payload NULL
    cfg.set("render.placeholders", "qmark");
    Event ev2 = valid_event();
    store::Statement q = store::render_write(cfg, ev2);
    EXPECT_EQ(q.sql.find('$'), std::string::npos);
    EXPECT_EQ(std::count(q.sql.begin(), q.sql.end(), '?'), 11);
}

TEST(Placeholders, EveryStyleRenamesEachParameterAndEscapesPercentWhereItMustNotBeOne) {
    const store::Statement st{"SELECT $1 WHERE b LIKE '10%' AND c = $2 AND d = $10", {"a", std::nullopt, "j"}, {}};
    EXPECT_EQ(store::with_placeholders(st, "dollar").sql, st.sql);
    EXPECT_EQ(store::with_placeholders(st, "qmark").sql, "SELECT ? WHERE b LIKE '10%' AND c = ? AND d = ?");
    EXPECT_EQ(store::with_placeholders(st, "format").sql, "SELECT %s WHERE b LIKE '10%%' AND c = %s AND d = %s");
    const store::Statement named = store::with_placeholders(st, "named");
    EXPECT_EQ(named.sql, "SELECT :p1 WHERE b LIKE '10%' AND c = :p2 AND d = :p10");
    EXPECT_EQ(named.names, (std::vector<std::string>{"p1", "p2", "p3"}));
    EXPECT_EQ(store::with_placeholders(st, "pyformat").sql,
              "SELECT %(p1)s WHERE b LIKE '10%%' AND c = %(p2)s AND d = %(p10)s");
    EXPECT_TRUE(store::with_placeholders(st, "qmark").names.empty());
    EXPECT_EQ(store::statement_json(named),
              "{\"sql\":\"SELECT :p1 WHERE b LIKE '10%' AND c = :p2 AND d = :p10\",\"params\":[\"a\",null,\"j\"],"
              "\"names\":[\"p1\",\"p2\",\"p3\"]}");
    try {
        (void)store::with_placeholders(st, "numeric");
        FAIL() << "an unknown style must be refused";
    } catch (const Error &e) {
        EXPECT_EQ(e.code(), Errc::invalid_argument);
    }
}

TEST(DeliveryProperty, PropertiesAndHeadersAsTextAbsentOnesAsNothing) {
    Delivery d;
    d.raw.props.message_id = "m-1";
    d.raw.props.delivery_mode = 2;
    d.raw.props.headers = {{"outbox-seq", int64_t{7}}, {"outbox-replay", true}, {"trace", std::string("t")}};
    d.raw.exchange = "corewrite.fanout";
    EXPECT_EQ(d.property("message_id"), "m-1");
    EXPECT_EQ(d.property("delivery_mode"), "2");
    EXPECT_EQ(d.property("outbox-seq"), "7");
    EXPECT_EQ(d.property("outbox-replay"), "true");
    EXPECT_EQ(d.property("trace"), "t");
    EXPECT_EQ(d.property("exchange"), "corewrite.fanout");
    EXPECT_EQ(d.property("routing_key"), "") << "present though empty";
    EXPECT_EQ(d.property("type"), std::nullopt) << "empty: absent";
    EXPECT_EQ(d.property("timestamp"), std::nullopt);
    EXPECT_EQ(d.property("no-such-header"), std::nullopt);
}
