// outbox_write through the public C ABI against a real PostgreSQL.
#include "fixture.hpp"

#include <functional>
#include <future>
#include <set>
#include <thread>

using namespace outbox_test;
using namespace std::chrono_literals;

TEST_F(PgTest, CommitPersistsExactlyOneRowWithEveryColumn) {
    outbox_event *ev = make_event("123", "PATCH", R"({"PRD_ID":"123", "XPRD02": 89.99,"TREC":"M"})");
    ASSERT_EQ(outbox_event_set(ev, "previous_payload", R"({"XPRD02":99.99})"), OUTBOX_OK);
    ASSERT_EQ(outbox_event_set(ev, "metadata", R"({"source":"productManagement","centro_dett":"admin"})"), OUTBOX_OK);
    ASSERT_EQ(outbox_event_set(ev, "user", "admin@example.com"), OUTBOX_OK);
    ASSERT_EQ(outbox_event_set(ev, "idempotency_key", "req-42"), OUTBOX_OK);
    ASSERT_EQ(outbox_db_exec(db, "BEGIN"), OUTBOX_OK);
    ASSERT_EQ(outbox_write(db, ev), OUTBOX_OK) << outbox_last_error();
    ASSERT_EQ(outbox_db_tx_state(db), OUTBOX_TX_INTRANS);
    EXPECT_EQ(count(), 0) << "visible before commit";
    ASSERT_EQ(outbox_db_exec(db, "COMMIT"), OUTBOX_OK);

    std::string id = outbox_event_id(ev);
    EXPECT_EQ(std::string(outbox_event_type(ev)), "ProductUpdated");
    EXPECT_EQ(outbox_event_seq(ev), 1);
    auto rows = admin.query("SELECT outbox_id, event_type, aggregate_type, aggregate_id, seq, operation, payload, "
                            "previous_payload, metadata, actor, status, retry_count, error_message, published_at, "
                            "idempotency_key, created_at <= now(), next_attempt_at <= now() FROM " +
                            table);
    ASSERT_EQ(rows.size(), 1U);
    const auto &r = rows[0];
    EXPECT_EQ(r[0], id);
    EXPECT_EQ(r[1], "ProductUpdated");
    EXPECT_EQ(r[2], "PRD");
    EXPECT_EQ(r[3], "123");
    EXPECT_EQ(r[4], "1");
    EXPECT_EQ(r[5], "PATCH");
    EXPECT_EQ(r[6], R"({"PRD_ID":"123", "XPRD02": 89.99,"TREC":"M"})") << "payload stored verbatim";
    EXPECT_EQ(r[7], R"({"XPRD02":99.99})");
    EXPECT_EQ(r[8], R"({"source":"productManagement","centro_dett":"admin"})");
    EXPECT_EQ(r[9], "admin@example.com");
    EXPECT_EQ(r[10], "PENDING");
    EXPECT_EQ(r[11], "0");
    EXPECT_EQ(r[12], "<null>");
    EXPECT_EQ(r[13], "<null>");
    EXPECT_EQ(r[14], "req-42");
    EXPECT_EQ(r[15], "t");
    EXPECT_EQ(r[16], "t");
    EXPECT_EQ(id[14], '7') << "UUIDv7 by default: " << id;
    outbox_event_free(ev);
}

TEST_F(PgTest, RollbackLeavesNoRow) {
    outbox_event *ev = make_event();
    ASSERT_EQ(outbox_db_exec(db, "BEGIN"), OUTBOX_OK);
    ASSERT_EQ(outbox_write(db, ev), OUTBOX_OK) << outbox_last_error();
    ASSERT_EQ(outbox_db_exec(db, "ROLLBACK"), OUTBOX_OK);
    EXPECT_EQ(count(), 0);
    // The sequence counter rolled back too: the next event of the aggregate is number 1 (no gap).
    ASSERT_EQ(outbox_write(db, ev), OUTBOX_OK);
    EXPECT_EQ(outbox_event_seq(ev), 1);
    outbox_event_free(ev);
}

TEST_F(PgTest, BusinessRowAndEventAreAtomic) {
    admin.query("CREATE TABLE \"" + schema + "\".products (prd_id text PRIMARY KEY, name text NOT NULL)");
    auto *pg = static_cast<PGconn *>(outbox_db_pgconn(db));
    const std::string insert = "INSERT INTO \"" + schema + "\".products VALUES ($1, $2)";
    auto run = [&](const char *id) {
        const char *vals[] = {id, "Widget"};
        PGresult *r = PQexecParams(pg, insert.c_str(), 2, nullptr, vals, nullptr, nullptr, 0);
        ExecStatusType st = PQresultStatus(r);
        PQclear(r);
        return st == PGRES_COMMAND_OK;
    };
    // Success: both persist.
    outbox_event *ev = make_event("p1");
    ASSERT_EQ(outbox_db_exec(db, "BEGIN"), OUTBOX_OK);
    ASSERT_TRUE(run("p1"));
    ASSERT_EQ(outbox_write(db, ev), OUTBOX_OK);
    ASSERT_EQ(outbox_db_exec(db, "COMMIT"), OUTBOX_OK);
    // A failure after outbox_write (duplicate business key) rolls back the event with it.
    outbox_event *ev2 = make_event("p1-again");
    ASSERT_EQ(outbox_db_exec(db, "BEGIN"), OUTBOX_OK);
    ASSERT_TRUE(run("p2"));
    ASSERT_EQ(outbox_write(db, ev2), OUTBOX_OK);
    ASSERT_FALSE(run("p1")) << "duplicate product must fail";
    ASSERT_EQ(outbox_db_tx_state(db), OUTBOX_TX_INERROR);
    ASSERT_EQ(outbox_db_exec(db, "ROLLBACK"), OUTBOX_OK);
    EXPECT_EQ(admin.scalar("SELECT string_agg(prd_id, ',') FROM \"" + schema + "\".products"), "p1");
    EXPECT_EQ(count(), 1);
    EXPECT_EQ(count("aggregate_id = 'p1-again'"), 0);
    outbox_event_free(ev);
    outbox_event_free(ev2);
}

TEST_F(PgTest, LentConnectionStaysOpenAndOwnedByCaller) {
    PGconn *mine = PQconnectdb(pg_url().c_str());
    ASSERT_EQ(PQstatus(mine), CONNECTION_OK);
    outbox_db *lent = nullptr;
    ASSERT_EQ(outbox_db_wrap(&lent, mine, cfg), OUTBOX_OK) << outbox_last_error();
    EXPECT_EQ(outbox_db_pgconn(lent), mine);
    PQclear(PQexec(mine, "BEGIN"));
    outbox_event *ev = make_event("lent");
    ASSERT_EQ(outbox_write(lent, ev), OUTBOX_OK) << outbox_last_error();
    EXPECT_EQ(PQtransactionStatus(mine), PQTRANS_INTRANS) << "library must not commit a lent connection";
    outbox_db_close(lent);
    // Still open, still in the caller's transaction, which the caller commits.
    ASSERT_EQ(PQstatus(mine), CONNECTION_OK);
    ASSERT_EQ(PQtransactionStatus(mine), PQTRANS_INTRANS);
    EXPECT_EQ(count(), 0);
    PGresult *r = PQexec(mine, "COMMIT");
    EXPECT_EQ(PQresultStatus(r), PGRES_COMMAND_OK);
    PQclear(r);
    EXPECT_EQ(count(), 1);
    PQfinish(mine);
    outbox_event_free(ev);
}

TEST_F(PgTest, FourThreadsThousandWritesEachNoLossNoDuplicates) {
    constexpr int threads = 4;
    constexpr int per_thread = 1000;
    std::vector<std::future<std::vector<std::string>>> futures;
    for (int t = 0; t < threads; ++t) {
        futures.push_back(std::async(std::launch::async, [&, t] {
            std::vector<std::string> ids;
            outbox_db *mine = nullptr;
            if (outbox_db_open(&mine, pg_url().c_str(), cfg) != OUTBOX_OK) {
                ADD_FAILURE() << outbox_last_error();
                return ids;
            }
            outbox_event *ev = make_event();
            for (int i = 0; i < per_thread; ++i) {
                // Ten shared hot aggregates plus per-thread ones: contention on the counters.
                std::string agg = (i % 2 == 0) ? "hot-" + std::to_string(i % 10) : "t" + std::to_string(t);
                outbox_event_set(ev, "aggregate_id", agg.c_str());
                bool tx = (i % 3 == 0);
                if (tx) {
                    outbox_db_exec(mine, "BEGIN");
                }
                if (outbox_write(mine, ev) != OUTBOX_OK) {
                    ADD_FAILURE() << outbox_last_error();
                    break;
                }
                if (tx) {
                    outbox_db_exec(mine, "COMMIT");
                }
                ids.emplace_back(outbox_event_id(ev));
            }
            outbox_event_free(ev);
            outbox_db_close(mine);
            return ids;
        }));
    }
    std::set<std::string> all;
    size_t total = 0;
    for (auto &f : futures) {
        auto ids = f.get();
        total += ids.size();
        all.insert(ids.begin(), ids.end());
    }
    EXPECT_EQ(total, size_t(threads * per_thread));
    EXPECT_EQ(all.size(), total) << "ids must be unique";
    EXPECT_EQ(count(), threads * per_thread);
    // Per aggregate, sequence numbers are exactly 1..n: no gap, no duplicate.
    auto bad = admin.query("SELECT aggregate_id, count(*), min(seq), max(seq), count(DISTINCT seq) FROM " + table +
                           " GROUP BY aggregate_id HAVING min(seq) <> 1 OR max(seq) <> count(*)"
                           " OR count(DISTINCT seq) <> count(*)");
    EXPECT_TRUE(bad.empty()) << "aggregate " << (bad.empty() ? "" : bad[0][0]) << " has gaps or duplicates";
}

// Two transactions write events for one aggregate; sequence order must equal commit order.
TEST_F(PgTest, SequenceFollowsCommitOrderNotInsertOrder) {
    admin.query("CREATE TABLE \"" + schema + "\".orders (id text PRIMARY KEY)");
    outbox_db *db2 = nullptr;
    ASSERT_EQ(outbox_db_open(&db2, pg_url().c_str(), cfg), OUTBOX_OK);
    auto *pg1 = static_cast<PGconn *>(outbox_db_pgconn(db));
    // T1 starts first and inserts its business row first...
    ASSERT_EQ(outbox_db_exec(db, "BEGIN"), OUTBOX_OK);
    PQclear(PQexec(pg1, ("INSERT INTO \"" + schema + "\".orders VALUES ('o1')").c_str()));
    // ...T2 starts later but writes its event for aggregate A first...
    ASSERT_EQ(outbox_db_exec(db2, "BEGIN"), OUTBOX_OK);
    outbox_event *e2 = make_event("A");
    ASSERT_EQ(outbox_write(db2, e2), OUTBOX_OK);
    // ...T1 writes its event for A now: it must wait, because T2 may still commit first.
    outbox_event *e1 = make_event("A");
    auto t1_write = std::async(std::launch::async, [&] { return outbox_write(db, e1); });
    EXPECT_EQ(t1_write.wait_for(500ms), std::future_status::timeout) << "T1 should wait for T2's commit";
    // T2 commits first and so is number 1; T1 then gets number 2 and commits second.
    ASSERT_EQ(outbox_db_exec(db2, "COMMIT"), OUTBOX_OK);
    ASSERT_EQ(t1_write.get(), OUTBOX_OK) << outbox_last_error();
    ASSERT_EQ(outbox_db_exec(db, "COMMIT"), OUTBOX_OK);
    EXPECT_EQ(outbox_event_seq(e2), 1);
    EXPECT_EQ(outbox_event_seq(e1), 2);
    auto order = admin.query("SELECT outbox_id FROM " + table + " WHERE aggregate_id = 'A' ORDER BY seq");
    ASSERT_EQ(order.size(), 2U);
    EXPECT_EQ(order[0][0], outbox_event_id(e2));
    EXPECT_EQ(order[1][0], outbox_event_id(e1));

    // And when the first writer rolls back, the waiting one takes its number: no gap.
    ASSERT_EQ(outbox_db_exec(db2, "BEGIN"), OUTBOX_OK);
    ASSERT_EQ(outbox_write(db2, e2), OUTBOX_OK);
    EXPECT_EQ(outbox_event_seq(e2), 3);
    ASSERT_EQ(outbox_db_exec(db, "BEGIN"), OUTBOX_OK);
    auto waiting = std::async(std::launch::async, [&] { return outbox_write(db, e1); });
    EXPECT_EQ(waiting.wait_for(300ms), std::future_status::timeout);
    ASSERT_EQ(outbox_db_exec(db2, "ROLLBACK"), OUTBOX_OK);
    ASSERT_EQ(waiting.get(), OUTBOX_OK);
    ASSERT_EQ(outbox_db_exec(db, "COMMIT"), OUTBOX_OK);
    EXPECT_EQ(outbox_event_seq(e1), 3);
    EXPECT_EQ(admin.scalar("SELECT string_agg(seq::text, ',' ORDER BY seq) FROM " + table), "1,2,3");
    outbox_event_free(e1);
    outbox_event_free(e2);
    outbox_db_close(db2);
}

TEST_F(PgTest, RenderedStatementThroughPlainLibpqGivesTheSameRow) {
    outbox_event *ev = make_event("r1", "DELETE", R"({"PRD_ID":"r1"})");
    ASSERT_EQ(outbox_event_set(ev, "force_delete", "true"), OUTBOX_OK);
    ASSERT_EQ(outbox_event_set(ev, "metadata", R"({"source":"render"})"), OUTBOX_OK);
    ASSERT_EQ(outbox_event_set(ev, "user", "o'brien@example.com"), OUTBOX_OK);
    outbox_statement *st = nullptr;
    ASSERT_EQ(outbox_render_write(&st, cfg, ev), OUTBOX_OK) << outbox_last_error();
    std::vector<const char *> vals;
    for (size_t i = 0; i < outbox_statement_param_count(st); ++i) {
        vals.push_back(outbox_statement_param(st, i));
    }
    // The caller's own driver, inside the caller's own transaction.
    PGconn *mine = PQconnectdb(pg_url().c_str());
    PQclear(PQexec(mine, "BEGIN"));
    PGresult *r = PQexecParams(mine, outbox_statement_sql(st), static_cast<int>(vals.size()), nullptr, vals.data(),
                               nullptr, nullptr, 0);
    ASSERT_EQ(PQresultStatus(r), PGRES_TUPLES_OK) << PQerrorMessage(mine);
    EXPECT_STREQ(PQgetvalue(r, 0, 0), "1"); // returns the sequence number
    PQclear(r);
    PQclear(PQexec(mine, "COMMIT"));
    PQfinish(mine);

    // The same event through outbox_write (a new id, same aggregate) must produce an equal row.
    outbox_event *ev2 = make_event("r1", "DELETE", R"({"PRD_ID":"r1"})");
    outbox_event_set(ev2, "force_delete", "true");
    outbox_event_set(ev2, "metadata", R"({"source":"render"})");
    outbox_event_set(ev2, "user", "o'brien@example.com");
    ASSERT_EQ(outbox_write(db, ev2), OUTBOX_OK);
    auto rows = admin.query("SELECT outbox_id, event_type, aggregate_type, aggregate_id, operation, payload::text, "
                            "previous_payload::text, metadata::text, actor, status, retry_count, seq FROM " +
                            table + " ORDER BY seq");
    ASSERT_EQ(rows.size(), 2U);
    EXPECT_EQ(rows[0][0], outbox_event_id(ev));
    EXPECT_EQ(rows[0][1], "ProductForceDeleted");
    EXPECT_EQ(rows[0][4], "DELETE");
    EXPECT_EQ(rows[0][8], "o'brien@example.com");
    for (size_t c = 1; c < 11; ++c) {
        EXPECT_EQ(rows[0][c], rows[1][c]) << "column " << c;
    }
    EXPECT_EQ(rows[1][11], "2");

    char *json = nullptr;
    ASSERT_EQ(outbox_statement_json(&json, st), OUTBOX_OK);
    EXPECT_NE(std::string(json).find("\"params\":[\"PRD\",\"r1\""), std::string::npos) << json;
    outbox_string_free(json);
    outbox_statement_free(st);
    outbox_event_free(ev);
    outbox_event_free(ev2);
}

TEST_F(PgTest, MigrateTwiceIsANoOp) {
    auto before = admin.scalar("SELECT applied_at FROM \"" + schema + "\".outbox_migrations WHERE target = $1",
                               {schema + ".outbox"});
    int version = 0;
    ASSERT_EQ(outbox_migrate(&version, db, OUTBOX_MIGRATE_ALL), OUTBOX_OK) << outbox_last_error();
    EXPECT_EQ(version, 2);
    EXPECT_EQ(admin.scalar("SELECT applied_at FROM \"" + schema + "\".outbox_migrations WHERE target = $1",
                           {schema + ".outbox"}),
              before);
    EXPECT_EQ(admin.scalar("SELECT count(*) FROM \"" + schema + "\".outbox_migrations"), "2");
    // And inside a caller's transaction it joins it.
    ASSERT_EQ(outbox_db_exec(db, "BEGIN"), OUTBOX_OK);
    ASSERT_EQ(outbox_migrate(&version, db, OUTBOX_MIGRATE_INBOX), OUTBOX_OK);
    EXPECT_EQ(outbox_db_tx_state(db), OUTBOX_TX_INTRANS);
    ASSERT_EQ(outbox_db_exec(db, "COMMIT"), OUTBOX_OK);
}

TEST_F(PgTest, NewerSchemaThanLibraryIsRefused) {
    admin.query("UPDATE \"" + schema + "\".outbox_migrations SET version = 99 WHERE component = 'outbox'");
    EXPECT_EQ(outbox_migrate(nullptr, db, OUTBOX_MIGRATE_OUTBOX), OUTBOX_ERR_SCHEMA);
    EXPECT_NE(std::string(outbox_last_error()).find("newer"), std::string::npos) << outbox_last_error();
    EXPECT_EQ(outbox_db_tx_state(db), OUTBOX_TX_IDLE) << "failed migration must roll back its own transaction";
}
