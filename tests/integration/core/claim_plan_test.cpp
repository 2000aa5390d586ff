// The relay's claim must find due work through indexes, never a sequential scan, and its cost
// must not grow with the backlog: not with history (100k published rows), not with a backlog
// concentrated on one aggregate. Cost is measured in buffers touched (deterministic), not time.
#include "config.hpp"
#include "pg.hpp"
#include "schema.hpp"
#include "store.hpp"
#include "test_env.hpp"

#include <gtest/gtest.h>

#include <cstdio>
#include <random>
#include <regex>

using namespace outbox;

namespace {

class ClaimPlan : public ::testing::Test {
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

TEST_F(ClaimPlan, PendingWorkIsFoundThroughIndexesAmongMuchHistory) {
    conn.exec_simple("INSERT INTO " + t +
                     " (outbox_id, event_type, aggregate_type, aggregate_id, seq, operation, payload, status,"
                     " published_at) SELECT gen_random_uuid(), 'ProductCreated', 'PRD', 'a' || (g % 5000),"
                     " g / 5000 + 1, 'POST', '{}', 'PUBLISHED', now() FROM generate_series(0, 99999) g");
    conn.exec_simple("INSERT INTO " + t +
                     " (outbox_id, event_type, aggregate_type, aggregate_id, seq, operation, payload)"
                     " SELECT gen_random_uuid(), 'ProductCreated', 'PRD', 'a' || (g % 5000), 100 + g / 5000,"
                     " 'POST', '{}' FROM generate_series(0, 999) g");
    conn.exec_simple("ANALYZE " + t);

    conn.exec_simple("BEGIN");
    std::string visit = explain("COSTS OFF", store::visit_sql(cfg), {std::string(), std::string(), std::string("2000")});
    pg::Result heads = conn.exec(store::visit_sql(cfg), {std::string(), std::string(), std::string("2000")});
    std::string types = "{", ids = "{", seqs = "{";
    for (int i = 0; i < heads.rows() && i < 500; ++i) {
        types += std::string(i ? "," : "") + "PRD";
        ids += std::string(i ? "," : "") + std::string(heads.get(i, 1));
        seqs += std::string(i ? "," : "") + std::string(heads.get(i, 2));
    }
    types += "}";
    ids += "}";
    seqs += "}";
    pg::Params claim_params{types, ids, seqs, std::string("500")};
    std::string claim = explain("COSTS OFF", store::claim_sql(cfg), claim_params);
    pg::Result claimed = conn.exec(store::claim_sql(cfg), claim_params);
    conn.exec_simple("ROLLBACK");
    std::printf("visit plan:\n%s\nclaim plan:\n%s", visit.c_str(), claim.c_str());

    EXPECT_EQ(heads.rows(), 1000) << "one head per aggregate with pending work";
    for (int i = 0; i < heads.rows(); ++i) {
        ASSERT_EQ(heads.get(i, 3), "t") << "every visited head is due";
    }
    EXPECT_EQ(visit.find("Seq Scan"), std::string::npos) << visit;
    EXPECT_NE(visit.find("outbox_unpublished_idx"), std::string::npos) << visit;
    EXPECT_EQ(claim.find("Seq Scan"), std::string::npos) << claim;
    EXPECT_EQ(claimed.rows(), 500);
}

TEST_F(ClaimPlan, ClaimCostDoesNotGrowWithABacklogOnOneAggregate) {
    auto load = [&](int events, const std::string &agg) {
        conn.exec_simple("INSERT INTO " + t +
                         " (outbox_id, event_type, aggregate_type, aggregate_id, seq, operation, payload)"
                         " SELECT gen_random_uuid(), 'ProductCreated', 'PRD', '" + agg +
                         "', g, 'POST', '{}' FROM generate_series(1, " + std::to_string(events) + ") g");
        conn.exec_simple("ANALYZE " + t);
    };
    auto cost = [&]() {
        conn.exec_simple("BEGIN");
        std::string v = explain("ANALYZE, BUFFERS", store::visit_sql(cfg), {std::string(), std::string(), std::string("2000")});
        pg::Result heads = conn.exec(store::visit_sql(cfg), {std::string(), std::string(), std::string("2000")});
        std::string c = explain("ANALYZE, BUFFERS", store::claim_sql(cfg),
                                {"{PRD}", "{" + std::string(heads.get(0, 1)) + "}", "{" + std::string(heads.get(0, 2)) + "}",
                                 std::string("500")});
        conn.exec_simple("ROLLBACK");
        return std::make_pair(buffers(v), buffers(c));
    };
    load(200, "small");
    auto small = cost();
    conn.exec_simple("DELETE FROM " + t);
    load(20000, "hot");
    auto big = cost();
    std::printf("buffers: 200 events visit %ld claim %ld; 20000 events visit %ld claim %ld\n", small.first,
                small.second, big.first, big.second);
    // A claim touches the head and at most claim_depth followers, however deep the backlog:
    // 100x the events must not cost more than a few extra index pages.
    EXPECT_LT(big.first, small.first + 20);
    EXPECT_LT(big.second, small.second + 40);
    EXPECT_GT(big.second, 0);
}
