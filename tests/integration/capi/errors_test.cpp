// Bad input through the C ABI: a precise status and message, nothing written, and the
// caller's transaction (and what it already wrote) intact.
#include "fixture.hpp"

#include <cstring>
#include <functional>
#include <thread>

using namespace outbox_test;

TEST(CapiNulls, NullArgumentsAreErrorsNotCrashes) {
    EXPECT_EQ(outbox_config_new(nullptr), OUTBOX_ERR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(outbox_last_error()).find("must not be NULL"), std::string::npos);
    EXPECT_EQ(outbox_config_set(nullptr, "a", "b"), OUTBOX_ERR_INVALID_ARGUMENT);
    outbox_db *db = nullptr;
    EXPECT_EQ(outbox_db_open(&db, nullptr, nullptr), OUTBOX_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(db, nullptr);
    EXPECT_EQ(outbox_db_wrap(&db, nullptr, nullptr), OUTBOX_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(outbox_write(nullptr, nullptr), OUTBOX_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(outbox_event_set(nullptr, "payload", "{}"), OUTBOX_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(outbox_render_write(nullptr, nullptr, nullptr), OUTBOX_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(outbox_migrate(nullptr, nullptr, OUTBOX_MIGRATE_ALL), OUTBOX_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(outbox_db_exec(nullptr, "BEGIN"), OUTBOX_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(outbox_event_id(nullptr), nullptr);
    EXPECT_EQ(outbox_statement_sql(nullptr), nullptr);
    EXPECT_EQ(outbox_db_tx_state(nullptr), OUTBOX_TX_UNKNOWN);
    // free/close of NULL are no-ops
    outbox_config_free(nullptr);
    outbox_db_close(nullptr);
    outbox_event_free(nullptr);
    outbox_statement_free(nullptr);
    outbox_string_free(nullptr);
}

TEST(CapiErrors, LastErrorIsThreadLocalAndNeverNull) {
    EXPECT_NE(outbox_last_error(), nullptr);
    outbox_config *cfg = nullptr;
    ASSERT_EQ(outbox_config_new(&cfg), OUTBOX_OK);
    EXPECT_EQ(outbox_config_set(cfg, "no.such", "1"), OUTBOX_ERR_UNKNOWN_KEY);
    EXPECT_EQ(outbox_last_status(), OUTBOX_ERR_UNKNOWN_KEY);
    std::string mine = outbox_last_error();
    std::thread([] {
        EXPECT_STREQ(outbox_last_error(), "");
        EXPECT_EQ(outbox_last_status(), OUTBOX_OK);
    }).join();
    EXPECT_EQ(std::string(outbox_last_error()), mine);
    EXPECT_STREQ(outbox_status_name(OUTBOX_ERR_DUPLICATE), "DUPLICATE");
    EXPECT_EQ(outbox_config_set(cfg, "relay.batch_size", "-5"), OUTBOX_ERR_INVALID_ARGUMENT);
    char *v = nullptr;
    ASSERT_EQ(outbox_config_get(&v, cfg, "relay.batch_size"), OUTBOX_OK);
    EXPECT_STREQ(v, "2000") << "config unchanged after a rejected value";
    outbox_string_free(v);
    const char *key = nullptr;
    size_t n = 0;
    while (outbox_config_key(&key, nullptr, n) == OUTBOX_OK) {
        ++n;
    }
    EXPECT_GT(n, 20U);
    EXPECT_EQ(outbox_version_number(), OUTBOX_VERSION_NUMBER);
    EXPECT_STREQ(outbox_version(), OUTBOX_VERSION_STRING);
    outbox_config_free(cfg);
}

TEST(CapiErrors, HostileTableNameRejectedNeverInterpolated) {
    outbox_config *cfg = nullptr;
    ASSERT_EQ(outbox_config_new(&cfg), OUTBOX_OK);
    EXPECT_EQ(outbox_config_set(cfg, "outbox.table", "outbox; DROP TABLE users; --"), OUTBOX_ERR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(outbox_last_error()).find("SQL identifier"), std::string::npos) << outbox_last_error();
    EXPECT_EQ(outbox_config_set(cfg, "outbox.schema", "public\"; --"), OUTBOX_ERR_INVALID_ARGUMENT);
    char *v = nullptr;
    ASSERT_EQ(outbox_config_get(&v, cfg, "outbox.table"), OUTBOX_OK);
    EXPECT_STREQ(v, "outbox");
    outbox_string_free(v);
    outbox_config_free(cfg);
}

TEST(CapiErrors, UnreachableServerIsAConnectionErrorWithoutPassword) {
    outbox_db *db = nullptr;
    EXPECT_EQ(outbox_db_open(&db, "postgresql://outbox:topsecret@127.0.0.1:1/outbox?connect_timeout=2", nullptr),
              OUTBOX_ERR_CONNECTION);
    EXPECT_EQ(db, nullptr);
    std::string msg = outbox_last_error();
    EXPECT_EQ(msg.find("topsecret"), std::string::npos) << msg;
    EXPECT_NE(msg.find("cannot connect"), std::string::npos) << msg;
}

// Each bad input inside an open transaction that already holds a good event: the error is
// precise, nothing is written, and the transaction still commits the good event.
TEST_F(PgTest, BadInputGetsPreciseStatusAndTransactionStaysUsable) {
    ASSERT_EQ(outbox_config_set(cfg, "event.max_payload_bytes", "1048576"), OUTBOX_OK);
    ASSERT_EQ(outbox_db_exec(db, "BEGIN"), OUTBOX_OK);
    outbox_event *good = make_event("keep");
    ASSERT_EQ(outbox_event_set(good, "idempotency_key", "once"), OUTBOX_OK);
    ASSERT_EQ(outbox_write(db, good), OUTBOX_OK) << outbox_last_error();

    struct Case {
        const char *name;
        std::function<outbox_status(outbox_event *)> mutate; // returns the setter's status
        outbox_status expected;
        const char *message_part;
    };
    const std::string big = "{\"x\":\"" + std::string(1024 * 1024, 'a') + "\"}";
    std::vector<Case> cases = {
        {"missing aggregate_type", [](outbox_event *e) { return outbox_event_set(e, "aggregate_type", ""); },
         OUTBOX_ERR_INVALID_EVENT, "aggregate_type is required"},
        {"missing aggregate_id", [](outbox_event *e) { return outbox_event_set(e, "aggregate_id", ""); },
         OUTBOX_ERR_INVALID_EVENT, "aggregate_id is required"},
        {"missing payload", [](outbox_event *e) { return outbox_event_set(e, "payload", ""); },
         OUTBOX_ERR_INVALID_EVENT, "payload is required"},
        {"invalid JSON payload", [](outbox_event *e) { return outbox_event_set(e, "payload", "{\"a\":"); },
         OUTBOX_ERR_INVALID_EVENT, "payload is not valid JSON"},
        {"invalid JSON metadata", [](outbox_event *e) { return outbox_event_set(e, "metadata", "{'a':1}"); },
         OUTBOX_ERR_INVALID_EVENT, "metadata is not valid JSON"},
        {"a control character before previous_payload's JSON",
         [](outbox_event *e) { return outbox_event_set(e, "previous_payload", "\x01{}"); }, OUTBOX_ERR_INVALID_EVENT,
         "previous_payload is not valid JSON: unexpected byte 0x01 at byte 0"},
        {"a number with a leading zero in the payload",
         [](outbox_event *e) { return outbox_event_set(e, "payload", "{\"a\":01}"); }, OUTBOX_ERR_INVALID_EVENT,
         "payload is not valid JSON: a number with a leading zero at byte 6"},
        {"payload over the limit", [&](outbox_event *e) { return outbox_event_set(e, "payload", big.c_str()); },
         OUTBOX_ERR_TOO_LARGE, "over the limit"},
        {"duplicate idempotency key", [](outbox_event *e) { return outbox_event_set(e, "idempotency_key", "once"); },
         OUTBOX_ERR_DUPLICATE, "already used"},
    };
    for (const auto &c : cases) {
        outbox_event *ev = make_event("bad");
        ASSERT_EQ(c.mutate(ev), OUTBOX_OK) << c.name;
        EXPECT_EQ(outbox_write(db, ev), c.expected) << c.name << ": " << outbox_last_error();
        EXPECT_NE(std::string(outbox_last_error()).find(c.message_part), std::string::npos)
            << c.name << ": " << outbox_last_error();
        EXPECT_EQ(outbox_db_tx_state(db), OUTBOX_TX_INTRANS) << c.name << " broke the caller's transaction";
        outbox_event_free(ev);
    }
    // Setter-level rejections: unknown operation, NUL inside a length-delimited value, bad UTF-8.
    outbox_event *ev = make_event("bad");
    EXPECT_EQ(outbox_event_set(ev, "operation", "UPSERT"), OUTBOX_ERR_INVALID_EVENT);
    EXPECT_NE(std::string(outbox_last_error()).find("POST, PUT, PATCH, DELETE"), std::string::npos);
    const char with_nul[] = "{\"a\":\"x\0y\"}";
    EXPECT_EQ(outbox_event_set_n(ev, "payload", with_nul, sizeof with_nul - 1), OUTBOX_ERR_INVALID_EVENT);
    EXPECT_NE(std::string(outbox_last_error()).find("NUL"), std::string::npos);
    EXPECT_EQ(outbox_event_set(ev, "user", "\xc3\x28"), OUTBOX_ERR_INVALID_EVENT);
    EXPECT_EQ(outbox_event_set(ev, "colour", "red"), OUTBOX_ERR_UNKNOWN_KEY);
    EXPECT_EQ(outbox_event_unset(ev, "aggregate_id"), OUTBOX_ERR_INVALID_ARGUMENT);
    outbox_event_free(ev);

    // Quotes and SQL-looking text are data, stored verbatim.
    const std::string sqlish = "Robert'); DROP TABLE outbox;--";
    outbox_event *odd = make_event(sqlish, "PUT", R"({"name":"Robert'); DROP TABLE outbox;--","q":"\"x\""})");
    ASSERT_EQ(outbox_event_set(odd, "user", "o'neil \"the\" user"), OUTBOX_OK);
    ASSERT_EQ(outbox_write(db, odd), OUTBOX_OK) << outbox_last_error();
    ASSERT_EQ(outbox_db_exec(db, "COMMIT"), OUTBOX_OK);

    EXPECT_EQ(count(), 2) << "only the good and the odd event were written";
    auto row = admin.query("SELECT aggregate_id, payload::text, actor FROM " + table + " WHERE operation = 'PUT'");
    ASSERT_EQ(row.size(), 1U);
    EXPECT_EQ(row[0][0], sqlish);
    EXPECT_EQ(row[0][1], R"({"name":"Robert'); DROP TABLE outbox;--","q":"\"x\""})");
    EXPECT_EQ(row[0][2], "o'neil \"the\" user");
    outbox_event_free(good);
    outbox_event_free(odd);
}

// The write accepts a JSON field exactly when PostgreSQL's json type does (cJSON alone let control
// characters, leading zeros and "1." through, and the INSERT then failed with a driver error).
TEST_F(PgTest, AJsonFieldIsAcceptedExactlyWhenPostgresqlAcceptsIt) {
    const char *const texts[] = {"{}",
                                 " {}\n",
                                 "\t{\"a\" :\r\n 1}",
                                 R"({"a":-0.5e+10,"b":[true,false,null,0,-0,1E3,2e-1]})",
                                 R"({"a":"\u00e9\/\b\f\n\r\t","b":"\ud83d\ude00"})",
                                 "\x01{}",
                                 "{}\x0b",
                                 "{}\x0c",
                                 "{\"a\":\"x\ny\"}",
                                 "{\"a\":\"x\ty\"}",
                                 R"({"a":01})",
                                 R"({"a":1.})",
                                 R"({"a":1.e5})",
                                 R"({"a":-})",
                                 R"({"a":"\u12"})",
                                 R"({"a":"\x"})",
                                 R"({"a":tru})",
                                 R"({"a":NaN})",
                                 R"({"a":[1,]})",
                                 R"({"a":1,})",
                                 R"({"a":1}x)"};
    for (const char *text : texts) {
        outbox_event *ev = make_event("json");
        const bool library = outbox_event_set(ev, "payload", text) == OUTBOX_OK && outbox_write(db, ev) == OUTBOX_OK;
        const std::string error = outbox_last_error();
        outbox_event_free(ev);
        std::string literal;
        for (const char *c = text; *c != '\0'; ++c) {
            literal += *c == '\'' ? std::string("''") : std::string(1, *c);
        }
        const bool postgresql = outbox_db_exec(db, ("SELECT CAST('" + literal + "' AS json)").c_str()) == OUTBOX_OK;
        EXPECT_EQ(library, postgresql) << "'" << text << "': the library " << (library ? "accepts" : "rejects")
                                       << " it (" << error << "), PostgreSQL " << (postgresql ? "accepts" : "rejects")
                                       << " it (" << outbox_last_error() << ")";
        if (!library) {
            EXPECT_NE(error.find("payload is not valid JSON"), std::string::npos) << error;
        }
    }
    // One known difference: an escaped lone surrogate is not a character. PostgreSQL's json type
    // keeps it as text (its jsonb rejects it); the library rejects it, as jsonb does.
    outbox_event *ev = make_event("json");
    ASSERT_EQ(outbox_event_set(ev, "payload", R"({"b":"\ud800"})"), OUTBOX_OK);
    EXPECT_EQ(outbox_write(db, ev), OUTBOX_ERR_INVALID_EVENT);
    outbox_event_free(ev);
    EXPECT_NE(outbox_db_exec(db, R"(SELECT CAST('{"b":"\ud800"}' AS jsonb))"), OUTBOX_OK);
}

TEST_F(PgTest, DuplicateIdempotencyKeyOutsideTransaction) {
    outbox_event *a = make_event("a");
    outbox_event_set(a, "idempotency_key", "k");
    ASSERT_EQ(outbox_write(db, a), OUTBOX_OK);
    outbox_event *b = make_event("b");
    outbox_event_set(b, "idempotency_key", "k");
    EXPECT_EQ(outbox_write(db, b), OUTBOX_ERR_DUPLICATE);
    EXPECT_NE(std::string(outbox_last_error()).find(outbox_event_id(a)), std::string::npos)
        << "message names the event that holds the key: " << outbox_last_error();
    EXPECT_EQ(count(), 1);
    // No gap was left in aggregate b's sequence by the rejected write.
    outbox_event_unset(b, "idempotency_key");
    ASSERT_EQ(outbox_write(db, b), OUTBOX_OK);
    EXPECT_EQ(outbox_event_seq(b), 1);
    outbox_event_free(a);
    outbox_event_free(b);
}

TEST_F(PgTest, AbortedTransactionIsReportedNotWrittenInto) {
    ASSERT_EQ(outbox_db_exec(db, "BEGIN"), OUTBOX_OK);
    EXPECT_EQ(outbox_db_exec(db, "SELECT 1/0"), OUTBOX_ERR_DATABASE);
    outbox_event *ev = make_event();
    EXPECT_EQ(outbox_write(db, ev), OUTBOX_ERR_TRANSACTION);
    EXPECT_NE(std::string(outbox_last_error()).find("roll it back"), std::string::npos);
    ASSERT_EQ(outbox_db_exec(db, "ROLLBACK"), OUTBOX_OK);
    outbox_event_free(ev);
}

TEST_F(PgTest, BrokenAndClosedConnectionsAreConnectionErrors) {
    auto *pg = static_cast<PGconn *>(outbox_db_pgconn(db));
    std::string pid = std::to_string(PQbackendPID(pg));
    admin.query("SELECT pg_terminate_backend($1::int)", {pid});
    outbox_event *ev = make_event();
    outbox_status st = outbox_write(db, ev);
    EXPECT_EQ(st, OUTBOX_ERR_CONNECTION) << outbox_status_name(st) << ": " << outbox_last_error();
    // Now the socket is known dead: a further write fails fast with the same code.
    EXPECT_EQ(outbox_write(db, ev), OUTBOX_ERR_CONNECTION);
    EXPECT_EQ(count(), 0);

    // A lent connection the caller already closed (PQfinish is the caller's; a bad one is simulated
    // with a connection that failed to open).
    PGconn *dead = PQconnectdb("host=127.0.0.1 port=1 connect_timeout=1");
    outbox_db *lent = nullptr;
    ASSERT_EQ(outbox_db_wrap(&lent, dead, cfg), OUTBOX_OK);
    EXPECT_EQ(outbox_write(lent, ev), OUTBOX_ERR_CONNECTION);
    outbox_db_close(lent);
    PQfinish(dead);
    outbox_event_free(ev);
}

TEST_F(PgTest, AnOwnedConnectionLostIsOpenedAgainByTheNextBeginNeverInsideTheLostTransaction) {
    // The connection dies inside a transaction (as at a failover): the write in flight fails, and
    // nothing runs on, outside that transaction, until the caller starts afresh.
    ASSERT_EQ(outbox_db_exec(db, "BEGIN"), OUTBOX_OK);
    outbox_event *ev = make_event();
    ASSERT_EQ(outbox_write(db, ev), OUTBOX_OK);
    const std::string pid = std::to_string(PQbackendPID(static_cast<PGconn *>(outbox_db_pgconn(db))));
    admin.query("SELECT pg_terminate_backend($1::int)", {pid});
    EXPECT_EQ(outbox_write(db, ev), OUTBOX_ERR_CONNECTION) << outbox_last_error();
    EXPECT_EQ(outbox_write(db, ev), OUTBOX_ERR_CONNECTION) << "a write must not go on outside the lost transaction";
    EXPECT_NE(std::string(outbox_last_error()).find("BEGIN or ROLLBACK"), std::string::npos)
        << "[" << outbox_last_error() << "]";
    EXPECT_EQ(outbox_db_exec(db, "COMMIT"), OUTBOX_ERR_CONNECTION) << "a COMMIT must not succeed on a new session";
    EXPECT_EQ(count(), 0) << "nothing of the lost transaction committed";

    // ROLLBACK (or BEGIN) opens the connection again: the next transaction works.
    ASSERT_EQ(outbox_db_exec(db, "ROLLBACK"), OUTBOX_OK) << outbox_last_error();
    EXPECT_NE(std::to_string(PQbackendPID(static_cast<PGconn *>(outbox_db_pgconn(db)))), pid);
    ASSERT_EQ(outbox_db_exec(db, " begin"), OUTBOX_OK) << outbox_last_error();
    ASSERT_EQ(outbox_write(db, ev), OUTBOX_OK) << outbox_last_error(); // its prepared statement made anew
    ASSERT_EQ(outbox_db_exec(db, "COMMIT"), OUTBOX_OK);
    EXPECT_EQ(count(), 1);

    // Killed between transactions, the next BEGIN reconnects by itself.
    admin.query("SELECT pg_terminate_backend($1::int)",
                {std::to_string(PQbackendPID(static_cast<PGconn *>(outbox_db_pgconn(db))))});
    EXPECT_EQ(outbox_db_exec(db, "SELECT 1"), OUTBOX_ERR_CONNECTION);
    ASSERT_EQ(outbox_db_exec(db, "BEGIN"), OUTBOX_OK) << outbox_last_error();
    outbox_event_set(ev, "aggregate_id", "after-reconnect");
    ASSERT_EQ(outbox_write(db, ev), OUTBOX_OK) << outbox_last_error();
    ASSERT_EQ(outbox_db_exec(db, "COMMIT"), OUTBOX_OK);
    EXPECT_EQ(count(), 2);
    outbox_event_free(ev);
}

TEST_F(PgTest, MissingTablesAreASchemaError) {
    outbox_config *other = nullptr;
    ASSERT_EQ(outbox_config_new(&other), OUTBOX_OK);
    ASSERT_EQ(outbox_config_set(other, "outbox.schema", schema.c_str()), OUTBOX_OK);
    ASSERT_EQ(outbox_config_set(other, "outbox.table", "never_migrated"), OUTBOX_OK);
    outbox_db *db2 = nullptr;
    ASSERT_EQ(outbox_db_open(&db2, pg_url().c_str(), other), OUTBOX_OK);
    outbox_event *ev = make_event();
    EXPECT_EQ(outbox_write(db2, ev), OUTBOX_ERR_SCHEMA) << outbox_last_error();
    EXPECT_NE(std::string(outbox_last_error()).find("never_migrated"), std::string::npos) << outbox_last_error();
    outbox_event_free(ev);
    outbox_db_close(db2);
    outbox_config_free(other);
}
