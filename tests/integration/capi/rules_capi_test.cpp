// The shared rules of the public C ABI (rules-c.cpp): what the bindings read instead of keeping
// copies. Each is checked against what the library itself does on the real PostgreSQL.
#include "fixture.hpp"

#include <cstdlib>
#include <set>

using namespace outbox_test;

namespace {

class RulesCapiTest : public PgTest {};

TEST(RulesCapi, EventFieldsAreTheOnesEventSetTakesInTheirOrder) {
    const std::vector<std::string> expected = {"aggregate_type",   "aggregate_id", "operation",   "payload",
                                               "previous_payload", "metadata",     "user",        "event_type",
                                               "idempotency_key",  "event_id",     "force_delete"};
    std::vector<std::string> names;
    const char *name = nullptr;
    outbox_field_kind kind = OUTBOX_FIELD_TEXT;
    for (size_t i = 0; outbox_event_field(&name, &kind, i) == OUTBOX_OK; ++i) {
        names.emplace_back(name);
        const std::string n = name;
        const outbox_field_kind want = n == "payload" || n == "previous_payload" || n == "metadata" ? OUTBOX_FIELD_JSON
                                       : n == "force_delete"                                        ? OUTBOX_FIELD_FLAG
                                                                                                    : OUTBOX_FIELD_TEXT;
        EXPECT_EQ(kind, want) << n;
        // Every listed field is one outbox_event_set() knows.
        outbox_event *ev = nullptr;
        ASSERT_EQ(outbox_event_new(&ev), OUTBOX_OK);
        const char *value = kind == OUTBOX_FIELD_JSON ? "{}" : kind == OUTBOX_FIELD_FLAG ? "false" : "x";
        const outbox_status st = outbox_event_set(ev, name, value);
        EXPECT_NE(st, OUTBOX_ERR_UNKNOWN_KEY) << n << ": " << outbox_last_error();
        outbox_event_free(ev);
    }
    EXPECT_EQ(names, expected);
    EXPECT_EQ(outbox_last_status(), OUTBOX_ERR_NOT_FOUND);
}

TEST_F(RulesCapiTest, PlaceholderStylesRenameEveryParameterOnce) {
    outbox_event *ev = make_event("1");
    struct Want {
        const char *style;
        const char *first;
        bool named;
    };
    for (const Want &w : {Want{"dollar", "$1", false}, Want{"qmark", "?", false}, Want{"format", "%s", false},
                          Want{"named", ":p1", true}, Want{"pyformat", "%(p1)s", true}}) {
        ASSERT_EQ(outbox_config_set(cfg, "render.placeholders", w.style), OUTBOX_OK) << w.style;
        outbox_statement *st = nullptr;
        ASSERT_EQ(outbox_render_write(&st, cfg, ev), OUTBOX_OK) << outbox_last_error();
        const std::string sql = outbox_statement_sql(st);
        EXPECT_NE(sql.find(w.first), std::string::npos) << w.style << ": " << sql;
        if (std::string(w.style) != "dollar") {
            EXPECT_EQ(sql.find('$'), std::string::npos) << w.style << ": " << sql;
        }
        const size_t n = outbox_statement_param_count(st);
        EXPECT_EQ(n, 11U);
        for (size_t i = 0; i < n; ++i) {
            const char *pn = outbox_statement_param_name(st, i);
            if (w.named) {
                ASSERT_NE(pn, nullptr);
                EXPECT_EQ(std::string(pn), "p" + std::to_string(i + 1));
            } else {
                EXPECT_EQ(pn, nullptr);
            }
        }
        char *json = nullptr;
        ASSERT_EQ(outbox_statement_json(&json, st), OUTBOX_OK);
        EXPECT_EQ(std::string(json).find("\"names\":[\"p1\",") != std::string::npos, w.named) << json;
        outbox_string_free(json);
        outbox_statement_free(st);
    }
    EXPECT_EQ(outbox_config_set(cfg, "render.placeholders", "numeric"), OUTBOX_ERR_INVALID_ARGUMENT);
    outbox_event_free(ev);
}

TEST_F(RulesCapiTest, IdempotencyIndexAndSqlstateAreWhatTheServerReports) {
    // The index the migration made carries the name the C API gives.
    char *index = nullptr;
    ASSERT_EQ(outbox_idempotency_index(&index, cfg), OUTBOX_OK);
    auto rows =
        admin.query("SELECT count(*) FROM pg_indexes WHERE schemaname = $1 AND indexname = $2", {schema, index});
    EXPECT_EQ(rows[0][0], "1") << index;
    // A reused key, run by the caller's own libpq: the server names that index, and the status for
    // its SQLSTATE is the one outbox_write gives.
    outbox_event *ev = make_event("7");
    ASSERT_EQ(outbox_event_set(ev, "idempotency_key", "k-7"), OUTBOX_OK);
    ASSERT_EQ(outbox_write(db, ev), OUTBOX_OK) << outbox_last_error();
    EXPECT_EQ(outbox_write(db, ev), OUTBOX_ERR_DUPLICATE);
    outbox_statement *st = nullptr;
    ASSERT_EQ(outbox_render_write(&st, cfg, ev), OUTBOX_OK);
    std::vector<const char *> params;
    for (size_t i = 0; i < outbox_statement_param_count(st); ++i) {
        params.push_back(outbox_statement_param(st, i));
    }
    PGresult *r = PQexecParams(admin.get(), outbox_statement_sql(st), static_cast<int>(params.size()), nullptr,
                               params.data(), nullptr, nullptr, 0);
    ASSERT_EQ(PQresultStatus(r), PGRES_FATAL_ERROR);
    const char *sqlstate = PQresultErrorField(r, PG_DIAG_SQLSTATE);
    const char *constraint = PQresultErrorField(r, PG_DIAG_CONSTRAINT_NAME);
    ASSERT_NE(sqlstate, nullptr);
    ASSERT_NE(constraint, nullptr);
    EXPECT_STREQ(constraint, index);
    EXPECT_EQ(outbox_status_for_sqlstate(sqlstate), OUTBOX_ERR_DUPLICATE);
    PQclear(r);
    // A missing table is SCHEMA, a broken connection CONNECTION, as the library's own calls say.
    r = PQexec(admin.get(), "SELECT * FROM no_such_table_here");
    EXPECT_EQ(outbox_status_for_sqlstate(PQresultErrorField(r, PG_DIAG_SQLSTATE)), OUTBOX_ERR_SCHEMA);
    PQclear(r);
    EXPECT_EQ(outbox_status_for_sqlstate("08006"), OUTBOX_ERR_CONNECTION);
    EXPECT_EQ(outbox_status_for_sqlstate("25P02"), OUTBOX_ERR_TRANSACTION);
    EXPECT_EQ(outbox_status_for_sqlstate("57014"), OUTBOX_ERR_TIMEOUT);
    EXPECT_EQ(outbox_status_for_sqlstate("22P02"), OUTBOX_ERR_DATABASE);
    outbox_statement_free(st);
    outbox_event_free(ev);
    outbox_string_free(index);
}

TEST(RulesCapi, ConfigFromEnvFillsOrOverridesTheUrls) {
    const char *saved_pg = std::getenv("OUTBOX_PG_URL");
    const std::string keep_pg = saved_pg != nullptr ? saved_pg : "";
    const char *saved_amqp = std::getenv("OUTBOX_AMQP_URL");
    const std::string keep_amqp = saved_amqp != nullptr ? saved_amqp : "";
    setenv("OUTBOX_PG_URL", "postgresql://envuser:envpw@envhost/db", 1);
    setenv("OUTBOX_AMQP_URL", "", 1); // empty: ignored
    outbox_config *cfg = nullptr;
    ASSERT_EQ(outbox_config_new(&cfg), OUTBOX_OK);
    ASSERT_EQ(outbox_config_set(cfg, "amqp.url", "amqp://mine/"), OUTBOX_OK);
    ASSERT_EQ(outbox_config_from_env(cfg, 0), OUTBOX_OK);
    // The value is a secret: it reads back as ***, where an unset one reads back empty.
    char *v = nullptr;
    ASSERT_EQ(outbox_config_get(&v, cfg, "pg.url"), OUTBOX_OK);
    EXPECT_STREQ(v, "***") << "filled from OUTBOX_PG_URL";
    outbox_string_free(v);
    outbox_config *empty = nullptr;
    ASSERT_EQ(outbox_config_new(&empty), OUTBOX_OK);
    ASSERT_EQ(outbox_config_get(&v, empty, "amqp.url"), OUTBOX_OK);
    EXPECT_STREQ(v, "") << "no amqp.url when OUTBOX_AMQP_URL is empty";
    outbox_string_free(v);
    ASSERT_EQ(outbox_config_from_env(empty, 0), OUTBOX_OK);
    ASSERT_EQ(outbox_config_get(&v, empty, "amqp.url"), OUTBOX_OK);
    EXPECT_STREQ(v, "") << "an empty OUTBOX_AMQP_URL sets nothing";
    outbox_string_free(v);
    // overwrite=0 keeps a configured URL, overwrite=1 replaces it: the relay refuses neither, so
    // tell them apart by where a database connection goes.
    setenv("OUTBOX_PG_URL", pg_url().c_str(), 1);
    ASSERT_EQ(outbox_config_set(empty, "pg.url", "postgresql://nobody@127.0.0.1:1/none"), OUTBOX_OK);
    ASSERT_EQ(outbox_config_from_env(empty, 0), OUTBOX_OK);
    outbox_relay *relay = nullptr;
    ASSERT_EQ(outbox_config_set(empty, "amqp.url", "amqp://127.0.0.1:1/"), OUTBOX_OK);
    ASSERT_EQ(outbox_relay_new(&relay, empty), OUTBOX_OK);
    outbox_relay_stats stats;
    outbox_relay_stats_init(&stats);
    EXPECT_EQ(outbox_relay_step(relay, &stats), OUTBOX_ERR_CONNECTION) << "kept the configured (dead) pg.url";
    EXPECT_NE(std::string(outbox_last_error()).find("127.0.0.1"), std::string::npos) << outbox_last_error();
    outbox_relay_free(relay);
    outbox_config_free(empty);
    outbox_config_free(cfg);
    setenv("OUTBOX_PG_URL", keep_pg.c_str(), 1);
    setenv("OUTBOX_AMQP_URL", keep_amqp.c_str(), 1);
}

} // namespace
