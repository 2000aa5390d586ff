// Security: least-privilege roles (packaging/roles.sql) with the real writer, relay and consumer;
// TLS to RabbitMQ (amqps://, also per address of a broker list) and PostgreSQL
// (sslmode=verify-full) with the throwaway CA of scripts/services.sh, and a wrong CA refused; no
// password in any output of the CLI, the logs or the C API's messages; injection strings at every
// string input and name option.
// Real PostgreSQL and RabbitMQ; a test that cannot reach them fails.
#include "closed_port.hpp"
#include "test_env.hpp"
#include "test_shell.hpp"

#include <libpq-fe.h>
#include <outbox.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <mutex>
#include <random>
#include <regex>
#include <string>
#include <vector>

using namespace outbox_test;

namespace {

std::string rand_tag() {
    static std::mt19937_64 rng{std::random_device{}()};
    return std::to_string(rng() % 100000000);
}

// Runs SQL as the admin (OUTBOX_PG_URL); returns rows of text, "<error: ...>" as the only cell on failure.
std::vector<std::vector<std::string>> sql(const std::string &url, const std::string &q,
                                          const std::vector<std::string> &params = {}) {
    PGconn *c = PQconnectdb(url.c_str());
    std::vector<std::vector<std::string>> rows;
    if (PQstatus(c) != CONNECTION_OK) {
        rows.push_back({"<error: " + std::string(PQerrorMessage(c)) + ">"});
        PQfinish(c);
        return rows;
    }
    std::vector<const char *> vals;
    for (const auto &p : params) {
        vals.push_back(p.c_str());
    }
    PGresult *r = PQexecParams(c, q.c_str(), static_cast<int>(vals.size()), nullptr, vals.data(), nullptr, nullptr, 0);
    const auto st = PQresultStatus(r);
    if (st != PGRES_TUPLES_OK && st != PGRES_COMMAND_OK) {
        rows.push_back({"<error: " + std::string(PQresultErrorMessage(r)) + ">"});
    } else {
        for (int i = 0; i < PQntuples(r); ++i) {
            std::vector<std::string> row;
            for (int j = 0; j < PQnfields(r); ++j) {
                row.emplace_back(PQgetisnull(r, i, j) ? "<null>"
                                                      : std::string(PQgetvalue(r, i, j), PQgetlength(r, i, j)));
            }
            rows.push_back(std::move(row));
        }
    }
    PQclear(r);
    PQfinish(c);
    return rows;
}
std::string scalar(const std::string &url, const std::string &q, const std::vector<std::string> &params = {}) {
    auto rows = sql(url, q, params);
    return rows.empty() || rows[0].empty() ? "<none>" : rows[0][0];
}

// host:port/db of OUTBOX_PG_URL (postgresql://user:pass@HOST:PORT/DB).
std::string pg_rest() {
    const std::string u = pg_url();
    const auto at = u.rfind('@');
    return at == std::string::npos ? u.substr(u.find("://") + 3) : u.substr(at + 1);
}
std::string pg_url_as(const std::string &user, const std::string &password_encoded) {
    return "postgresql://" + user + ":" + password_encoded + "@" + pg_rest();
}
std::string amqp_rest() {
    const std::string u = amqp_url();
    return u.substr(u.rfind('@') + 1);
}

std::string shell_quote(const std::string &s) {
    std::string out = "'";
    for (char c : s) {
        out += c == '\'' ? std::string("'\\''") : std::string(1, c);
    }
    return out + "'";
}

std::string services() {
    return std::string(OUTBOX_SOURCE_DIR) + "/scripts/services.sh";
}

// A fresh schema, migrated as the admin.
class SecTest : public ::testing::Test {
  protected:
    void SetUp() override {
        tag = rand_tag();
        schema = "sec_" + tag;
        ASSERT_EQ(scalar(pg_url(), "SELECT 1"), "1") << "PostgreSQL must be running (scripts/services.sh up)";
        ASSERT_EQ(outbox_config_new(&cfg), OUTBOX_OK);
        set("outbox.schema", schema);
        set("amqp.exchange", "sec." + tag);
        set("amqp.url", amqp_url());
        set("consumer.queue_type", "classic");
        outbox_db *owner = nullptr;
        ASSERT_EQ(outbox_db_open(&owner, pg_url().c_str(), cfg), OUTBOX_OK) << outbox_last_error();
        ASSERT_EQ(outbox_migrate(nullptr, owner, OUTBOX_MIGRATE_ALL), OUTBOX_OK) << outbox_last_error();
        outbox_db_close(owner);
    }
    void TearDown() override {
        outbox_config_free(cfg);
        sql(pg_url(), "DROP SCHEMA IF EXISTS \"" + schema + "\" CASCADE");
        for (const auto &r : roles) {
            sql(pg_url(), "DROP ROLE IF EXISTS \"" + r + "\"");
        }
    }
    void set(const char *key, const std::string &value) {
        ASSERT_EQ(outbox_config_set(cfg, key, value.c_str()), OUTBOX_OK) << key << ": " << outbox_last_error();
    }
    outbox_event *event(const std::string &id, const std::string &payload = R"({"n":1})") {
        outbox_event *ev = nullptr;
        EXPECT_EQ(outbox_event_new(&ev), OUTBOX_OK);
        EXPECT_EQ(outbox_event_set(ev, "aggregate_type", "PRD"), OUTBOX_OK);
        EXPECT_EQ(outbox_event_set(ev, "aggregate_id", id.c_str()), OUTBOX_OK) << outbox_last_error();
        EXPECT_EQ(outbox_event_set(ev, "operation", "POST"), OUTBOX_OK);
        EXPECT_EQ(outbox_event_set(ev, "payload", payload.c_str()), OUTBOX_OK) << outbox_last_error();
        return ev;
    }
    // packaging/roles.sql, run by the owner on this schema.
    void apply_roles() {
        int rc = 0;
        const std::string out =
            shell("psql -X -q " + shell_quote(pg_url()) + " -v ON_ERROR_STOP=1 -v schema=" + schema + " -f " +
                      shell_quote(std::string(OUTBOX_SOURCE_DIR) + "/packaging/roles.sql"),
                  &rc);
        ASSERT_EQ(rc, 0) << out;
    }
    // A login role whose password the server checks (scripts/services.sh: pg_hba.conf asks
    // members of outbox_password_auth for one; everyone else is trusted).
    std::string login_role(const std::string &name, const std::string &password, const std::string &extra) {
        const std::string role = name + "_" + tag;
        roles.push_back(role);
        sql(pg_url(), "DO $$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'outbox_password_auth') THEN"
                      " CREATE ROLE outbox_password_auth NOLOGIN; END IF; END $$");
        auto r = sql(pg_url(), "CREATE ROLE \"" + role + "\" LOGIN " + extra + " PASSWORD '" + password + "'");
        EXPECT_TRUE(r.empty()) << r[0][0];
        r = sql(pg_url(), "GRANT outbox_password_auth TO \"" + role + "\"");
        EXPECT_TRUE(r.empty()) << r[0][0];
        return role;
    }

    std::string tag, schema;
    outbox_config *cfg = nullptr;
    std::vector<std::string> roles;
};

// ================================================================ least privilege

TEST_F(SecTest, LeastPrivilegeRolesRunWriterRelayAndConsumerAndRefuseTheRest) {
    ASSERT_NO_FATAL_FAILURE(apply_roles());
    const std::string pw = "Lp" + tag;
    const std::string writer = login_role("w", pw, "IN ROLE outbox_writer");
    const std::string relay_role = login_role("r", pw, "IN ROLE outbox_relay");
    const std::string consumer_role = login_role("c", pw, "IN ROLE outbox_consumer");
    const std::string t = "\"" + schema + "\".outbox";

    // The writer writes, in its own transaction, and meets a duplicate key precisely.
    outbox_db *w = nullptr;
    ASSERT_EQ(outbox_db_open(&w, pg_url_as(writer, pw).c_str(), cfg), OUTBOX_OK) << outbox_last_error();
    ASSERT_EQ(outbox_db_exec(w, "BEGIN"), OUTBOX_OK);
    std::vector<std::string> ids;
    for (int i = 0; i < 3; ++i) {
        outbox_event *ev = event("lp-" + std::to_string(i));
        if (i == 0) {
            ASSERT_EQ(outbox_event_set(ev, "idempotency_key", ("k" + tag).c_str()), OUTBOX_OK);
        }
        ASSERT_EQ(outbox_write(w, ev), OUTBOX_OK) << outbox_last_error();
        ids.emplace_back(outbox_event_id(ev));
        outbox_event_free(ev);
    }
    outbox_event *dup = event("lp-dup");
    ASSERT_EQ(outbox_event_set(dup, "idempotency_key", ("k" + tag).c_str()), OUTBOX_OK);
    EXPECT_EQ(outbox_write(w, dup), OUTBOX_ERR_DUPLICATE) << outbox_last_error();
    EXPECT_NE(std::string(outbox_last_error()).find(ids[0]), std::string::npos) << outbox_last_error();
    outbox_event_free(dup);
    ASSERT_EQ(outbox_db_exec(w, "COMMIT"), OUTBOX_OK);

    // A consumer (its queue bound first), then the relay publishes with its role.
    // A partitioned subscriber, so its membership tables are used with the role's grants too.
    set("pg.url", pg_url_as(consumer_role, pw));
    set("consumer.retry_initial_ms", "20"); // its first event fails once: held and retried, as this role
    set("consumer.retry_poll_ms", "20");
    set("consumer.partitions", "2");
    set("consumer.queue_type", "quorum"); // partitions are quorum queues
    outbox_consumer *consumer = nullptr;
    ASSERT_EQ(outbox_consumer_new(&consumer, cfg, ("lp-" + tag).c_str()), OUTBOX_OK) << outbox_last_error();
    set("consumer.partitions", "0");
    set("consumer.queue_type", "classic");
    ASSERT_EQ(outbox_consumer_connect(consumer), OUTBOX_OK) << outbox_last_error();
    set("pg.url", pg_url_as(relay_role, pw));
    outbox_relay *relay = nullptr;
    ASSERT_EQ(outbox_relay_new(&relay, cfg), OUTBOX_OK);
    outbox_relay_stats st;
    outbox_relay_stats_init(&st);
    ASSERT_EQ(outbox_relay_step(relay, &st), OUTBOX_OK) << outbox_last_error();
    EXPECT_EQ(st.published, 3);
    outbox_relay_free(relay);
    EXPECT_EQ(scalar(pg_url(), "SELECT count(*) FROM " + t + " WHERE status = 'PUBLISHED'"), "3");

    // The consumer's run loop, on its own connection as the consumer role.
    struct Seen {
        std::mutex m;
        std::vector<std::string> ids;
        bool failed = false;
        outbox_consumer *c;
    } seen;
    seen.c = consumer;
    auto handler = [](outbox_db *, const outbox_message *msg, void *ud) {
        auto *s = static_cast<Seen *>(ud);
        std::lock_guard<std::mutex> lock(s->m);
        if (!s->failed) { // held in PostgreSQL, then retried from there: the role's grants cover both
            s->failed = true;
            outbox_handler_error("the first attempt fails");
            return 1;
        }
        s->ids.emplace_back(outbox_message_field(msg, "OUTBOX_ID"));
        if (s->ids.size() == 3) {
            outbox_consumer_stop(s->c);
        }
        return 0;
    };
    ASSERT_EQ(outbox_consumer_run(consumer, nullptr, handler, &seen), OUTBOX_OK) << outbox_last_error();
    EXPECT_EQ(seen.ids.size(), 3U);
    EXPECT_EQ(scalar(pg_url(), "SELECT count(*) FROM \"" + schema + "\".outbox_inbox"), "3");
    EXPECT_EQ(scalar(pg_url(), "SELECT count(*) FROM \"" + schema + "\".outbox_inbox_held"), "0")
        << "the held aggregate was released by the consumer role";
    // The relay role reads what its /metrics shows of the held aggregates and the lag.
    outbox_db *rd = nullptr;
    ASSERT_EQ(outbox_db_open(&rd, pg_url_as(relay_role, pw).c_str(), cfg), OUTBOX_OK) << outbox_last_error();
    char *metrics = nullptr;
    EXPECT_EQ(outbox_metrics_text(&metrics, rd), OUTBOX_OK) << outbox_last_error();
    outbox_string_free(metrics);
    outbox_db_close(rd);
    EXPECT_EQ(scalar(pg_url(), "SELECT partitions FROM \"" + schema + "\".outbox_inbox_partitionings"), "2")
        << "the partition count was recorded as the consumer role";
    outbox_consumer_free(consumer);

    // What each role must not do.
    struct Refusal {
        std::string role;
        std::string statement;
    };
    const std::string inbox = "\"" + schema + "\".outbox_inbox";
    const std::string events = "\"" + schema + "\".outbox_events";
    for (const Refusal &r : std::vector<Refusal>{
             {writer, "SELECT payload FROM " + t},
             {writer, "SELECT payload FROM " + events},
             {writer, "UPDATE " + events + " SET seq = 0"},
             {writer, "DELETE FROM " + events},
             {writer, "UPDATE \"" + schema + "\".outbox_relay SET cursor = 0"},
             {writer, "SELECT * FROM " + inbox},
             {relay_role, "INSERT INTO " + events +
                              " (position, outbox_id, event_type, aggregate_type, aggregate_id, seq, operation,"
                              " payload) VALUES (0, gen_random_uuid(), 'x', 'x', 'x', 99, 'POST', '{}')"},
             {relay_role, "DELETE FROM " + events},
             {relay_role, "UPDATE " + events + " SET payload = '{}'"},
             {relay_role, "DELETE FROM \"" + schema + "\".outbox_receipts"},
             {relay_role, "SELECT * FROM " + inbox},
             {relay_role, "CREATE TABLE \"" + schema + "\".evil (x int)"},
             {consumer_role, "SELECT * FROM " + t},
             {consumer_role, "DELETE FROM " + inbox},
             {consumer_role, "UPDATE " + inbox + " SET consumer = 'x'"},
         }) {
        const std::string got = scalar(pg_url_as(r.role, pw), r.statement);
        EXPECT_NE(got.find("permission denied"), std::string::npos) << r.role << ": " << r.statement << " -> " << got;
    }
    // The write path itself is refused to the relay and consumer roles.
    for (const std::string &role : {relay_role, consumer_role}) {
        outbox_db *d = nullptr;
        ASSERT_EQ(outbox_db_open(&d, pg_url_as(role, pw).c_str(), cfg), OUTBOX_OK);
        outbox_event *ev = event("lp-refused");
        EXPECT_EQ(outbox_write(d, ev), OUTBOX_ERR_DATABASE) << role;
        EXPECT_NE(std::string(outbox_last_error()).find("permission denied"), std::string::npos) << outbox_last_error();
        EXPECT_EQ(outbox_migrate(nullptr, d, OUTBOX_MIGRATE_ALL), OUTBOX_ERR_DATABASE) << "no DDL for " << role;
        EXPECT_NE(std::string(outbox_last_error()).find("permission denied"), std::string::npos) << outbox_last_error();
        outbox_event_free(ev);
        outbox_db_close(d);
    }
    EXPECT_EQ(scalar(pg_url(), "SELECT count(*) FROM " + t), "3");
    outbox_db_close(w);

    // The operator runs the documents' manual retry and cleanup on the view, and nothing more: one
    // event parked FAILED (as the relay would leave it), set PENDING again; the others deleted.
    const std::string op = login_role("o", pw, "IN ROLE outbox_operator");
    const std::string parked = "\"" + schema + "\".outbox_parked";
    scalar(pg_url(), "INSERT INTO " + parked + " SELECT e.*, 'FAILED', 7, 'boom', now(), now() FROM " + events +
                         " e WHERE outbox_id = '" + ids[1] + "'");
    EXPECT_EQ(scalar(pg_url_as(op, pw), "WITH u AS (UPDATE " + t +
                                            " SET status = 'PENDING', error_message = NULL WHERE status = 'FAILED'"
                                            " AND retry_count < 10 RETURNING 1) SELECT count(*) FROM u"),
              "1");
    EXPECT_EQ(scalar(pg_url(), "SELECT status || '/' || coalesce(error_message, '-') FROM " + parked), "PENDING/-");
    for (const std::string &refused :
         {"UPDATE " + parked + " SET payload = '{}'", "INSERT INTO " + events + " SELECT * FROM " + events,
          "UPDATE " + events + " SET seq = 0", "DROP TABLE " + events, "TRUNCATE " + events}) {
        const std::string got = scalar(pg_url_as(op, pw), refused);
        EXPECT_TRUE(got.find("permission denied") != std::string::npos ||
                    got.find("must be owner") != std::string::npos)
            << refused << " -> " << got;
    }
    const std::string changed = scalar(pg_url_as(op, pw), "UPDATE " + t + " SET payload = '{}'");
    EXPECT_NE(changed.find("written once"), std::string::npos) << changed;
    EXPECT_EQ(scalar(pg_url_as(op, pw),
                     "WITH d AS (DELETE FROM " + t + " WHERE status = 'PUBLISHED' RETURNING 1) SELECT count(*) FROM d"),
              "2");
    EXPECT_EQ(scalar(pg_url(), "SELECT outbox_id FROM " + t), ids[1]) << "the pending one stays";
}

// The operator role lists, redrives and skips parked aggregates (outbox parked, the console): a
// subscriber's held one and the relay's FAILED one, with exactly the grants of packaging/roles.sql.
TEST_F(SecTest, TheOperatorRoleListsRedrivesAndSkipsParkedAggregates) {
    ASSERT_NO_FATAL_FAILURE(apply_roles());
    const std::string pw = "Pk" + tag;
    const std::string op = login_role("o", pw, "IN ROLE outbox_operator");
    const std::string s = "\"" + schema + "\".";
    const char *e1 = "01900000-0000-7000-8000-000000000001", *e2 = "01900000-0000-7000-8000-000000000002";
    for (const std::string &stmt :
         {"INSERT INTO " + s +
              "outbox_inbox_held (consumer, aggregate_type, aggregate_id, state, attempts,"
              " first_failed_at, last_error) VALUES ('sub', 'PRD', 'p1', 'parked', 5, now(), 'boom')",
          "INSERT INTO " + s +
              "outbox_inbox_held_events (consumer, aggregate_type, aggregate_id, seq, outbox_id,"
              " event_type, properties, body) VALUES ('sub', 'PRD', 'p1', 1, '" +
              std::string(e1) + "', 'X', '{}', '{}'), ('sub', 'PRD', 'p1', 2, '" + e2 + "', 'X', '{}', '{}')",
          "INSERT INTO " + s +
              "outbox_parked (position, outbox_id, event_type, aggregate_type, aggregate_id, seq,"
              " operation, payload, metadata, created_at, status, retry_count, error_message) VALUES (7,"
              " gen_random_uuid(), 'X', 'PRD', 'r1', 1, 'POST', '{}', '{}', now(), 'FAILED', 10, 'unroutable')"}) {
        auto r = sql(pg_url(), stmt);
        ASSERT_TRUE(r.empty()) << r[0][0];
    }
    outbox_db *d = nullptr;
    ASSERT_EQ(outbox_db_open(&d, pg_url_as(op, pw).c_str(), cfg), OUTBOX_OK) << outbox_last_error();
    char *json = nullptr;
    ASSERT_EQ(outbox_parked_list(&json, d, nullptr, 1, 10), OUTBOX_OK) << outbox_last_error();
    const std::string list = json;
    outbox_string_free(json);
    EXPECT_NE(list.find("\"aggregate_id\":\"p1\""), std::string::npos) << list;
    EXPECT_NE(list.find("\"aggregate_id\":\"r1\""), std::string::npos) << list;
    int64_t n = 0;
    EXPECT_EQ(outbox_parked_redrive(&n, d, "sub", "PRD", "p1"), OUTBOX_OK) << outbox_last_error();
    EXPECT_EQ(n, 1);
    char *id = nullptr;
    EXPECT_EQ(outbox_parked_skip(&id, d, "sub", "PRD", "p1", e1, "op", "why"), OUTBOX_OK) << outbox_last_error();
    outbox_string_free(id);
    EXPECT_EQ(outbox_parked_skip(&id, d, nullptr, "PRD", "r1", nullptr, "op", "why"), OUTBOX_OK) << outbox_last_error();
    outbox_string_free(id);
    outbox_db_close(d);
    EXPECT_EQ(scalar(pg_url(), "SELECT count(*) FROM " + s + "outbox_inbox_skipped"), "2");
    EXPECT_EQ(scalar(pg_url(), "SELECT state FROM " + s + "outbox_inbox_held"), "retrying")
        << "the skipped head's successor is due now";
    EXPECT_EQ(scalar(pg_url(), "SELECT count(*) FROM " + s + "outbox_parked"), "0");
}

// The operator role purges: the partitions due go through the schema's drop function (the
// owner's rights), which drops nothing above the relay's cursor; other roles cannot call it.
TEST_F(SecTest, TheOperatorRolePurgesDuePartitionsAndNothingAboveTheCursor) {
    ASSERT_NO_FATAL_FAILURE(apply_roles());
    const std::string pw = "Pp" + tag;
    const std::string op = login_role("o", pw, "IN ROLE outbox_operator");
    const std::string writer = login_role("w", pw, "IN ROLE outbox_writer");
    const std::string s = "\"" + schema + "\".";
    // Two partitions of 100 positions: [100, 200) published 40 days ago, [200, 300) pending.
    sql(pg_url(), outbox_test::drop_outbox_partitions_sql(schema, "outbox"));
    for (const char *from : {"100", "200"}) {
        for (const char *t : {"e", "r"}) { // the events' partition and their receipts'
            auto r = sql(pg_url(), "CREATE TABLE " + s + "outbox_" + t + "00000000000" + from + " PARTITION OF " + s +
                                       (t[0] == 'e' ? "outbox_events" : "outbox_receipts") + " FOR VALUES FROM (" +
                                       from + ") TO (" + std::to_string(std::stoi(from) + 100) + ")");
            ASSERT_TRUE(r.empty()) << r[0][0];
        }
    }
    auto r = sql(pg_url(), "INSERT INTO " + s +
                               "outbox_events (position, outbox_id, event_type, aggregate_type, aggregate_id, seq,"
                               " operation, payload) SELECT g, gen_random_uuid(), 'X', 'PRD', 'p' || g, 1, 'POST', '{}'"
                               " FROM generate_series(100, 250) g");
    ASSERT_TRUE(r.empty()) << r[0][0];
    sql(pg_url(), "SELECT setval('" + s + "outbox_position_seq', 250)");
    sql(pg_url(), "INSERT INTO " + s + "outbox_receipts VALUES (100, 199, now() - interval '40 days')");
    sql(pg_url(), "UPDATE " + s + "outbox_relay SET cursor = 199");

    outbox_db *d = nullptr;
    ASSERT_EQ(outbox_db_open(&d, pg_url_as(op, pw).c_str(), cfg), OUTBOX_OK) << outbox_last_error();
    int64_t purged = 0;
    EXPECT_EQ(outbox_purge_published(&purged, d, 30 * 86400, 100), OUTBOX_OK) << outbox_last_error();
    EXPECT_EQ(purged, 100);
    outbox_db_close(d);
    EXPECT_EQ(scalar(pg_url(), "SELECT count(*) FROM " + s + "outbox_events"), "51");
    EXPECT_EQ(scalar(pg_url(), "SELECT to_regclass('" + s + "outbox_e00000000000100') IS NULL"), "t");
    EXPECT_EQ(scalar(pg_url(), "SELECT to_regclass('" + s + "outbox_x00000000000100') IS NULL"), "t")
        << "taken out of the table, then dropped";
    EXPECT_EQ(scalar(pg_url(), "SELECT to_regclass('" + s + "outbox_r00000000000100') IS NULL AND to_regclass('" + s +
                                   "outbox_y00000000000100') IS NULL"),
              "t")
        << "the receipts' partition went with it";
    EXPECT_EQ(scalar(pg_url(), "SELECT count(*) FROM " + s + "outbox_receipts"), "0");
    const std::string by_writer_detached = scalar(pg_url_as(writer, pw), "SELECT " + s + "outbox_drop_detached()");
    EXPECT_NE(by_writer_detached.find("permission denied"), std::string::npos) << by_writer_detached;
    // The function itself refuses a partition the cursor has not passed, and other roles.
    const std::string above =
        scalar(pg_url_as(op, pw), "SELECT " + s + "outbox_drop_partition('outbox_e00000000000200')");
    EXPECT_NE(above.find("not wholly at or below the relay's cursor"), std::string::npos) << above;
    const std::string by_writer =
        scalar(pg_url_as(writer, pw), "SELECT " + s + "outbox_drop_partition('outbox_e00000000000200')");
    EXPECT_NE(by_writer.find("permission denied"), std::string::npos) << by_writer;
    EXPECT_EQ(scalar(pg_url(), "SELECT count(*) FROM " + s + "outbox_events"), "51");
}

// ================================================================ TLS

TEST_F(SecTest, RelayOverAmqpsAndVerifiedPostgresTls) {
    const char *amqps = std::getenv("OUTBOX_AMQPS_URL");
    const char *ca = std::getenv("OUTBOX_TLS_CA");
    ASSERT_TRUE(amqps != nullptr && ca != nullptr)
        << "OUTBOX_AMQPS_URL and OUTBOX_TLS_CA come from `eval \"$(scripts/services.sh env)\"`";
    ASSERT_TRUE(std::ifstream(ca).good()) << ca << " missing: restart the services (scripts/services.sh down; up)";
    const std::string pg_tls = pg_url() + "?sslmode=verify-full&sslrootcert=" + ca;

    // PostgreSQL: the session is encrypted, verified against the CA and the host (an IP SAN).
    outbox_db *d = nullptr;
    ASSERT_EQ(outbox_db_open(&d, pg_tls.c_str(), cfg), OUTBOX_OK) << outbox_last_error();
    EXPECT_EQ(outbox_db_exec(d, "DO $$ BEGIN IF NOT (SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()) THEN"
                                " RAISE EXCEPTION 'not TLS'; END IF; END $$"),
              OUTBOX_OK)
        << outbox_last_error();
    for (int i = 0; i < 5; ++i) {
        outbox_event *ev = event("tls-" + std::to_string(i));
        ASSERT_EQ(outbox_write(d, ev), OUTBOX_OK) << outbox_last_error();
        outbox_event_free(ev);
    }
    outbox_db_close(d);

    // A consumer on plain AMQP sees what the relay published over TLS.
    outbox_consumer *consumer = nullptr;
    ASSERT_EQ(outbox_consumer_new(&consumer, cfg, ("tls-" + tag).c_str()), OUTBOX_OK);
    ASSERT_EQ(outbox_consumer_connect(consumer), OUTBOX_OK) << outbox_last_error();

    set("pg.url", pg_tls);
    set("amqp.url", amqps);
    set("amqp.tls.ca", ca);
    std::vector<std::string> logs;
    outbox_relay *relay = nullptr;
    ASSERT_EQ(outbox_relay_new(&relay, cfg), OUTBOX_OK);
    outbox_relay_set_logger(
        relay,
        [](outbox_log_level, const char *m, void *ud) { static_cast<std::vector<std::string> *>(ud)->emplace_back(m); },
        &logs);
    outbox_relay_stats st;
    outbox_relay_stats_init(&st);
    ASSERT_EQ(outbox_relay_step(relay, &st), OUTBOX_OK) << outbox_last_error();
    EXPECT_EQ(st.published, 5);
    outbox_relay_free(relay);
    std::string all;
    for (const auto &l : logs) {
        all += l + "\n";
    }
    EXPECT_NE(all.find("amqps://"), std::string::npos) << all;
    EXPECT_NE(all.find("sslmode=verify-full"), std::string::npos) << all;
    for (int i = 0; i < 5; ++i) {
        outbox_message *m = nullptr;
        ASSERT_EQ(outbox_consumer_next(&m, consumer, 10000), OUTBOX_OK) << outbox_last_error();
        EXPECT_EQ(std::string(outbox_message_field(m, "AGGREGATE_ID")).rfind("tls-", 0), 0U);
        EXPECT_EQ(outbox_consumer_ack(consumer, m), OUTBOX_OK);
        outbox_message_free(m);
    }
    outbox_consumer_free(consumer);

    // A CA the servers' certificates do not chain to: both connections refused, clearly.
    const std::string dir = "/tmp/outbox-wrong-ca-" + tag;
    int rc = 0;
    std::string out = shell("mkdir -p " + dir +
                                " && openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1"
                                " -nodes -days 1 -subj /CN=wrong -keyout " +
                                dir + "/ca.key -out " + dir + "/ca.crt",
                            &rc);
    ASSERT_EQ(rc, 0) << out;
    d = nullptr;
    const std::string pg_wrong = pg_url() + "?sslmode=verify-full&sslrootcert=" + dir + "/ca.crt";
    EXPECT_EQ(outbox_db_open(&d, pg_wrong.c_str(), cfg), OUTBOX_ERR_CONNECTION);
    EXPECT_NE(std::string(outbox_last_error()).find("certificate verify failed"), std::string::npos)
        << outbox_last_error();
    set("pg.url", pg_url());
    set("amqp.tls.ca", dir + "/ca.crt");
    ASSERT_EQ(outbox_relay_new(&relay, cfg), OUTBOX_OK);
    EXPECT_EQ(outbox_relay_step(relay, nullptr), OUTBOX_ERR_CONNECTION);
    const std::string msg = outbox_last_error();
    EXPECT_NE(msg.find("TLS"), std::string::npos) << msg;
    EXPECT_EQ(msg.find(":outbox@"), std::string::npos) << "password shown: " << msg;
    outbox_relay_free(relay);
    // Without verification the same CA would be accepted: the refusal above is the check working.
    set("amqp.tls.verify_peer", "false");
    set("amqp.tls.verify_hostname", "false");
    ASSERT_EQ(outbox_relay_new(&relay, cfg), OUTBOX_OK);
    EXPECT_EQ(outbox_relay_step(relay, nullptr), OUTBOX_OK) << outbox_last_error();
    outbox_relay_free(relay);
    shell("rm -rf " + dir, &rc);
}

// TLS per address of a broker list (amqp.url naming several nodes, each with its own scheme): the
// first address dead, the second the local AMQPS listener. A consumer and relays connect to the
// second over TLS (amqp.tls.ca applies to it) and publish and receive, in a list of amqps://
// addresses and in mixed amqp:// / amqps:// lists; without the test's CA the same list is refused
// at the TLS handshake, so the second address really is spoken to over TLS.
TEST_F(SecTest, AmqpsPerAddressOfABrokerListWhoseFirstNodeIsDead) {
    const char *amqps = std::getenv("OUTBOX_AMQPS_URL");
    const char *ca = std::getenv("OUTBOX_TLS_CA");
    ASSERT_TRUE(amqps != nullptr && ca != nullptr)
        << "OUTBOX_AMQPS_URL and OUTBOX_TLS_CA come from `eval \"$(scripts/services.sh env)\"`";
    ASSERT_TRUE(std::ifstream(ca).good()) << ca << " missing: restart the services (scripts/services.sh down; up)";
    const ClosedPort dead;
    ASSERT_GT(dead.port, 0);
    const auto node_of = [](const std::string &url) {
        const size_t at = url.rfind('@');
        return url.substr(at + 1, url.find('/', at) - at - 1);
    };
    const std::string tls_node = node_of(amqps), plain_node = node_of(amqp_url());
    const std::string dead_rest = "DeadN0de" + tag + "@127.0.0.1:" + std::to_string(dead.port) + "/%2f";
    const std::string dead_amqp = "amqp://outbox:" + dead_rest, dead_amqps = "amqps://outbox:" + dead_rest;
    set("pg.url", pg_url());
    set("amqp.tls.ca", ca);
    std::string logs;
    auto sink = [](outbox_log_level, const char *m, void *ud) {
        *static_cast<std::string *>(ud) += std::string(m) + "\n";
    };

    // The consumer, on a mixed list: the dead plain address, then TLS.
    set("amqp.url", dead_amqp + "," + amqps);
    outbox_consumer *consumer = nullptr;
    ASSERT_EQ(outbox_consumer_new(&consumer, cfg, ("tls-list-" + tag).c_str()), OUTBOX_OK) << outbox_last_error();
    outbox_consumer_set_logger(consumer, sink, &logs);
    ASSERT_EQ(outbox_consumer_connect(consumer), OUTBOX_OK) << outbox_last_error();
    EXPECT_NE(logs.find("connected to RabbitMQ node " + tls_node), std::string::npos) << logs;

    // Relays on three lists, each publishing its events through the second address.
    struct Case {
        std::string label, url, node;
    };
    int written = 0;
    for (const Case &c : std::vector<Case>{{"amqps,amqps", dead_amqps + "," + amqps, tls_node},
                                           {"amqp,amqps", dead_amqp + "," + amqps, tls_node},
                                           {"amqps,amqp", dead_amqps + "," + amqp_url(), plain_node}}) {
        outbox_db *d = nullptr;
        ASSERT_EQ(outbox_db_open(&d, pg_url().c_str(), cfg), OUTBOX_OK) << outbox_last_error();
        for (int i = 0; i < 2; ++i, ++written) {
            outbox_event *ev = event("tls-list-" + std::to_string(written));
            ASSERT_EQ(outbox_write(d, ev), OUTBOX_OK) << outbox_last_error();
            outbox_event_free(ev);
        }
        outbox_db_close(d);
        set("amqp.url", c.url);
        logs.clear();
        outbox_relay *relay = nullptr;
        ASSERT_EQ(outbox_relay_new(&relay, cfg), OUTBOX_OK);
        outbox_relay_set_logger(relay, sink, &logs);
        outbox_relay_stats st;
        outbox_relay_stats_init(&st);
        EXPECT_EQ(outbox_relay_step(relay, &st), OUTBOX_OK) << c.label << ": " << outbox_last_error();
        EXPECT_EQ(st.published, 2) << c.label;
        outbox_relay_free(relay);
        EXPECT_NE(logs.find("connected to RabbitMQ node " + c.node), std::string::npos) << c.label << ": " << logs;
        EXPECT_EQ(logs.find("DeadN0de"), std::string::npos) << logs;
    }
    std::vector<std::string> got;
    for (int i = 0; i < written; ++i) {
        outbox_message *m = nullptr;
        ASSERT_EQ(outbox_consumer_next(&m, consumer, 10000), OUTBOX_OK) << outbox_last_error();
        got.emplace_back(outbox_message_field(m, "AGGREGATE_ID"));
        EXPECT_EQ(outbox_consumer_ack(consumer, m), OUTBOX_OK);
        outbox_message_free(m);
    }
    std::sort(got.begin(), got.end());
    EXPECT_EQ(got, (std::vector<std::string>{"tls-list-0", "tls-list-1", "tls-list-2", "tls-list-3", "tls-list-4",
                                             "tls-list-5"}));
    outbox_consumer_free(consumer);

    // Without the test's CA (the system's CAs do not sign the throwaway certificate): refused at the
    // handshake of the second address, the message naming both addresses, no password in it.
    set("amqp.tls.ca", "");
    set("amqp.url", dead_amqp + "," + amqps);
    outbox_relay *relay = nullptr;
    ASSERT_EQ(outbox_relay_new(&relay, cfg), OUTBOX_OK);
    EXPECT_EQ(outbox_relay_step(relay, nullptr), OUTBOX_ERR_CONNECTION);
    const std::string msg = outbox_last_error();
    EXPECT_NE(msg.find("2 addresses"), std::string::npos) << msg;
    EXPECT_NE(msg.find(tls_node + "/%2f: cannot connect (TLS): SSL peer cert verification failed"), std::string::npos)
        << msg;
    EXPECT_EQ(msg.find("DeadN0de"), std::string::npos) << msg;
    EXPECT_EQ(msg.find(":outbox@"), std::string::npos) << "password shown: " << msg;
    outbox_relay_free(relay);
}

// ================================================================ secrets

// Distinctive passwords (with characters URL-encoded in the URLs) for a PostgreSQL role and a
// RabbitMQ user made for this test; every output must lack them, raw or encoded.
TEST_F(SecTest, NoPasswordInAnyOutputLogOrMessage) {
    const std::string pg_pw = "PgS3cr3t~" + tag + "@x";
    const std::string pg_pw_enc = "PgS3cr3t~" + tag + "%40x";
    const std::string mq_pw = "MqS3cr3t" + tag + "/y";
    const std::string mq_pw_enc = "MqS3cr3t" + tag + "%2Fy";
    const std::string mq_user = "sec_" + tag;
    const std::string pg_user = login_role("secret", pg_pw, "SUPERUSER");
    int rc = 0;
    std::string out = shell(services() + " rabbitmqctl add_user " + mq_user + " " + shell_quote(mq_pw) + " && " +
                                services() + " rabbitmqctl set_permissions -p / " + mq_user + " '.*' '.*' '.*'",
                            &rc);
    ASSERT_EQ(rc, 0) << out;

    const std::string pg_right = pg_url_as(pg_user, pg_pw_enc);
    const std::string pg_wrong = pg_url_as(pg_user, "Wr0ng" + pg_pw_enc);
    const std::string mq_right = "amqp://" + mq_user + ":" + mq_pw_enc + "@" + amqp_rest();
    const std::string mq_wrong = "amqp://" + mq_user + ":Wr0ng" + mq_pw_enc + "@" + amqp_rest();
    const std::string pg_bad_encoding = "postgresql://" + pg_user + ":PgS3cr3t%zz" + tag + "@" + pg_rest();
    std::string collected;
    auto collect = [&](const std::string &what, const std::string &text) {
        collected += "=== " + what + "\n" + text + "\n";
    };

    // The CLI: every command, with right and wrong passwords, URLs from the environment and flags.
    const std::string cli = OUTBOX_CLI_PATH;
    const std::string common = " --schema " + schema + " --set amqp.exchange=sec." + tag;
    const std::string tail_common = " --set amqp.exchange=sec." + tag; // tail has no tables: no --schema
    const std::string cfg_file = "/tmp/outbox-sec-" + tag + ".conf";
    {
        std::ofstream f(cfg_file);
        f << "pg.url " << pg_right << "\n"; // a missing '=': the line must not be echoed
    }
    struct Run {
        std::string pg, mq, args, label; // label: what the output is filed under (no URL in it)
    };
    std::vector<Run> runs;
    for (const auto &[pg, mq] : std::vector<std::pair<std::string, std::string>>{
             {pg_right, mq_right}, {pg_wrong, mq_right}, {pg_right, mq_wrong}, {pg_bad_encoding, mq_wrong}}) {
        const bool all = pg != pg_bad_encoding;
        for (const std::string args :
             {"migrate", "stats", "stats --json", "relay --once", "relay --once --log-format json --log-level debug",
              "tail --count 1 --timeout 1", "retry-failed", "purge --published-older-than 30d",
              "purge-inbox --older-than 30d", "replay --aggregate PRD:1"}) {
            if (all || args == "stats" || args == "relay --once") {
                runs.push_back({pg, mq, args + (args.rfind("tail", 0) == 0 ? tail_common : common), args});
            }
        }
        runs.push_back({"", "", "stats --pg-url " + shell_quote(pg) + common, "stats --pg-url"});
        runs.push_back({"", "", "relay --once --pg-url " + shell_quote(pg) + " --amqp-url " + shell_quote(mq) + common,
                        "relay --once --pg-url --amqp-url"});
        runs.push_back({pg, mq, "stats --config " + cfg_file + common, "stats --config"});
        runs.push_back({pg, mq, "stats --set pg.url=" + shell_quote(pg) + " --set amqp.url=" + shell_quote(mq) + common,
                        "stats --set"});
    }
    // The daemon, reconnecting against a wrong broker password for two seconds, then SIGTERM.
    runs.push_back({pg_right, mq_wrong, "relay --log-level debug --poll-interval-ms 100" + common, "daemon"});
    runs.push_back({pg_wrong, mq_right, "relay --log-level debug --log-format json" + common, "daemon json"});
    bool saw_pg_refusal = false, saw_mq_refusal = false, saw_success = false;
    for (const auto &r : runs) {
        std::string env =
            r.pg.empty() ? "env -u OUTBOX_PG_URL -u OUTBOX_AMQP_URL "
                         : "env OUTBOX_PG_URL=" + shell_quote(r.pg) + " OUTBOX_AMQP_URL=" + shell_quote(r.mq) + " ";
        const bool daemon = r.args.rfind("relay --log-level", 0) == 0;
        // A daemon that does not stop on SIGTERM is killed 5 s later and fails here, rather than
        // holding the suite until its time limit, with its threads' stacks in the failure (seen twice
        // in CI: "relay stopped" logged, then no exit; not reproduced on demand).
        std::string text =
            shell((daemon ? std::string(OUTBOX_SOURCE_DIR) + "/tests/security/stop_daemon.sh 2 5 " : "") + env + cli +
                      " " + r.args,
                  &rc);
        EXPECT_FALSE(daemon && rc == 137) << r.label << ": the daemon did not stop on SIGTERM:\n" << text;
        collect(r.label + " (rc " + std::to_string(rc) + ")", text);
        saw_pg_refusal = saw_pg_refusal || text.find("password authentication failed") != std::string::npos;
        saw_mq_refusal = saw_mq_refusal || text.find("ACCESS_REFUSED") != std::string::npos ||
                         text.find("login") != std::string::npos;
        saw_success = saw_success || (rc == 0 && r.args.rfind("stats --json", 0) == 0);
    }
    EXPECT_TRUE(saw_pg_refusal) << "the wrong PostgreSQL password was never exercised";
    EXPECT_TRUE(saw_mq_refusal) << "the wrong RabbitMQ password was never exercised";
    EXPECT_TRUE(saw_success) << "the right passwords never worked";

    // The C API: messages and log sinks.
    for (const std::string &url : {pg_wrong, pg_bad_encoding, "host=127.0.0.1 port=1 password=" + pg_pw + " x"}) {
        outbox_db *d = nullptr;
        EXPECT_NE(outbox_db_open(&d, url.c_str(), cfg), OUTBOX_OK) << "a wrong password was accepted";
        collect("outbox_db_open", outbox_last_error());
        outbox_db_close(d);
    }
    for (const auto &[pg, mq] :
         std::vector<std::pair<std::string, std::string>>{{pg_wrong, mq_right}, {pg_right, mq_wrong}}) {
        set("pg.url", pg);
        set("amqp.url", mq);
        char *v = nullptr;
        ASSERT_EQ(outbox_config_get(&v, cfg, "pg.url"), OUTBOX_OK);
        collect("config_get", v);
        outbox_string_free(v);
        std::string logs;
        auto sink = [](outbox_log_level, const char *m, void *ud) {
            *static_cast<std::string *>(ud) += std::string(m) + "\n";
        };
        outbox_relay *relay = nullptr;
        ASSERT_EQ(outbox_relay_new(&relay, cfg), OUTBOX_OK);
        outbox_relay_set_logger(relay, sink, &logs);
        EXPECT_NE(outbox_relay_step(relay, nullptr), OUTBOX_OK);
        collect("relay step", outbox_last_error());
        outbox_relay_free(relay);
        outbox_consumer *c = nullptr;
        ASSERT_EQ(outbox_consumer_new(&c, cfg, ("sec-" + tag).c_str()), OUTBOX_OK);
        outbox_consumer_set_logger(c, sink, &logs);
        outbox_message *m = nullptr;
        outbox_status st = outbox_consumer_next(&m, c, 500);
        collect("consumer next " + std::string(outbox_status_name(st)), outbox_last_error());
        outbox_message_free(m);
        outbox_consumer_free(c);
        collect("logs", logs);
    }
    // Broker URL lists and malformed broker URLs, each address with a password of its own: through
    // the CLI (environment, flag, --set, --config; one-shot commands and the daemon) and the C API
    // (relay, consumer, tail, replay; messages and log sinks).
    const ClosedPort down1, down2;
    ASSERT_TRUE(down1.port > 0 && down2.port > 0);
    const std::string down1_at = "@127.0.0.1:" + std::to_string(down1.port) + "/%2f";
    const std::string down2_at = "@localhost:" + std::to_string(down2.port) + "/%2f";
    std::vector<std::string> list_pws;
    auto pw = [&](const std::string &what) {
        list_pws.push_back("MqS3cr3t" + what + tag);
        return list_pws.back();
    };
    const std::vector<std::string> dead_lists = {
        "amqp://u:" + pw("ListA") + down1_at + ",amqp://u:" + pw("ListB") + down2_at,
        "amqp://u:" + pw("ListC") + down1_at + "," + mq_wrong, // the live node refuses the password
    };
    const std::string live_list = "amqp://u:" + pw("ListD") + down1_at + "," + mq_right;
    const std::vector<std::string> malformed = {
        "amqp://u:" + pw("Bracket") + "@[bad",
        "amqps://u:" + pw("NotAPort") + "@h:notaport/",
        "amqp://u:" + pw("Slash") + "/x" + down1_at, // an unencoded '/' in the password
        "amqp://u:" + pw("First") + down1_at + ",amqp://u:" + pw("Second") + "@[bad", // malformed second
        "amqps://u:" + pw("Third") + "@h:notaport/," + mq_right,                      // malformed first
    };
    std::vector<std::string> broker_urls = dead_lists;
    broker_urls.push_back(live_list);
    broker_urls.insert(broker_urls.end(), malformed.begin(), malformed.end());
    bool saw_list_refusal = false, saw_list_success = false;
    int malformed_refused = 0;
    for (const auto &mq : broker_urls) {
        const bool bad = std::find(malformed.begin(), malformed.end(), mq) != malformed.end();
        const std::string env =
            "env OUTBOX_PG_URL=" + shell_quote(pg_right) + " OUTBOX_AMQP_URL=" + shell_quote(mq) + " ";
        const std::string flag = " --amqp-url " + shell_quote(mq);
        {
            std::ofstream f(cfg_file);
            f << "amqp.url = " << mq << "\n";
        }
        for (const std::string &cmd : {env + cli + " relay --once" + common,
                                       env + cli + " relay --once --log-level debug --log-format json" + common,
                                       "env -u OUTBOX_AMQP_URL OUTBOX_PG_URL=" + shell_quote(pg_right) + " " + cli +
                                           " relay --once" + flag + common,
                                       env + cli + " relay --once --set amqp.url=" + shell_quote(mq) + common,
                                       "env -u OUTBOX_AMQP_URL OUTBOX_PG_URL=" + shell_quote(pg_right) + " " + cli +
                                           " relay --once --config " + cfg_file + common,
                                       env + cli + " tail --count 1 --timeout 1" + flag + tail_common,
                                       env + cli + " replay --aggregate PRD:1" + flag + common}) {
            const std::string text = shell(cmd, &rc);
            collect("broker list (rc " + std::to_string(rc) + ")", text);
            malformed_refused += bad && rc == 2 && text.find("invalid AMQP URL") != std::string::npos ? 1 : 0;
            saw_list_refusal = saw_list_refusal || text.find("addresses could be reached") != std::string::npos;
            saw_list_success =
                saw_list_success || (mq == live_list && rc == 0 && cmd.find(" relay --once") != std::string::npos);
        }
        set("pg.url", pg_right);
        ASSERT_EQ(outbox_config_set(cfg, "amqp.url", mq.c_str()), OUTBOX_OK) << outbox_last_error();
        char *v = nullptr;
        ASSERT_EQ(outbox_config_get(&v, cfg, "amqp.url"), OUTBOX_OK);
        collect("config_get amqp.url", v);
        outbox_string_free(v);
        std::string logs;
        auto sink = [](outbox_log_level, const char *m, void *ud) {
            *static_cast<std::string *>(ud) += std::string(m) + "\n";
        };
        outbox_relay *relay = nullptr;
        ASSERT_EQ(outbox_relay_new(&relay, cfg), OUTBOX_OK);
        outbox_relay_set_logger(relay, sink, &logs);
        const outbox_status relay_st = outbox_relay_step(relay, nullptr);
        collect("relay step " + std::string(outbox_status_name(relay_st)), outbox_last_error());
        EXPECT_EQ(relay_st, bad               ? OUTBOX_ERR_INVALID_ARGUMENT
                            : mq == live_list ? OUTBOX_OK
                                              : OUTBOX_ERR_CONNECTION)
            << outbox_last_error();
        outbox_relay_free(relay);
        outbox_consumer *c = nullptr;
        const outbox_status new_st = outbox_consumer_new(&c, cfg, ("sec-" + tag).c_str());
        collect("consumer new " + std::string(outbox_status_name(new_st)), outbox_last_error());
        if (new_st == OUTBOX_OK) {
            outbox_consumer_set_logger(c, sink, &logs);
            outbox_message *m = nullptr;
            const outbox_status st = outbox_consumer_next(&m, c, 500);
            collect("consumer next " + std::string(outbox_status_name(st)), outbox_last_error());
            outbox_message_free(m);
            outbox_consumer_free(c);
        }
        outbox_tail *t = nullptr;
        const outbox_status tail_st = outbox_tail_open(&t, cfg, nullptr);
        collect("tail open " + std::string(outbox_status_name(tail_st)), outbox_last_error());
        outbox_tail_close(t);
        outbox_db *d = nullptr;
        ASSERT_EQ(outbox_db_open(&d, pg_right.c_str(), cfg), OUTBOX_OK) << outbox_last_error();
        int64_t n = 0;
        const outbox_status replay_st = outbox_replay(&n, d, cfg, "PRD", "1", 0);
        collect("replay " + std::string(outbox_status_name(replay_st)), outbox_last_error());
        outbox_db_close(d);
        collect("logs", logs);
    }
    EXPECT_NE(collected.find("amqp://u:***@localhost:" + std::to_string(down2.port)), std::string::npos)
        << "the second address of a list was never shown (redacted) in any output";
    EXPECT_TRUE(saw_list_refusal) << "no list of dead addresses was refused as one";
    EXPECT_TRUE(saw_list_success) << "the list whose second address is live never worked";
    EXPECT_EQ(malformed_refused, static_cast<int>(malformed.size()) * 7)
        << "every malformed URL refused as a usage error by every one-shot command";
    // The daemon, two seconds on a list of dead nodes and on a list with a malformed address (a
    // configuration error: retried, slowly, as a missing table is).
    for (const std::string &mq : {dead_lists[0], malformed[3]}) {
        const std::string text = shell("timeout -s TERM 2 env OUTBOX_PG_URL=" + shell_quote(pg_right) +
                                           " OUTBOX_AMQP_URL=" + shell_quote(mq) + " " + cli +
                                           " relay --log-level debug --poll-interval-ms 100" + common,
                                       &rc);
        collect("daemon on a broker list (rc " + std::to_string(rc) + ")", text);
        EXPECT_NE(text.find(mq == malformed[3] ? "INVALID_ARGUMENT: invalid AMQP URL" : "addresses could be reached"),
                  std::string::npos)
            << text;
        if (mq == malformed[3]) {
            EXPECT_NE(text.find("retrying in 5000 ms"), std::string::npos) << "the log names the wait it does:\n"
                                                                           << text;
        }
    }

    shell(services() + " rabbitmqctl delete_user " + mq_user + "; rm -f " + cfg_file, &rc);

    std::vector<std::string> secrets = {pg_pw, pg_pw_enc, mq_pw, mq_pw_enc, std::string("S3cr3t")};
    secrets.insert(secrets.end(), list_pws.begin(), list_pws.end());
    for (const std::string &secret : secrets) {
        const auto pos = collected.find(secret);
        EXPECT_EQ(pos, std::string::npos)
            << "secret '" << secret << "' in output: ..."
            << collected.substr(pos == std::string::npos ? 0 : (pos > 300 ? pos - 300 : 0), 600);
    }
    EXPECT_GT(collected.size(), 2000U) << "the runs produced almost no output to check:\n" << collected;
}

// ================================================================ injection

const std::vector<std::string> kInjections = {
    "'; DROP TABLE x; --",
    "\"",
    "\\",
    "$1",
    "$$; DROP TABLE x; $$",
    "Robert'); DROP TABLE x;--",
    "x' OR '1'='1",
    ")::text; SELECT pg_sleep(10); --",
    "E'\\\\x00'",
    "%s%n%x",
    "\xe2\x80\xae\xf0\x9f\x9a\x80 Za\xc5\xbc\xc3\xb3\xc5\x82\xc4\x87",
    std::string(250, '\''),
};

TEST_F(SecTest, InjectionStringsAreDataAndIdentifiersAreRefused) {
    // Identifier options: every injection string refused, the configuration unchanged.
    for (const char *key : {"outbox.schema", "outbox.table", "inbox.table", "relay.notify_channel"}) {
        char *before = nullptr;
        ASSERT_EQ(outbox_config_get(&before, cfg, key), OUTBOX_OK);
        for (const auto &s : kInjections) {
            EXPECT_EQ(outbox_config_set(cfg, key, s.c_str()), OUTBOX_ERR_INVALID_ARGUMENT) << key << " took " << s;
        }
        char *after = nullptr;
        ASSERT_EQ(outbox_config_get(&after, cfg, key), OUTBOX_OK);
        EXPECT_STREQ(before, after);
        outbox_string_free(before);
        outbox_string_free(after);
    }
    // The injections' target exists, to show it survives.
    ASSERT_TRUE(sql(pg_url(), "CREATE TABLE \"" + schema + "\".x (v text)").empty());
    ASSERT_TRUE(sql(pg_url(), "INSERT INTO \"" + schema + "\".x VALUES ('kept')").empty());

    outbox_db *d = nullptr;
    ASSERT_EQ(outbox_db_open(&d, pg_url().c_str(), cfg), OUTBOX_OK);
    const std::string t = "\"" + schema + "\".outbox";
    int i = 0;
    for (const auto &s : kInjections) {
        // The payload holds the string as a JSON string value.
        std::string js = "\"";
        for (char c : s) {
            js += c == '"' ? std::string("\\\"") : c == '\\' ? std::string("\\\\") : std::string(1, c);
        }
        js += "\"";
        outbox_event *ev = event(s, "{\"v\":" + js + "}");
        for (const char *field : {"user", "event_type", "idempotency_key"}) {
            const std::string v = field == std::string("idempotency_key") ? s + std::to_string(i) : s;
            ASSERT_EQ(outbox_event_set(ev, field, v.c_str()), OUTBOX_OK) << field << ": " << s;
        }
        ASSERT_EQ(outbox_event_set(ev, "metadata", ("{\"m\":" + js + "}").c_str()), OUTBOX_OK);
        outbox_statement *st = nullptr;
        ASSERT_EQ(outbox_render_write(&st, cfg, ev), OUTBOX_OK) << outbox_last_error();
        EXPECT_STREQ(outbox_statement_param(st, 1), s.c_str()) << "rendered parameter, byte for byte";
        if (s.size() > 3) {
            EXPECT_EQ(std::string(outbox_statement_sql(st)).find(s), std::string::npos) << "value spliced into SQL";
        }
        outbox_statement_free(st);
        ASSERT_EQ(outbox_write(d, ev), OUTBOX_OK) << s << ": " << outbox_last_error();
        const std::string id = outbox_event_id(ev);
        auto row = sql(pg_url(),
                       "SELECT aggregate_id, actor, event_type, idempotency_key, payload->>'v', metadata->>'m'"
                       " FROM " +
                           t + " WHERE outbox_id = $1",
                       {id});
        ASSERT_EQ(row.size(), 1U) << s;
        EXPECT_EQ(row[0][0], s);
        EXPECT_EQ(row[0][1], s);
        EXPECT_EQ(row[0][2], s);
        EXPECT_EQ(row[0][3], s + std::to_string(i));
        EXPECT_EQ(row[0][4], s);
        EXPECT_EQ(row[0][5], s);
        // aggregate_type is a name: refused, not stored.
        EXPECT_EQ(outbox_event_set(ev, "aggregate_type", s.c_str()), OUTBOX_OK);
        EXPECT_EQ(outbox_write(d, ev), OUTBOX_ERR_INVALID_EVENT) << s;
        outbox_event_free(ev);

        // Dedupe: the consumer name and the aggregate are data too.
        outbox_dedupe_result r;
        outbox_dedupe_result_init(&r);
        ASSERT_EQ(outbox_db_exec(d, "BEGIN"), OUTBOX_OK);
        ASSERT_EQ(outbox_consumer_dedupe(&r, d, s.c_str(), id.c_str(), s.c_str(), s.c_str(), 1), OUTBOX_OK)
            << outbox_last_error();
        ASSERT_EQ(outbox_db_exec(d, "COMMIT"), OUTBOX_OK);
        EXPECT_EQ(r.first_time, 1);
        EXPECT_EQ(scalar(pg_url(), "SELECT consumer FROM \"" + schema + "\".outbox_inbox WHERE outbox_id = $1", {id}),
                  s);
        // Operator filters.
        int64_t n = -1;
        EXPECT_EQ(outbox_retry_failed(&n, d, s.c_str(), nullptr, 0), OUTBOX_OK) << outbox_last_error();
        EXPECT_EQ(n, 0);
        ++i;
    }
    EXPECT_EQ(scalar(pg_url(), "SELECT count(*) FROM " + t), std::to_string(kInjections.size()));

    // AMQP names are length-prefixed bytes on the wire, never parsed: printable injection strings
    // are valid names and round-trip through the broker.
    const std::string exchange = "sec'\"$1\\; DROP " + tag;
    const std::string queue = "q'; DROP TABLE x; -- " + tag;
    set("amqp.exchange", exchange);
    set("consumer.queue", queue);
    set("pg.url", pg_url());
    outbox_consumer *c = nullptr;
    ASSERT_EQ(outbox_consumer_new(&c, cfg, ("c\"'" + tag).c_str()), OUTBOX_OK) << outbox_last_error();
    ASSERT_EQ(outbox_consumer_connect(c), OUTBOX_OK) << outbox_last_error();
    outbox_relay *relay = nullptr;
    ASSERT_EQ(outbox_relay_new(&relay, cfg), OUTBOX_OK);
    outbox_relay_stats st;
    outbox_relay_stats_init(&st);
    ASSERT_EQ(outbox_relay_step(relay, &st), OUTBOX_OK) << outbox_last_error();
    EXPECT_EQ(st.published, static_cast<int64_t>(kInjections.size()));
    outbox_relay_free(relay);
    std::vector<std::string> got;
    for (size_t k = 0; k < kInjections.size(); ++k) {
        outbox_message *m = nullptr;
        ASSERT_EQ(outbox_consumer_next(&m, c, 10000), OUTBOX_OK) << outbox_last_error();
        got.emplace_back(outbox_message_field(m, "AGGREGATE_ID"));
        EXPECT_STREQ(outbox_message_property(m, "exchange"), exchange.c_str());
        EXPECT_EQ(outbox_consumer_ack(c, m), OUTBOX_OK);
        outbox_message_free(m);
    }
    std::sort(got.begin(), got.end());
    auto want = kInjections;
    std::sort(want.begin(), want.end());
    EXPECT_EQ(got, want) << "every aggregate id arrived byte for byte";
    // Replay by an injection-string aggregate: its one event.
    int64_t n = 0;
    EXPECT_EQ(outbox_replay(&n, d, cfg, "PRD", kInjections[0].c_str(), 0), OUTBOX_OK) << outbox_last_error();
    EXPECT_EQ(n, 1);
    outbox_consumer_free(c);
    outbox_db_close(d);

    EXPECT_EQ(scalar(pg_url(), "SELECT v FROM \"" + schema + "\".x"), "kept") << "the injections' target survived";
    EXPECT_EQ(
        scalar(pg_url(),
               "SELECT count(*) FROM pg_tables t JOIN pg_class c ON c.oid = CAST(quote_ident(t.schemaname) || '.' ||"
               " quote_ident(t.tablename) AS regclass) WHERE t.schemaname = $1 AND NOT c.relispartition",
               {schema}),
        "17")
        << "outbox events, its relay, receipts, parked, keys and version-1 tables, aggregates, inbox (and its "
           "version-1 table), positions, members, partitionings, held, held events, skipped, migrations and x: "
           "nothing created or dropped";
}

} // namespace
