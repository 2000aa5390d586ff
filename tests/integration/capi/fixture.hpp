// Shared fixture for the C ABI integration tests: a fresh schema per test on the real
// PostgreSQL (OUTBOX_PG_URL), migrated through the ABI, dropped afterwards.
#pragma once

#include "test_env.hpp"

#include <libpq-fe.h>
#include <outbox.h>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <random>
#include <string>
#include <vector>

namespace outbox_test {

// A plain libpq connection for checking what the library did; aborts the test on failure.
class RawConn {
  public:
    RawConn() : c_(PQconnectdb(pg_url().c_str())) {
        if (PQstatus(c_) != CONNECTION_OK) {
            ADD_FAILURE() << "cannot reach PostgreSQL at OUTBOX_PG_URL: " << PQerrorMessage(c_);
        }
    }
    ~RawConn() { PQfinish(c_); }
    RawConn(const RawConn &) = delete;
    RawConn &operator=(const RawConn &) = delete;
    PGconn *get() const { return c_; }
    bool ok() const { return PQstatus(c_) == CONNECTION_OK; }

    // Runs SQL, returns all rows as text (NULL as "<null>"); fails the test on error.
    std::vector<std::vector<std::string>> query(const std::string &sql, const std::vector<std::string> &params = {}) {
        std::vector<const char *> vals;
        for (const auto &p : params) {
            vals.push_back(p.c_str());
        }
        PGresult *r = PQexecParams(c_, sql.c_str(), static_cast<int>(vals.size()), nullptr, vals.data(), nullptr,
                                   nullptr, 0);
        std::vector<std::vector<std::string>> rows;
        auto st = PQresultStatus(r);
        if (st != PGRES_TUPLES_OK && st != PGRES_COMMAND_OK) {
            ADD_FAILURE() << "query failed: " << sql << ": " << PQerrorMessage(c_);
        } else {
            for (int i = 0; i < PQntuples(r); ++i) {
                std::vector<std::string> row;
                for (int j = 0; j < PQnfields(r); ++j) {
                    row.emplace_back(PQgetisnull(r, i, j) ? "<null>" : PQgetvalue(r, i, j));
                }
                rows.push_back(std::move(row));
            }
        }
        PQclear(r);
        return rows;
    }
    std::string scalar(const std::string &sql, const std::vector<std::string> &params = {}) {
        auto rows = query(sql, params);
        return rows.empty() || rows[0].empty() ? std::string("<none>") : rows[0][0];
    }

  private:
    PGconn *c_;
};

inline std::string unique_name(const char *prefix) {
    static std::atomic<int> n{0};
    std::random_device rd;
    return std::string(prefix) + std::to_string(rd() % 1000000) + "_" + std::to_string(n++);
}

class PgTest : public ::testing::Test {
  protected:
    void SetUp() override {
        ASSERT_TRUE(admin.ok()) << "PostgreSQL must be running (scripts/services.sh up)";
        schema = unique_name("t_");
        ASSERT_EQ(outbox_config_new(&cfg), OUTBOX_OK);
        ASSERT_EQ(outbox_config_set(cfg, "outbox.schema", schema.c_str()), OUTBOX_OK);
        ASSERT_EQ(outbox_config_set(cfg, "event.type_map", "PRD=Product,ORD=Order"), OUTBOX_OK);
        ASSERT_EQ(outbox_db_open(&db, pg_url().c_str(), cfg), OUTBOX_OK) << outbox_last_error();
        int version = 0;
        ASSERT_EQ(outbox_migrate(&version, db, OUTBOX_MIGRATE_ALL), OUTBOX_OK) << outbox_last_error();
        ASSERT_EQ(version, 2);
        table = "\"" + schema + "\".\"outbox\"";
    }
    void TearDown() override {
        outbox_db_close(db);
        outbox_config_free(cfg);
        if (admin.ok()) {
            admin.query("DROP SCHEMA IF EXISTS \"" + schema + "\" CASCADE");
        }
    }

    // A valid event builder; caller frees.
    outbox_event *make_event(const std::string &agg_id = "123", const char *op = "POST",
                             const std::string &payload = R"({"PRD_ID":"123","XPRD01":"Widget Pro","XPRD02":99.99})") {
        outbox_event *ev = nullptr;
        EXPECT_EQ(outbox_event_new(&ev), OUTBOX_OK);
        EXPECT_EQ(outbox_event_set(ev, "aggregate_type", "PRD"), OUTBOX_OK);
        EXPECT_EQ(outbox_event_set(ev, "aggregate_id", agg_id.c_str()), OUTBOX_OK);
        EXPECT_EQ(outbox_event_set(ev, "operation", op), OUTBOX_OK);
        EXPECT_EQ(outbox_event_set(ev, "payload", payload.c_str()), OUTBOX_OK);
        return ev;
    }

    long count(const std::string &where = "true") {
        return std::stol(admin.scalar("SELECT count(*) FROM " + table + " WHERE " + where));
    }

    RawConn admin;
    std::string schema;
    std::string table;
    outbox_config *cfg = nullptr;
    outbox_db *db = nullptr;
};

} // namespace outbox_test
