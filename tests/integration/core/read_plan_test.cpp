// The relay's read (storage version 2) must find new events through the position index, never a
// sequential scan, and its cost must not grow with history (100k published events beneath) or with
// a backlog concentrated on one aggregate; nor may the monitoring view's pending count. Cost is
// measured in buffers touched (deterministic), not time.
#include "config.hpp"
#include "pg.hpp"
#include "retention.hpp"
#include "schema.hpp"
#include "stream.hpp"
#include "test_env.hpp"

#include <gtest/gtest.h>

#include <cstdio>
#include <random>
#include <regex>
#include <thread>

using namespace outbox;

namespace {

class ReadPlan : public ::testing::Test {
  protected:
    void SetUp() override {
        std::random_device rd;
        cfg.set("outbox.schema", "plan_" + std::to_string(rd() % 1000000));
        schema::migrate(conn, cfg);
        t = cfg.outbox_qualified();
    }
    void TearDown() override { conn.exec_simple("DROP SCHEMA " + cfg.schema + " CASCADE"); }

    std::string explain(const std::string &options, const std::string &sql, const pg::Params &params) {
        pg::Result r = conn.exec("EXPLAIN (" + options + ") " + sql, params);
        std::string plan;
        for (int i = 0; i < r.rows(); ++i) {
            plan += std::string(r.get(i, 0)) + "\n";
        }
        return plan;
    }

    // Sum of "shared hit=N read=M" over the plan's top line (the whole statement).
    static long buffers(const std::string &plan) {
        std::smatch m;
        long total = 0;
        std::string first = plan.substr(0, plan.find("Planning"));
        std::regex re("Buffers: shared(?: hit=(\\d+))?(?: read=(\\d+))?");
        if (std::regex_search(first, m, re)) {
            total += m[1].matched ? std::stol(m[1]) : 0;
            total += m[2].matched ? std::stol(m[2]) : 0;
        }
        return total;
    }

    pg::Conn conn = pg::Conn::open(outbox_test::pg_url());
    Config cfg;
    std::string t;
};

} // namespace

namespace {
// Events at positions [from, from + n) of aggregate `agg` (or 'a' || g % spread when spread > 0).
void insert_events(pg::Conn &conn, const Config &cfg, int64_t from, int64_t n, const std::string &agg, int spread) {
    const std::string id = spread > 0 ? "'a' || (g % " + std::to_string(spread) + ")" : "'" + agg + "'";
    conn.exec_simple("INSERT INTO " + stream::events_table(cfg) +
                     " (position, outbox_id, event_type, aggregate_type, aggregate_id, seq, operation, payload)"
                     " SELECT g, gen_random_uuid(), 'ProductCreated', 'PRD', " +
                     id +
                     ", g, 'POST', '{}'"
                     " FROM generate_series(" +
                     std::to_string(from) + ", " + std::to_string(from + n - 1) + ") g");
    conn.exec_simple("SELECT setval('" + stream::position_sequence(cfg) + "', " + std::to_string(from + n - 1) + ")");
    conn.exec_simple("ANALYZE " + stream::events_table(cfg));
}
} // namespace

TEST_F(ReadPlan, NewEventsAreFoundThroughThePositionIndexAmongMuchHistory) {
    auto cost = [&](int64_t frontier) {
        const pg::Params params{std::string("{}"), std::to_string(frontier), std::string("500"), std::string("{}")};
        std::string plan = explain("ANALYZE, BUFFERS", stream::read_sql(cfg), params);
        pg::Result rows = conn.exec(stream::read_sql(cfg), params);
        return std::make_tuple(plan, buffers(plan), rows.rows());
    };
    insert_events(conn, cfg, 1, 1000, "", 500);
    const auto [fresh_plan, fresh, fresh_rows] = cost(0);
    conn.exec_simple("TRUNCATE " + stream::events_table(cfg));
    insert_events(conn, cfg, 1, 100000, "", 5000); // published history
    insert_events(conn, cfg, 100001, 1000, "", 500);
    conn.exec_simple("UPDATE " + stream::relay_table(cfg) + " SET cursor = 100000");
    const auto [plan, deep, rows] = cost(100000);
    std::printf("read plan:\n%s\nbuffers: fresh table %ld, under 100k published %ld\n", plan.c_str(), fresh, deep);
    EXPECT_EQ(fresh_rows, 500);
    EXPECT_EQ(rows, 500);
    EXPECT_EQ(plan.find("Seq Scan on " + cfg.table + "_e00000000000000 "), std::string::npos)
        << "the partition holding the history is read through its index:\n"
        << plan;
    EXPECT_LT(deep, fresh + 20) << "the read's cost must not grow with the events beneath it";
    EXPECT_GT(deep, 0);

    // The documents' pending count through the view: bounded by the backlog, not the history.
    const std::string pending =
        explain("ANALYZE, BUFFERS", "SELECT count(*) FROM " + t + " WHERE status = 'PENDING'", {});
    EXPECT_EQ(conn.exec("SELECT count(*) FROM " + t + " WHERE status = 'PENDING'").get_int(0, 0), 1000);
    EXPECT_LT(buffers(pending), 5000) << pending;
    EXPECT_EQ(pending.find("Seq Scan on " + cfg.table + "_e00000000000000 "), std::string::npos) << pending;
}

TEST_F(ReadPlan, ReadCostDoesNotGrowWithABacklogOnOneAggregate) {
    auto cost = [&]() {
        const pg::Params params{std::string("{}"), std::string("0"), std::string("500"), std::string("{}")};
        return buffers(explain("ANALYZE, BUFFERS", stream::read_sql(cfg), params));
    };
    insert_events(conn, cfg, 1, 200, "small", 0);
    const long small = cost();
    conn.exec_simple("TRUNCATE " + stream::events_table(cfg));
    insert_events(conn, cfg, 1, 20000, "hot", 0);
    const long big = cost();
    std::printf("buffers: 200 events %ld; 20000 events on one aggregate %ld\n", small, big);
    // A read takes a batch in position order, however deep the backlog.
    EXPECT_LT(big, small + 40);
    EXPECT_GT(big, 0);
}

// A run of gaps is read again as one range, through the position index: a sequence that jumped by
// 100,000 (a rolled-back bulk write) costs a recheck what the events in it cost, not its width.
TEST_F(ReadPlan, AWideRunOfGapsIsReadAgainThroughThePositionIndex) {
    insert_events(conn, cfg, 1, 100000, "", 5000); // history beneath
    insert_events(conn, cfg, 200001, 10, "", 5);   // past a jump of 100,000 positions
    const pg::Params params{std::string("{100001}"), std::string("200010"), std::string("500"),
                            std::string("{200000}")};
    const std::string plan = explain("ANALYZE, BUFFERS", stream::read_sql(cfg), params);
    const long cost = buffers(plan);
    std::printf("read plan, a run of 100,000 gaps:\n%s\nbuffers %ld\n", plan.c_str(), cost);
    EXPECT_EQ(conn.exec(stream::read_sql(cfg), params).rows(), 1) << "the snapshot's row alone";
    EXPECT_EQ(plan.find("Seq Scan on " + cfg.table + "_e00000000000000 "), std::string::npos)
        << "the partition holding the history is read through its index:\n"
        << plan;
    EXPECT_LT(cost, 100) << plan;
}

// Replay and the per-aggregate lookups find an aggregate's events in a closed partition through
// its aggregate index, which the relay's indexer builds in the background (and migrate as the
// owner), never by scanning the history; partitions still written go without it.
TEST_F(ReadPlan, AClosedPartitionGetsItsAggregateIndexForReplay) {
    conn.exec_simple(outbox_test::drop_outbox_partitions_sql(cfg.schema, cfg.table)); // made by migrate
    cfg.set("outbox.partition_events", "1000");
    cfg.set("pg.url", outbox_test::pg_url());
    insert_events(conn, cfg, 1, 5000, "", 500);
    retention::ensure_partitions(conn, cfg); // [0, 1000) ... [7000, 8000), the rows moved in
    conn.exec_simple("UPDATE " + stream::relay_table(cfg) + " SET cursor = 5000");
    auto valid_indexes = [&] {
        return conn
            .exec("SELECT count(*) FROM pg_inherits i JOIN pg_index x ON x.indrelid = i.inhrelid WHERE"
                  " i.inhparent = CAST($1 AS regclass) AND NOT x.indisprimary AND x.indisvalid",
                  {stream::events_table(cfg)})
            .get_int(0, 0);
    };
    {
        retention::Indexer indexer;
        for (int i = 0; i < 300 && valid_indexes() < 5; ++i) {
            EXPECT_EQ(indexer.tick(conn, cfg), "");
            std::this_thread::sleep_for(std::chrono::milliseconds(100));
        }
    }
    EXPECT_EQ(valid_indexes(), 5) << "[0, 1000) ... [4000, 5000) are closed; [5000, 6000) holds the cursor's next";
    conn.exec_simple("ANALYZE " + stream::events_table(cfg));
    const std::string replay = explain("ANALYZE, BUFFERS",
                                       "SELECT seq FROM " + t +
                                           " WHERE aggregate_type = 'PRD' AND aggregate_id = 'a7' AND seq >= 0"
                                           " ORDER BY seq",
                                       {});
    EXPECT_NE(replay.find(cfg.table + "_a00000000001000"), std::string::npos) << replay;
    EXPECT_EQ(replay.find("Seq Scan on " + cfg.table + "_e00000000001000"), std::string::npos) << replay;
    EXPECT_EQ(
        conn.exec("SELECT count(*) FROM " + t + " WHERE aggregate_type = 'PRD' AND aggregate_id = 'a7'").get_int(0, 0),
        10);
    // The owner's synchronous way: the next partition once the cursor has passed it.
    conn.exec_simple("UPDATE " + stream::relay_table(cfg) + " SET cursor = 5999");
    EXPECT_EQ(retention::index_closed_partitions(conn, cfg), 1);
    EXPECT_EQ(retention::index_closed_partitions(conn, cfg), 0);
    EXPECT_EQ(valid_indexes(), 6);
}
