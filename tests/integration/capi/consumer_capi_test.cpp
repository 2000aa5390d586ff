// The consumer side of the public C ABI against real PostgreSQL and RabbitMQ: dedupe with order
// reports and its transactional semantics on a lent connection, the rendered dedupe statement,
// inbox retention purges, and the consumer (next / fields / properties / nack / ack / run / stop).
#include "fixture.hpp"
#include "test_shell.hpp"
#include "waits.hpp"

#include <sys/wait.h>

#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <sstream>
#include <thread>

using namespace outbox_test;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

namespace {

std::string new_uuid() {
    static std::mt19937_64 rng{std::random_device{}()};
    static const char *hex = "0123456789abcdef";
    std::string s;
    for (int i = 0; i < 32; ++i) {
        unsigned v = static_cast<unsigned>(rng() & 15);
        if (i == 12) {
            v = 4;
        } else if (i == 16) {
            v = 8 | (v & 3);
        }
        s += hex[v];
        if (i == 7 || i == 11 || i == 15 || i == 19) {
            s += '-';
        }
    }
    return s;
}

// The vhost of OUTBOX_AMQP_URL ("/" when the URL names none or %2f).
std::string amqp_vhost() {
    const std::string url = amqp_url();
    const auto scheme = url.find("://");
    const auto slash = url.find('/', scheme == std::string::npos ? 0 : scheme + 3);
    if (slash == std::string::npos || slash + 1 >= url.size()) {
        return "/";
    }
    std::string v = url.substr(slash + 1);
    v = v.substr(0, v.find('?'));
    if (v.empty()) {
        return "/";
    }
    std::string out;
    for (size_t i = 0; i < v.size(); ++i) {
        if (v[i] == '%' && i + 2 < v.size()) {
            out += static_cast<char>(std::stoi(v.substr(i + 1, 2), nullptr, 16));
            i += 2;
        } else {
            out += v[i];
        }
    }
    return out;
}

// This executable links only liboutbox and libpq, so what the consumers declared on the broker is
// deleted with rabbitmqctl: queues <q> and <q>.dead, exchanges <q>.dlx and the test's exchange.
void delete_topology(const std::vector<std::string> &queues, const std::vector<std::string> &exchanges) {
    const std::string ctl = std::string(OUTBOX_SOURCE_DIR) + "/scripts/services.sh rabbitmqctl -q";
    const std::string vhost = amqp_vhost();
    int rc = 0;
    for (const auto &q : queues) {
        shell(ctl + " delete_queue -p '" + vhost + "' '" + q + "'", &rc);
    }
    if (!exchanges.empty()) {
        std::string expr;
        for (const auto &x : exchanges) {
            expr += "rabbit_exchange:delete(rabbit_misc:r(<<\"" + vhost + "\">>, exchange, <<\"" + x +
                    "\">>), false, <<\"outbox-test\">>), ";
        }
        expr += "ok.";
        shell(ctl + " eval '" + expr + "'", &rc);
    }
}

class CapiConsumerTest : public PgTest {
  protected:
    void SetUp() override {
        PgTest::SetUp();
        if (HasFatalFailure()) {
            return;
        }
        exchange = "capi-it-" + schema;
        ASSERT_EQ(outbox_config_set(cfg, "pg.url", pg_url().c_str()), OUTBOX_OK);
        ASSERT_EQ(outbox_config_set(cfg, "amqp.url", amqp_url().c_str()), OUTBOX_OK);
        ASSERT_EQ(outbox_config_set(cfg, "amqp.exchange", exchange.c_str()), OUTBOX_OK);
        admin.query("CREATE TABLE \"" + schema + "\".effects (outbox_id text PRIMARY KEY, n int NOT NULL)");
        inbox = "\"" + schema + "\".\"outbox_inbox\"";
    }
    void TearDown() override {
        outbox_consumer_free(consumer);
        outbox_relay_free(relay);
        if (!queues.empty()) {
            std::vector<std::string> qs, xs{exchange};
            for (const auto &q : queues) {
                qs.push_back(q);
                qs.push_back(q + ".dead");
                xs.push_back(q + ".dlx");
            }
            delete_topology(qs, xs);
        }
        PgTest::TearDown();
    }

    std::string consumer_name(const char *prefix) {
        std::string n = unique_name(prefix);
        queues.push_back(n);
        return n;
    }

    long inbox_rows(const std::string &where = "true") {
        return std::stol(admin.scalar("SELECT count(*) FROM " + inbox + " WHERE " + where));
    }

    // Relays everything pending with the C relay; returns how many were published.
    long relay_all() {
        if (relay == nullptr) {
            EXPECT_EQ(outbox_relay_new(&relay, cfg), OUTBOX_OK) << outbox_last_error();
        }
        long published = 0;
        for (int i = 0; i < 100; ++i) {
            outbox_relay_stats s;
            outbox_relay_stats_init(&s);
            outbox_status st = outbox_relay_step(relay, &s);
            EXPECT_EQ(st, OUTBOX_OK) << outbox_last_error();
            published += s.published;
            if (st != OUTBOX_OK || s.claimed == 0) {
                break;
            }
        }
        return published;
    }

    std::string exchange;
    std::string inbox;
    std::vector<std::string> queues;
    outbox_consumer *consumer = nullptr;
    outbox_relay *relay = nullptr;
};

// ---------------------------------------------------------------------------------------------
// 6. Order reports through outbox_consumer_dedupe, and the size-prefixed result.
TEST_F(CapiConsumerTest, DedupeReportsOrderAndHonoursTheResultSize) {
    const char *c = "capi-order";
    auto dedupe = [&](const std::string &id, int64_t seq, const char *agg = "A") {
        outbox_dedupe_result r;
        outbox_dedupe_result_init(&r);
        r.order = -1;
        r.previous_seq = -1;
        EXPECT_EQ(outbox_consumer_dedupe(&r, db, c, id.c_str(), "PRD", agg, seq), OUTBOX_OK) << outbox_last_error();
        EXPECT_EQ(r.size, sizeof(outbox_dedupe_result));
        return r;
    };
    const std::string id1 = new_uuid(), id2 = new_uuid(), id3 = new_uuid();
    for (auto [id, seq] : std::vector<std::pair<std::string, int64_t>>{{id1, 1}, {id2, 2}, {id3, 3}}) {
        outbox_dedupe_result r = dedupe(id, seq);
        EXPECT_EQ(r.first_time, 1) << seq;
        EXPECT_EQ(r.order, OUTBOX_ORDER_IN_ORDER) << seq;
        EXPECT_EQ(r.previous_seq, seq - 1);
    }
    outbox_dedupe_result r = dedupe(new_uuid(), 2); // seq 2 replayed under a new event id
    EXPECT_EQ(r.first_time, 1);
    EXPECT_EQ(r.order, OUTBOX_ORDER_STALE);
    EXPECT_EQ(r.previous_seq, 3);
    r = dedupe(new_uuid(), 5);
    EXPECT_EQ(r.first_time, 1);
    EXPECT_EQ(r.order, OUTBOX_ORDER_GAP);
    EXPECT_EQ(r.previous_seq, 3);
    r = dedupe(id2, 2); // a duplicate
    EXPECT_EQ(r.first_time, 0);
    EXPECT_EQ(r.order, OUTBOX_ORDER_UNCHECKED);
    // No aggregate (NULLs) or no sequence: unchecked.
    outbox_dedupe_result_init(&r);
    ASSERT_EQ(outbox_consumer_dedupe(&r, db, c, new_uuid().c_str(), nullptr, nullptr, 0), OUTBOX_OK)
        << outbox_last_error();
    EXPECT_EQ(r.first_time, 1);
    EXPECT_EQ(r.order, OUTBOX_ORDER_UNCHECKED);
    EXPECT_EQ(inbox_rows("consumer = 'capi-order'"), 6);

    // An older caller's smaller struct: only the fields inside its size are written.
    struct Guarded {
        outbox_dedupe_result r;
        unsigned char canary[16];
    } g;
    std::memset(&g, 0xAB, sizeof g);
    g.r.size = offsetof(outbox_dedupe_result, previous_seq);
    ASSERT_EQ(outbox_consumer_dedupe(&g.r, db, c, new_uuid().c_str(), "PRD", "A", 6), OUTBOX_OK) << outbox_last_error();
    EXPECT_EQ(g.r.size, offsetof(outbox_dedupe_result, previous_seq));
    EXPECT_EQ(g.r.first_time, 1);
    EXPECT_EQ(g.r.order, OUTBOX_ORDER_IN_ORDER) << "after the gap to 5, 6 is in order";
    int64_t untouched;
    std::memset(&untouched, 0xAB, sizeof untouched);
    EXPECT_EQ(g.r.previous_seq, untouched) << "previous_seq lies outside the caller's size";
    for (unsigned char b : g.canary) {
        ASSERT_EQ(b, 0xAB) << "written past the struct";
    }
    std::memset(&g, 0xAB, sizeof g);
    g.r.size = offsetof(outbox_dedupe_result, order);
    ASSERT_EQ(outbox_consumer_dedupe(&g.r, db, c, id1.c_str(), "PRD", "A", 1), OUTBOX_OK);
    EXPECT_EQ(g.r.first_time, 0);
    int32_t untouched32;
    std::memset(&untouched32, 0xAB, sizeof untouched32);
    EXPECT_EQ(g.r.order, untouched32);
    // A full-size struct leaves what follows it alone.
    std::memset(&g, 0xAB, sizeof g);
    outbox_dedupe_result_init(&g.r);
    ASSERT_EQ(outbox_consumer_dedupe(&g.r, db, c, new_uuid().c_str(), "PRD", "A", 7), OUTBOX_OK);
    EXPECT_EQ(g.r.order, OUTBOX_ORDER_IN_ORDER);
    EXPECT_EQ(g.r.previous_seq, 6);
    for (unsigned char b : g.canary) {
        ASSERT_EQ(b, 0xAB) << "written past the struct";
    }
    // A size that was never set is refused, NULL is fine.
    outbox_dedupe_result zero;
    std::memset(&zero, 0, sizeof zero);
    EXPECT_EQ(outbox_consumer_dedupe(&zero, db, c, new_uuid().c_str(), "PRD", "A", 8), OUTBOX_ERR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(outbox_last_error()).find("size"), std::string::npos) << outbox_last_error();
    EXPECT_EQ(outbox_consumer_dedupe(nullptr, db, c, new_uuid().c_str(), "PRD", "A", 8), OUTBOX_OK);

    // inbox.order_check=false: never checked.
    outbox_config *off = nullptr;
    ASSERT_EQ(outbox_config_new(&off), OUTBOX_OK);
    ASSERT_EQ(outbox_config_set(off, "outbox.schema", schema.c_str()), OUTBOX_OK);
    ASSERT_EQ(outbox_config_set(off, "inbox.order_check", "false"), OUTBOX_OK);
    outbox_db *db_off = nullptr;
    ASSERT_EQ(outbox_db_open(&db_off, pg_url().c_str(), off), OUTBOX_OK) << outbox_last_error();
    outbox_dedupe_result_init(&r);
    EXPECT_EQ(outbox_consumer_dedupe(&r, db_off, c, new_uuid().c_str(), "PRD", "A", 99), OUTBOX_OK);
    EXPECT_EQ(r.first_time, 1);
    EXPECT_EQ(r.order, OUTBOX_ORDER_UNCHECKED);
    outbox_db_close(db_off);
    outbox_config_free(off);
}

// A half-given aggregate (type without id, or id without type) is "no order check", as documented
// for NULL aggregate fields: the event is deduplicated and the caller's transaction stays usable
// (this inserted NULL into the positions table's NOT NULL column and aborted the transaction).
TEST_F(CapiConsumerTest, DedupeWithHalfAnAggregateIsUncheckedAndKeepsTheTransaction) {
    PGconn *raw = PQconnectdb(pg_url().c_str());
    ASSERT_EQ(PQstatus(raw), CONNECTION_OK) << PQerrorMessage(raw);
    outbox_db *lent = nullptr;
    ASSERT_EQ(outbox_db_wrap(&lent, raw, cfg), OUTBOX_OK) << outbox_last_error();
    PQclear(PQexec(raw, "BEGIN"));
    const char *c = "capi-half";
    const std::pair<const char *, const char *> halves[] = {{"PRD", nullptr}, {nullptr, "A"}, {"PRD", ""}};
    for (auto [type, id] : halves) {
        outbox_dedupe_result r;
        outbox_dedupe_result_init(&r);
        r.order = -1;
        const std::string event = new_uuid();
        EXPECT_EQ(outbox_consumer_dedupe(&r, lent, c, event.c_str(), type, id, 7), OUTBOX_OK) << outbox_last_error();
        EXPECT_EQ(r.first_time, 1);
        EXPECT_EQ(r.order, OUTBOX_ORDER_UNCHECKED);
        EXPECT_EQ(PQtransactionStatus(raw), PQTRANS_INTRANS) << "the caller's transaction is still usable";
        outbox_dedupe_result_init(&r);
        EXPECT_EQ(outbox_consumer_dedupe(&r, lent, c, event.c_str(), type, id, 7), OUTBOX_OK) << outbox_last_error();
        EXPECT_EQ(r.first_time, 0) << "still deduplicated";
    }
    PGresult *res = PQexec(raw, "COMMIT");
    EXPECT_EQ(PQresultStatus(res), PGRES_COMMAND_OK) << PQerrorMessage(raw);
    PQclear(res);
    EXPECT_EQ(inbox_rows("consumer = 'capi-half'"), 3);
    outbox_db_close(lent);
    PQfinish(raw);
}

// ---------------------------------------------------------------------------------------------
// 7. Dedupe follows the caller's transaction on a lent connection; the rendered statement gives
//    the same answers through plain libpq; bad input is refused without harming the transaction.
TEST_F(CapiConsumerTest, DedupeFollowsTheCallersTransactionOnALentConnection) {
    PGconn *raw = PQconnectdb(pg_url().c_str());
    ASSERT_EQ(PQstatus(raw), CONNECTION_OK) << PQerrorMessage(raw);
    outbox_db *lent = nullptr;
    ASSERT_EQ(outbox_db_wrap(&lent, raw, cfg), OUTBOX_OK) << outbox_last_error();
    auto exec = [&](const char *sql) {
        PGresult *res = PQexec(raw, sql);
        ExecStatusType st = PQresultStatus(res);
        PQclear(res);
        return st == PGRES_COMMAND_OK;
    };
    const char *c = "capi-tx";
    const std::string id = new_uuid();
    auto dedupe = [&](const std::string &event, int64_t seq = 1) {
        outbox_dedupe_result r;
        outbox_dedupe_result_init(&r);
        r.first_time = -1;
        EXPECT_EQ(outbox_consumer_dedupe(&r, lent, c, event.c_str(), "PRD", "A", seq), OUTBOX_OK)
            << outbox_last_error();
        return r;
    };

    ASSERT_TRUE(exec("BEGIN"));
    EXPECT_EQ(dedupe(id).first_time, 1);
    EXPECT_EQ(PQtransactionStatus(raw), PQTRANS_INTRANS) << "dedupe joins the caller's transaction";
    EXPECT_EQ(inbox_rows(), 0) << "not visible before the commit";
    ASSERT_TRUE(exec("ROLLBACK"));
    EXPECT_EQ(inbox_rows(), 0);

    ASSERT_TRUE(exec("BEGIN"));
    outbox_dedupe_result r = dedupe(id);
    EXPECT_EQ(r.first_time, 1) << "a rolled-back dedupe leaves no trace: first time again";
    EXPECT_EQ(r.order, OUTBOX_ORDER_IN_ORDER) << "the rolled-back position did not move either";
    ASSERT_TRUE(exec("COMMIT"));
    EXPECT_EQ(inbox_rows(), 1);

    ASSERT_TRUE(exec("BEGIN"));
    r = dedupe(id);
    EXPECT_EQ(r.first_time, 0);
    EXPECT_EQ(r.order, OUTBOX_ORDER_UNCHECKED);
    EXPECT_EQ(r.previous_seq, 1);
    ASSERT_TRUE(exec("COMMIT"));
    EXPECT_EQ(dedupe(id).first_time, 0) << "outside a transaction too";
    EXPECT_EQ(inbox_rows(), 1) << "a duplicate writes nothing";
    EXPECT_EQ(admin.scalar("SELECT processed_at = (SELECT processed_at FROM " + inbox + ") FROM " + inbox), "t");

    // The rendered statement, run by the caller's own driver (plain libpq here).
    auto run_rendered = [&](const std::string &event, int64_t seq) {
        outbox_statement *st = nullptr;
        EXPECT_EQ(outbox_render_dedupe(&st, cfg, c, event.c_str(), "PRD", "A", seq), OUTBOX_OK) << outbox_last_error();
        std::vector<std::string> row;
        if (st == nullptr) {
            return row;
        }
        EXPECT_EQ(outbox_statement_param_count(st), 6U);
        std::vector<const char *> params;
        for (size_t i = 0; i < outbox_statement_param_count(st); ++i) {
            params.push_back(outbox_statement_param(st, i));
        }
        PGresult *res = PQexecParams(raw, outbox_statement_sql(st), static_cast<int>(params.size()), nullptr,
                                     params.data(), nullptr, nullptr, 0);
        EXPECT_EQ(PQresultStatus(res), PGRES_TUPLES_OK) << PQerrorMessage(raw);
        if (PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 1) {
            for (int j = 0; j < PQnfields(res); ++j) {
                row.emplace_back(PQgetisnull(res, 0, j) ? "<null>" : PQgetvalue(res, 0, j));
            }
        }
        PQclear(res);
        outbox_statement_free(st);
        return row;
    };
    std::vector<std::string> row = run_rendered(id, 1);
    ASSERT_EQ(row.size(), 3U);
    EXPECT_EQ(row[0], "f") << "the rendered statement sees the same duplicate";
    EXPECT_EQ(row[1], "1") << "and the same previous sequence";
    EXPECT_EQ(inbox_rows(), 1);
    const std::string id2 = new_uuid();
    ASSERT_TRUE(exec("BEGIN"));
    row = run_rendered(id2, 2);
    ASSERT_EQ(row.size(), 3U);
    EXPECT_EQ(row[0], "t");
    EXPECT_EQ(row[1], "1");
    ASSERT_TRUE(exec("COMMIT"));
    EXPECT_EQ(dedupe(id2, 2).first_time, 0) << "what the rendered statement recorded, the library sees";
    EXPECT_EQ(inbox_rows(), 2);
    outbox_dedupe_result_init(&r);
    const std::string id3 = new_uuid();
    ASSERT_EQ(outbox_consumer_dedupe(&r, lent, c, id3.c_str(), "PRD", "A", 3), OUTBOX_OK);
    row = run_rendered(id3, 3);
    ASSERT_EQ(row.size(), 3U);
    EXPECT_EQ(row[0], "f");
    EXPECT_EQ(row[1], std::to_string(r.previous_seq + 1)) << "position after the library's dedupe of seq 3";

    // Bad input.
    outbox_dedupe_result_init(&r);
    EXPECT_EQ(outbox_consumer_dedupe(&r, nullptr, c, id.c_str(), "PRD", "A", 1), OUTBOX_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(outbox_consumer_dedupe(&r, lent, nullptr, id.c_str(), "PRD", "A", 1), OUTBOX_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(outbox_consumer_dedupe(&r, lent, c, nullptr, "PRD", "A", 1), OUTBOX_ERR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(outbox_last_error()), "");
    outbox_statement *st = reinterpret_cast<outbox_statement *>(&r);
    EXPECT_EQ(outbox_render_dedupe(nullptr, cfg, c, id.c_str(), "PRD", "A", 1), OUTBOX_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(outbox_render_dedupe(&st, cfg, nullptr, id.c_str(), "PRD", "A", 1), OUTBOX_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(st, nullptr);
    EXPECT_EQ(outbox_render_dedupe(&st, cfg, c, "nope", "PRD", "A", 1), OUTBOX_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(st, nullptr);

    ASSERT_TRUE(exec("BEGIN"));
    const std::string id4 = new_uuid();
    ASSERT_EQ(outbox_consumer_dedupe(&r, lent, c, id4.c_str(), "PRD", "B", 1), OUTBOX_OK);
    EXPECT_EQ(outbox_consumer_dedupe(&r, lent, c, "not-a-uuid", "PRD", "A", 1), OUTBOX_ERR_INVALID_ARGUMENT);
    const std::string msg = outbox_last_error();
    EXPECT_NE(msg.find("UUID"), std::string::npos) << msg;
    EXPECT_EQ(outbox_last_status(), OUTBOX_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(outbox_consumer_dedupe(&r, lent, "", id4.c_str(), "PRD", "A", 1), OUTBOX_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(outbox_consumer_dedupe(&r, lent, c, new_uuid().c_str(), "PRD", "A", -1), OUTBOX_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(PQtransactionStatus(raw), PQTRANS_INTRANS) << "the transaction is still usable";
    outbox_dedupe_result_init(&r);
    ASSERT_EQ(outbox_consumer_dedupe(&r, lent, c, id4.c_str(), "PRD", "B", 1), OUTBOX_OK) << outbox_last_error();
    EXPECT_EQ(r.first_time, 0) << "the same transaction still sees its own insert";
    ASSERT_TRUE(exec("COMMIT"));
    EXPECT_EQ(inbox_rows(), 4);

    // An aborted transaction is reported, not made worse.
    ASSERT_TRUE(exec("BEGIN"));
    EXPECT_FALSE(exec("SELECT 1/0"));
    EXPECT_EQ(outbox_consumer_dedupe(&r, lent, c, new_uuid().c_str(), "PRD", "A", 1), OUTBOX_ERR_TRANSACTION);
    ASSERT_TRUE(exec("ROLLBACK"));

    outbox_db_close(lent);
    EXPECT_EQ(PQstatus(raw), CONNECTION_OK) << "a lent connection is never closed by the library";
    PQfinish(raw);
}

// ---------------------------------------------------------------------------------------------
// 8. Retention purge: only rows older than the age go, in batches; an age under
//    inbox.retention_s is refused.
TEST_F(CapiConsumerTest, InboxPurgeDeletesOnlyOldRowsAndRefusesAgesUnderTheRetention) {
    auto insert = [&](int n, const char *age) {
        admin.query(
            "INSERT INTO " + inbox +
            " (consumer, outbox_id, id_ms, processed_at) SELECT 'purge', gen_random_uuid(), 0, now() - interval '" +
            age + "' FROM generate_series(1, " + std::to_string(n) + ")");
    };
    insert(5, "10 days");
    insert(2, "7 days 1 hour");
    insert(3, "1 hour");
    insert(1, "0 seconds");
    admin.query("INSERT INTO \"" + schema +
                "\".outbox_inbox_positions (consumer, aggregate_type, aggregate_id, last_seq, updated_at)"
                " VALUES ('purge', 'PRD', 'A', 7, now() - interval '30 days')");
    ASSERT_EQ(inbox_rows(), 11);

    int64_t deleted = -1;
    EXPECT_EQ(outbox_inbox_purge(&deleted, db, 6 * 86400, 100), OUTBOX_ERR_INVALID_ARGUMENT)
        << "younger than the default inbox.retention_s (7 days)";
    EXPECT_NE(std::string(outbox_last_error()).find("retention"), std::string::npos) << outbox_last_error();
    EXPECT_EQ(deleted, -1);
    EXPECT_EQ(outbox_inbox_purge(&deleted, db, 7 * 86400 - 1, 100), OUTBOX_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(inbox_rows(), 11) << "a refused purge deletes nothing";
    EXPECT_EQ(outbox_inbox_purge(&deleted, db, 8 * 86400, 0), OUTBOX_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(outbox_inbox_purge(&deleted, nullptr, 8 * 86400, 2), OUTBOX_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(inbox_rows(), 11);

    ASSERT_EQ(outbox_inbox_purge(&deleted, db, 8 * 86400, 2), OUTBOX_OK) << outbox_last_error();
    EXPECT_EQ(deleted, 5) << "the 10-day-old rows, in batches of 2";
    EXPECT_EQ(inbox_rows(), 6);
    EXPECT_EQ(inbox_rows("processed_at < now() - interval '8 days'"), 0);
    ASSERT_EQ(outbox_inbox_purge(&deleted, db, 8 * 86400, 2), OUTBOX_OK);
    EXPECT_EQ(deleted, 0) << "nothing left that old";
    ASSERT_EQ(outbox_inbox_purge(nullptr, db, 7 * 86400, 1), OUTBOX_OK) << "deleted may be NULL";
    EXPECT_EQ(inbox_rows(), 4) << "exactly the retention age: the 7-days-1-hour rows go";
    EXPECT_EQ(admin.scalar("SELECT last_seq FROM \"" + schema + "\".outbox_inbox_positions"), "7")
        << "purges never forget per-aggregate positions";

    // A deliberately lowered retention allows younger purges.
    outbox_config *short_cfg = nullptr;
    ASSERT_EQ(outbox_config_new(&short_cfg), OUTBOX_OK);
    ASSERT_EQ(outbox_config_set(short_cfg, "outbox.schema", schema.c_str()), OUTBOX_OK);
    ASSERT_EQ(outbox_config_set(short_cfg, "inbox.retention_s", "1800"), OUTBOX_OK);
    outbox_db *db_short = nullptr;
    ASSERT_EQ(outbox_db_open(&db_short, pg_url().c_str(), short_cfg), OUTBOX_OK) << outbox_last_error();
    EXPECT_EQ(outbox_inbox_purge(&deleted, db_short, 1799, 10), OUTBOX_ERR_INVALID_ARGUMENT);
    ASSERT_EQ(outbox_inbox_purge(&deleted, db_short, 1800, 10), OUTBOX_OK) << outbox_last_error();
    EXPECT_EQ(deleted, 3);
    EXPECT_EQ(inbox_rows(), 1) << "the row processed just now stays";
    outbox_db_close(db_short);
    outbox_config_free(short_cfg);
}

// ---------------------------------------------------------------------------------------------
// 9. The C consumer: next / fields / properties / nack / dedupe / ack, then run with a C
//    handler, stopped from another thread.

struct RunContext {
    std::string schema;
    std::string fail_id; // fails on its first delivery, with a reason
    std::mutex mu;
    std::vector<int> orders;
    std::vector<int64_t> fail_id_counts;
    std::atomic<int> ok{0};
    std::atomic<int> failed{0};
};

int capi_handler(outbox_db *tx, const outbox_message *msg, void *user_data) {
    auto *ctx = static_cast<RunContext *>(user_data);
    const char *id = outbox_message_field(msg, "OUTBOX_ID");
    if (id == nullptr) {
        outbox_handler_error("no OUTBOX_ID");
        return 2;
    }
    if (ctx->fail_id == id) {
        std::lock_guard<std::mutex> lock(ctx->mu);
        ctx->fail_id_counts.push_back(outbox_message_delivery_count(msg));
        if (outbox_message_delivery_count(msg) == 0) {
            ++ctx->failed;
            outbox_handler_error("capi handler says no, once");
            return 7;
        }
    }
    auto *pg = static_cast<PGconn *>(outbox_db_pgconn(tx));
    const std::string sql =
        "INSERT INTO \"" + ctx->schema +
        "\".effects AS e (outbox_id, n) VALUES ($1, 1) ON CONFLICT (outbox_id) DO UPDATE SET n = e.n + 1";
    const char *params[] = {id};
    PGresult *r = PQexecParams(pg, sql.c_str(), 1, nullptr, params, nullptr, nullptr, 0);
    const bool ok = PQresultStatus(r) == PGRES_COMMAND_OK;
    PQclear(r);
    if (!ok) {
        outbox_handler_error(PQerrorMessage(pg));
        return 1;
    }
    std::lock_guard<std::mutex> lock(ctx->mu);
    ctx->orders.push_back(outbox_message_order(msg));
    ++ctx->ok;
    return 0;
}

struct ConsumerLogSink {
    std::mutex mu;
    std::vector<std::string> lines;
    bool contains(const std::string &s) {
        std::lock_guard<std::mutex> lock(mu);
        for (const auto &l : lines) {
            if (l.find(s) != std::string::npos) {
                return true;
            }
        }
        return false;
    }
};

void capi_log(outbox_log_level, const char *message, void *user_data) {
    auto *sink = static_cast<ConsumerLogSink *>(user_data);
    std::lock_guard<std::mutex> lock(sink->mu);
    sink->lines.emplace_back(message);
}

TEST_F(CapiConsumerTest, ConsumerNextFieldsAckThenRunStoppedFromAnotherThread) {
    const std::string name = consumer_name("capi-cons-");
    ASSERT_EQ(outbox_consumer_new(&consumer, cfg, name.c_str()), OUTBOX_OK) << outbox_last_error();
    ConsumerLogSink sink;
    ASSERT_EQ(outbox_consumer_set_logger(consumer, capi_log, &sink), OUTBOX_OK);
    ASSERT_EQ(outbox_consumer_connect(consumer), OUTBOX_OK) << outbox_last_error();

    // Nothing there yet: a timeout, bounded by timeout_ms.
    outbox_message *m = reinterpret_cast<outbox_message *>(&sink);
    auto t0 = Clock::now();
    EXPECT_EQ(outbox_consumer_next(&m, consumer, 300), OUTBOX_ERR_TIMEOUT);
    const long long waited = ms_since(t0);
    EXPECT_EQ(m, nullptr);
    EXPECT_GE(waited, 250);
    EXPECT_LT(waited, 3000);

    // One event through outbox_write and the C relay. The payload holds a 64-bit integer that a
    // double would round, and escapes: it must come back as the exact JSON text.
    const std::string payload =
        R"({"PRD_ID":"123","big":12345678901234567890,"neg":-9223372036854775808,"price":99.990,)"
        R"("s":"caf\u00e9 \"q\" \\","nested":{"a":[1,2,{"b":null}]}})";
    outbox_event *ev = make_event("123", "POST", payload);
    ASSERT_EQ(outbox_event_set(ev, "user", "admin@example.com"), OUTBOX_OK);
    ASSERT_EQ(outbox_write(db, ev), OUTBOX_OK) << outbox_last_error();
    const std::string id = outbox_event_id(ev);
    outbox_event_free(ev);
    ASSERT_EQ(relay_all(), 1);

    ASSERT_EQ(outbox_consumer_next(&m, consumer, 10000), OUTBOX_OK) << outbox_last_error();
    ASSERT_NE(m, nullptr);
    auto field = [&](const char *f) {
        const char *v = outbox_message_field(m, f);
        return v != nullptr ? std::string(v) : std::string("<null>");
    };
    auto prop = [&](const char *p) {
        const char *v = outbox_message_property(m, p);
        return v != nullptr ? std::string(v) : std::string("<null>");
    };
    EXPECT_EQ(field("PAYLOAD"), payload) << "PAYLOAD is the exact JSON text";
    EXPECT_EQ(field("OUTBOX_ID"), id);
    EXPECT_EQ(field("EVENT_TYPE"), "ProductCreated");
    EXPECT_EQ(field("AGGREGATE_TYPE"), "PRD");
    EXPECT_EQ(field("AGGREGATE_ID"), "123");
    EXPECT_EQ(field("OPERATION"), "POST");
    EXPECT_EQ(field("USER"), "admin@example.com");
    EXPECT_EQ(field("CREATED_AT").size(), 14U) << field("CREATED_AT");
    EXPECT_EQ(field("PREVIOUS_PAYLOAD"), "<null>");
    EXPECT_EQ(field("NO_SUCH_FIELD"), "<null>");
    EXPECT_EQ(prop("message_id"), id);
    EXPECT_EQ(prop("type"), "ProductCreated");
    EXPECT_EQ(prop("outbox-seq"), "1");
    EXPECT_EQ(prop("outbox-aggregate-id"), "123");
    EXPECT_EQ(prop("content_type"), "application/json");
    EXPECT_EQ(prop("delivery_mode"), "2");
    EXPECT_EQ(prop("exchange"), exchange);
    EXPECT_EQ(prop("routing_key"), "prd.post");
    EXPECT_EQ(prop("no-such-header"), "<null>");
    EXPECT_EQ(outbox_message_property(m, nullptr), nullptr);
    EXPECT_EQ(outbox_message_field(nullptr, "PAYLOAD"), nullptr);
    EXPECT_EQ(outbox_message_seq(m), 1);
    EXPECT_EQ(outbox_message_redelivered(m), 0);
    EXPECT_EQ(outbox_message_delivery_count(m), 0);
    size_t len = 0;
    const char *body = outbox_message_body(m, &len);
    ASSERT_NE(body, nullptr);
    EXPECT_EQ(len, std::strlen(body));
    EXPECT_NE(std::string(body, len).find(payload), std::string::npos) << "the body carries the payload verbatim";

    // nack with requeue: the same message again, marked and counted.
    ASSERT_EQ(outbox_consumer_nack(consumer, m, 1), OUTBOX_OK) << outbox_last_error();
    outbox_message_free(m);
    m = nullptr;
    ASSERT_EQ(outbox_consumer_next(&m, consumer, 10000), OUTBOX_OK) << outbox_last_error();
    EXPECT_EQ(field("OUTBOX_ID"), id);
    EXPECT_EQ(outbox_message_redelivered(m), 1);
    EXPECT_EQ(outbox_message_delivery_count(m), 1);
    EXPECT_EQ(field("PAYLOAD"), payload);

    // Dedupe it in our own transaction, commit, ack.
    outbox_dedupe_result r;
    outbox_dedupe_result_init(&r);
    ASSERT_EQ(outbox_db_exec(db, "BEGIN"), OUTBOX_OK);
    ASSERT_EQ(outbox_consumer_dedupe_message(&r, db, consumer, m), OUTBOX_OK) << outbox_last_error();
    EXPECT_EQ(r.first_time, 1);
    EXPECT_EQ(r.order, OUTBOX_ORDER_IN_ORDER);
    ASSERT_EQ(outbox_db_exec(db, "COMMIT"), OUTBOX_OK);
    ASSERT_EQ(outbox_consumer_dedupe_message(&r, db, consumer, m), OUTBOX_OK);
    EXPECT_EQ(r.first_time, 0);

    // The one-round-trip form opens the transaction itself, and only on an idle connection.
    auto *raw = static_cast<PGconn *>(outbox_db_pgconn(db));
    ASSERT_EQ(outbox_consumer_begin(&r, db, consumer, m), OUTBOX_OK) << outbox_last_error();
    EXPECT_EQ(r.first_time, 0) << "recorded by the committed dedupe above";
    EXPECT_EQ(PQtransactionStatus(raw), PQTRANS_INTRANS) << "begin leaves the handler's transaction open";
    EXPECT_EQ(outbox_consumer_begin(&r, db, consumer, m), OUTBOX_ERR_TRANSACTION);
    EXPECT_NE(std::string(outbox_last_error()).find("already open"), std::string::npos) << outbox_last_error();
    EXPECT_EQ(PQtransactionStatus(raw), PQTRANS_INTRANS) << "the caller's transaction is left alone";
    ASSERT_EQ(outbox_db_exec(db, "ROLLBACK"), OUTBOX_OK);
    {
        // A failing statement (no such inbox table) leaves no transaction behind.
        outbox_config *bad_cfg = nullptr;
        outbox_db *bad_db = nullptr;
        ASSERT_EQ(outbox_config_new(&bad_cfg), OUTBOX_OK);
        ASSERT_EQ(outbox_config_set(bad_cfg, "outbox.schema", schema.c_str()), OUTBOX_OK);
        ASSERT_EQ(outbox_config_set(bad_cfg, "inbox.table", "no_such_inbox"), OUTBOX_OK);
        ASSERT_EQ(outbox_db_open(&bad_db, pg_url().c_str(), bad_cfg), OUTBOX_OK) << outbox_last_error();
        EXPECT_EQ(outbox_consumer_begin(&r, bad_db, consumer, m), OUTBOX_ERR_SCHEMA) << outbox_last_error();
        EXPECT_NE(std::string(outbox_last_error()).find("no_such_inbox"), std::string::npos) << outbox_last_error();
        EXPECT_EQ(PQtransactionStatus(static_cast<PGconn *>(outbox_db_pgconn(bad_db))), PQTRANS_IDLE);
        EXPECT_EQ(outbox_db_exec(bad_db, "SELECT 1"), OUTBOX_OK) << "the connection is usable afterwards";
        outbox_db_close(bad_db);
        outbox_config_free(bad_cfg);
    }
    EXPECT_EQ(inbox_rows("consumer = '" + name + "' AND outbox_id = '" + id + "' AND seq = 1 AND aggregate_id = '123'"),
              1);
    ASSERT_EQ(outbox_consumer_ack(consumer, m), OUTBOX_OK) << outbox_last_error();
    outbox_message_free(m);
    m = nullptr;
    EXPECT_EQ(outbox_consumer_next(&m, consumer, 500), OUTBOX_ERR_TIMEOUT) << "an acked message never comes back";
    EXPECT_EQ(m, nullptr);
    EXPECT_EQ(outbox_consumer_ack(consumer, nullptr), OUTBOX_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(outbox_consumer_next(nullptr, consumer, 10), OUTBOX_ERR_INVALID_ARGUMENT);

    // run() with a C handler on a thread of its own.
    constexpr int kEvents = 30;
    std::vector<std::string> ids;
    for (int i = 0; i < kEvents; ++i) {
        outbox_event *e =
            make_event("r" + std::to_string(i % 3), i < 3 ? "POST" : "PATCH", "{\"i\":" + std::to_string(i) + "}");
        ASSERT_EQ(outbox_write(db, e), OUTBOX_OK) << outbox_last_error();
        ids.emplace_back(outbox_event_id(e));
        outbox_event_free(e);
    }
    RunContext ctx;
    ctx.schema = schema;
    ctx.fail_id = ids[7];
    std::atomic<int> run_status{1};
    std::atomic<bool> returned{false};
    std::atomic<long long> returned_at_ms{0};
    const auto epoch = Clock::now();
    std::thread runner([&] {
        run_status = outbox_consumer_run(consumer, nullptr, capi_handler, &ctx);
        returned_at_ms = ms_since(epoch);
        returned = true;
    });
    struct Join {
        outbox_consumer *c;
        std::thread &t;
        ~Join() {
            if (t.joinable()) {
                outbox_consumer_stop(c);
                t.join();
            }
        }
    } join{consumer, runner};

    ASSERT_EQ(relay_all(), kEvents);
    const bool done = eventually([&] { return ctx.ok.load() == kEvents; }, 20s);
    EXPECT_TRUE(done) << ctx.ok.load() << " of " << kEvents << " handled";
    std::this_thread::sleep_for(100ms);
    const long long stop_at = ms_since(epoch);
    outbox_consumer_stop(consumer);
    ASSERT_TRUE(eventually([&] { return returned.load(); }, 10s)) << "outbox_consumer_run did not return after a stop";
    runner.join();
    EXPECT_EQ(run_status.load(), OUTBOX_OK) << outbox_last_error();
    EXPECT_LT(returned_at_ms.load() - stop_at, 3000) << "run must return promptly after a stop";

    EXPECT_EQ(admin.scalar("SELECT count(*) FROM \"" + schema + "\".effects"), std::to_string(kEvents));
    EXPECT_EQ(admin.scalar("SELECT count(*) FROM \"" + schema + "\".effects WHERE n <> 1"), "0");
    EXPECT_EQ(inbox_rows("consumer = '" + name + "'"), kEvents + 1);
    EXPECT_EQ(ctx.failed.load(), 1);
    {
        std::lock_guard<std::mutex> lock(ctx.mu);
        EXPECT_EQ(ctx.fail_id_counts, (std::vector<int64_t>{0, 1})) << "failed once, then redelivered with a count";
        ASSERT_EQ(ctx.orders.size(), static_cast<size_t>(kEvents));
        int in_order = 0;
        for (int o : ctx.orders) {
            in_order += o == OUTBOX_ORDER_IN_ORDER ? 1 : 0;
        }
        // The failed event went back to the queue; the later events of its aggregate may pass it.
        EXPECT_GE(in_order, kEvents - 5);
    }
    EXPECT_TRUE(sink.contains("capi handler says no, once")) << "the handler's reason is logged";

    // After a stop, next says so; after a reset it waits again.
    EXPECT_EQ(outbox_consumer_next(&m, consumer, 100), OUTBOX_ERR_STOPPED);
    ASSERT_EQ(outbox_consumer_reset(consumer), OUTBOX_OK);
    EXPECT_EQ(outbox_consumer_next(&m, consumer, 200), OUTBOX_ERR_TIMEOUT);
    outbox_consumer_stop(nullptr); // a no-op
}

// A consumer loop of one's own (as the Python and Node packages have): BEGIN + dedupe
// (outbox_consumer_begin), the "handler", COMMIT or ROLLBACK, then outbox_consumer_settle decides.
// consumer.delivery_limit=2 on a quorum queue: the database dies under the handler on the first
// delivery (not counted), the handler fails for real on the second (attempt 1), the third is
// processed. An event that always fails is dead-lettered at attempt 2.
TEST_F(CapiConsumerTest, AHandWrittenLoopSettlesThroughTheLibraryAndALostDatabaseIsNoAttempt) {
    const std::string name = consumer_name("capi-settle-");
    ASSERT_EQ(outbox_config_set(cfg, "consumer.delivery_limit", "2"), OUTBOX_OK);
    ASSERT_EQ(outbox_consumer_new(&consumer, cfg, name.c_str()), OUTBOX_OK) << outbox_last_error();
    std::vector<std::string> log;
    auto sink = [](outbox_log_level, const char *message, void *user_data) {
        static_cast<std::vector<std::string> *>(user_data)->emplace_back(message);
    };
    ASSERT_EQ(outbox_consumer_set_logger(consumer, sink, &log), OUTBOX_OK);
    ASSERT_EQ(outbox_consumer_connect(consumer), OUTBOX_OK) << outbox_last_error();
    for (const char *agg : {"healthy", "poison"}) {
        outbox_event *ev = make_event(agg);
        ASSERT_EQ(outbox_write(db, ev), OUTBOX_OK) << outbox_last_error();
        outbox_event_free(ev);
    }
    ASSERT_EQ(relay_all(), 2);

    outbox_db *conn = nullptr;
    ASSERT_EQ(outbox_db_open(&conn, pg_url().c_str(), cfg), OUTBOX_OK) << outbox_last_error();
    std::map<std::string, std::vector<outbox_settled>> settled;
    const auto deadline = Clock::now() + 30s;
    auto done = [&] { return settled["healthy"].size() == 3 && settled["poison"].size() == 2; };
    while (!done() && Clock::now() < deadline) {
        outbox_message *m = nullptr;
        outbox_status st = outbox_consumer_next(&m, consumer, 500);
        if (st == OUTBOX_ERR_TIMEOUT) {
            continue;
        }
        ASSERT_EQ(st, OUTBOX_OK) << outbox_last_error();
        const std::string agg = outbox_message_field(m, "AGGREGATE_ID");
        const size_t n = settled[agg].size() + 1;
        outbox_dedupe_result r;
        outbox_dedupe_result_init(&r);
        ASSERT_EQ(outbox_consumer_begin(&r, conn, consumer, m), OUTBOX_OK) << outbox_last_error();
        ASSERT_EQ(r.first_time, 1);
        std::string reason;
        if (agg == "poison") {
            reason = "boom";
        } else if (n == 1) {
            admin.query("SELECT pg_terminate_backend($1::int)",
                        {std::to_string(PQbackendPID(static_cast<PGconn *>(outbox_db_pgconn(conn))))});
            EXPECT_EQ(outbox_db_exec(conn, "SELECT 1"), OUTBOX_ERR_CONNECTION);
            reason = outbox_last_error();
        } else if (n == 2) {
            reason = "transient";
        }
        outbox_settled out;
        outbox_settled_init(&out);
        if (reason.empty()) {
            const std::string sql = "INSERT INTO \"" + schema + "\".effects VALUES ($1, 1)";
            const char *values[] = {outbox_message_property(m, "message_id")};
            PGresult *res = PQexecParams(static_cast<PGconn *>(outbox_db_pgconn(conn)), sql.c_str(), 1, nullptr, values,
                                         nullptr, nullptr, 0);
            const ExecStatusType rs = PQresultStatus(res);
            PQclear(res);
            ASSERT_EQ(rs, PGRES_COMMAND_OK);
            ASSERT_EQ(outbox_db_exec(conn, "COMMIT"), OUTBOX_OK) << outbox_last_error();
            ASSERT_EQ(outbox_consumer_settle(&out, consumer, m, conn, OUTBOX_OUTCOME_HANDLED, nullptr), OUTBOX_OK)
                << outbox_last_error();
        } else {
            // Roll back, but not on a lost connection: that ROLLBACK would open it again.
            if (outbox_db_tx_state(conn) != OUTBOX_TX_UNKNOWN) {
                ASSERT_EQ(outbox_db_exec(conn, "ROLLBACK"), OUTBOX_OK) << outbox_last_error();
            }
            ASSERT_EQ(outbox_consumer_settle(&out, consumer, m, conn, OUTBOX_OUTCOME_HANDLER_FAILED, reason.c_str()),
                      OUTBOX_OK)
                << outbox_last_error();
        }
        settled[agg].push_back(out);
        outbox_message_free(m);
    }
    outbox_db_close(conn);
    ASSERT_TRUE(done()) << "healthy settled " << settled["healthy"].size() << " times, poison "
                        << settled["poison"].size();
    const auto &h = settled["healthy"];
    EXPECT_EQ(h[0].action, OUTBOX_SETTLED_REQUEUED);
    EXPECT_EQ(h[0].db_lost, 1) << "the lost database is seen through the db handle";
    EXPECT_EQ(h[0].attempt, 0) << "a lost database is not an attempt";
    EXPECT_EQ(h[1].action, OUTBOX_SETTLED_REQUEUED);
    EXPECT_EQ(h[1].db_lost, 0);
    EXPECT_EQ(h[1].attempt, 1) << "the first real failure is attempt 1, not 2";
    EXPECT_EQ(h[2].action, OUTBOX_SETTLED_ACKED);
    const auto &p = settled["poison"];
    EXPECT_EQ(p[0].action, OUTBOX_SETTLED_REQUEUED);
    EXPECT_EQ(p[0].attempt, 1);
    EXPECT_EQ(p[1].action, OUTBOX_SETTLED_DEAD_LETTERED);
    EXPECT_EQ(p[1].attempt, 2);
    EXPECT_EQ(admin.scalar("SELECT count(*) FROM \"" + schema + "\".effects"), "1");
    const std::string dead_line = "failed 2 time(s), dead-lettering: boom";
    EXPECT_TRUE(std::any_of(log.begin(), log.end(),
                            [&](const std::string &l) { return l.find(dead_line) != std::string::npos; }))
        << "no log line with: " << dead_line;
}

// ---------------------------------------------------------------------------------------------
// outbox_consumer_run when the broker closes all of the consumer's connections (as an operator's
// `rabbitmqctl close_all_connections` or a broker restart does): run reconnects by itself and goes
// on consuming the events published afterwards, once each. With the consumer's own database
// connection (db NULL) and with a lent one (outbox_db_wrap). Each of its connections is closed with
// `rabbitmqctl close_connection`, found by its client-provided name: close_all_connections would
// also close those of the tests that run side by side with this one (ctest runs them in parallel).

int count_lines(ConsumerLogSink &sink, const std::string &s) {
    std::lock_guard<std::mutex> lock(sink.mu);
    return static_cast<int>(std::count_if(sink.lines.begin(), sink.lines.end(),
                                          [&](const std::string &l) { return l.find(s) != std::string::npos; }));
}

class CapiBrokerLossTest : public CapiConsumerTest, public ::testing::WithParamInterface<bool> {};

TEST_P(CapiBrokerLossTest, RunGoesOnConsumingAfterTheBrokerClosedItsConnections) {
    const bool lent = GetParam();
    const std::string name = consumer_name("capi-lost-");
    ASSERT_EQ(outbox_consumer_new(&consumer, cfg, name.c_str()), OUTBOX_OK) << outbox_last_error();
    ConsumerLogSink sink;
    ASSERT_EQ(outbox_consumer_set_logger(consumer, capi_log, &sink), OUTBOX_OK);
    ASSERT_EQ(outbox_consumer_connect(consumer), OUTBOX_OK) << outbox_last_error(); // the queue exists from here

    PGconn *raw = nullptr;
    outbox_db *lent_db = nullptr;
    if (lent) {
        raw = PQconnectdb(pg_url().c_str());
        ASSERT_EQ(PQstatus(raw), CONNECTION_OK) << PQerrorMessage(raw);
        ASSERT_EQ(outbox_db_wrap(&lent_db, raw, cfg), OUTBOX_OK) << outbox_last_error();
    }
    struct CloseLent {
        outbox_db *&db;
        PGconn *&raw;
        ~CloseLent() {
            outbox_db_close(db);
            if (raw != nullptr) {
                PQfinish(raw);
            }
        }
    } close_lent{lent_db, raw};

    RunContext ctx;
    ctx.schema = schema;
    std::atomic<int> run_status{1};
    std::atomic<bool> returned{false};
    std::string run_error; // read after the join
    std::thread runner([&] {
        run_status = outbox_consumer_run(consumer, lent_db, capi_handler, &ctx);
        run_error = outbox_last_error();
        returned = true;
    });
    struct Join {
        outbox_consumer *c;
        std::thread &t;
        ~Join() {
            if (t.joinable()) {
                outbox_consumer_stop(c);
                t.join();
            }
        }
    } join{consumer, runner};

    constexpr int kBatch = 10;
    auto publish = [&](const std::string &prefix) {
        for (int i = 0; i < kBatch; ++i) {
            outbox_event *e = make_event(prefix + std::to_string(i % 3), "PUT", "{\"i\":" + std::to_string(i) + "}");
            ASSERT_EQ(outbox_write(db, e), OUTBOX_OK) << outbox_last_error();
            outbox_event_free(e);
        }
        ASSERT_EQ(relay_all(), kBatch);
    };
    publish("before");
    ASSERT_TRUE(eventually([&] { return ctx.ok.load() == kBatch; }, 20s)) << ctx.ok.load() << " of " << kBatch;

    // The consumer's connections are listed by the broker under their client-provided name.
    const std::string ctl = "timeout 60 " + std::string(OUTBOX_SOURCE_DIR) + "/scripts/services.sh rabbitmqctl -q";
    const std::string conn_name = "\"connection_name\",\"outbox-consumer " + name + "\"";
    std::string listing;
    std::vector<std::string> pids;
    int rc = 0;
    auto listed = [&] {
        pids.clear();
        listing = shell(ctl + " list_connections --no-table-headers pid client_properties", &rc);
        std::istringstream in(listing);
        std::string line;
        while (std::getline(in, line)) {
            if (line.rfind('<', 0) == 0 && line.find(conn_name) != std::string::npos) {
                pids.push_back(line.substr(0, line.find('\t')));
            }
        }
        return rc == 0 && !pids.empty();
    };
    ASSERT_TRUE(eventually(listed, 15s, 200ms)) << "no AMQP connection " << conn_name << ":\n" << listing;

    const int connects_before = count_lines(sink, "connected to RabbitMQ node");
    for (const auto &pid : pids) {
        const std::string out =
            shell(ctl + " close_connection '" + pid + "' 'outbox capi test: connections closed'", &rc);
        ASSERT_EQ(rc, 0) << out;
    }
    ASSERT_TRUE(eventually([&] { return count_lines(sink, "connected to RabbitMQ node") > connects_before; }, 30s))
        << "outbox_consumer_run did not reconnect to RabbitMQ";
    EXPECT_FALSE(returned.load()) << "run returned " << run_status.load() << " after the connections were closed";

    publish("after");
    const bool all = eventually([&] { return ctx.ok.load() == 2 * kBatch; }, 30s);
    outbox_consumer_stop(consumer);
    runner.join();
    EXPECT_TRUE(all) << ctx.ok.load() << " of " << 2 * kBatch << " handled after the broker closed all connections";
    EXPECT_EQ(run_status.load(), OUTBOX_OK) << run_error;
    EXPECT_EQ(admin.scalar("SELECT count(*) FROM \"" + schema + "\".effects"), std::to_string(2 * kBatch));
    EXPECT_EQ(admin.scalar("SELECT count(*) FROM \"" + schema + "\".effects WHERE n <> 1"), "0");
    EXPECT_EQ(inbox_rows("consumer = '" + name + "'"), 2 * kBatch);
    if (lent) {
        EXPECT_EQ(PQstatus(raw), CONNECTION_OK) << "a lent connection is never closed by the library";
    }
}

INSTANTIATE_TEST_SUITE_P(OwnAndLentConnection, CapiBrokerLossTest, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool> &p) { return p.param ? "Lent" : "Own"; });

// Bad arguments of the consumer entry points.
TEST_F(CapiConsumerTest, ConsumerEntryPointsRefuseNullArguments) {
    outbox_consumer *c = reinterpret_cast<outbox_consumer *>(this);
    EXPECT_EQ(outbox_consumer_new(&c, nullptr, "x"), OUTBOX_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(c, nullptr);
    EXPECT_EQ(outbox_consumer_new(&c, cfg, nullptr), OUTBOX_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(outbox_consumer_new(nullptr, cfg, "x"), OUTBOX_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(outbox_consumer_new(&c, cfg, ""), OUTBOX_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(outbox_consumer_new(&c, cfg, std::string(201, 'n').c_str()), OUTBOX_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(outbox_consumer_connect(nullptr), OUTBOX_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(outbox_consumer_run(nullptr, nullptr, capi_handler, nullptr), OUTBOX_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(outbox_consumer_ack(nullptr, nullptr), OUTBOX_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(outbox_consumer_nack(nullptr, nullptr, 1), OUTBOX_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(outbox_consumer_dead_letter(nullptr, nullptr, "x"), OUTBOX_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(outbox_consumer_reset(nullptr), OUTBOX_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(outbox_consumer_begin(nullptr, nullptr, nullptr, nullptr), OUTBOX_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(outbox_consumer_begin(nullptr, db, nullptr, nullptr), OUTBOX_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(outbox_inbox_purge(nullptr, nullptr, 1, 1), OUTBOX_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(outbox_message_body(nullptr, nullptr), nullptr);
    EXPECT_EQ(outbox_message_seq(nullptr), 0);
    EXPECT_EQ(outbox_message_delivery_count(nullptr), -1);
    outbox_consumer_free(nullptr);
    outbox_message_free(nullptr);
    // A consumer with a name but no handler.
    ASSERT_EQ(outbox_consumer_new(&c, cfg, "capi-null-handler"), OUTBOX_OK);
    EXPECT_EQ(outbox_consumer_run(c, nullptr, nullptr, nullptr), OUTBOX_ERR_INVALID_ARGUMENT);
    outbox_consumer_free(c);
}

} // namespace
