// The relay's claim query must find due work through indexes, never a sequential scan, on a
// table holding mostly published history (100k published + 1k pending).
#include "config.hpp"
#include "pg.hpp"
#include "schema.hpp"
#include "store.hpp"
#include "test_env.hpp"

#include <gtest/gtest.h>

#include <cstdio>
#include <random>

using namespace outbox;

TEST(ClaimPlan, PendingWorkQueryUsesAnIndex) {
    pg::Conn conn = pg::Conn::open(outbox_test::pg_url());
    Config cfg;
    std::random_device rd;
    cfg.set("outbox.schema", "plan_" + std::to_string(rd() % 1000000));
    schema::migrate(conn, cfg);
    const std::string t = cfg.outbox_qualified();
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
    pg::Result r = conn.exec("EXPLAIN " + store::claim_sql(cfg), {std::string("500")});
    std::string plan;
    for (int i = 0; i < r.rows(); ++i) {
        plan += std::string(r.get(i, 0)) + "\n";
    }
    // And it really returns the due heads: 1000 pending rows over 5000 aggregates, one each.
    pg::Result claimed = conn.exec(store::claim_sql(cfg), {std::string("500")});
    conn.exec_simple("ROLLBACK");
    conn.exec_simple("DROP SCHEMA " + cfg.schema + " CASCADE");

    std::printf("%s", plan.c_str());
    EXPECT_EQ(plan.find("Seq Scan"), std::string::npos) << plan;
    EXPECT_NE(plan.find("outbox_pending_idx"), std::string::npos) << plan;
    EXPECT_EQ(claimed.rows(), 500);
}
