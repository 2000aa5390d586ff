// The upgrade from storage version 1 to version 2 in place, with a table holding data (1M rows with
// OUTBOX_IT_UPGRADE_ROWS=1000000; fewer by default, for the test command's time), while writers of
// the previous version and a relay of this one run: nothing lost, nothing reordered, failed events
// still failed, and the old writers go on writing through the view.
#include "relay_fixture.hpp"
#include "retention.hpp"
#include "store.hpp"
#include "waits.hpp"

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <map>
#include <mutex>
#include <thread>

namespace {

using namespace outbox_test;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// Version 1's write statement, as writers of the previous version send it.
std::string v1_write_sql(const outbox::Config &cfg) {
    return "WITH s AS (INSERT INTO " + cfg.aggregates_qualified() +
           " AS a (aggregate_type, aggregate_id, last_seq) VALUES ($1, $2, 1)"
           " ON CONFLICT (aggregate_type, aggregate_id) DO UPDATE SET last_seq = a.last_seq + 1"
           " RETURNING a.aggregate_type, a.aggregate_id, a.last_seq) INSERT INTO " +
           cfg.outbox_qualified() +
           " (aggregate_type, aggregate_id, seq, outbox_id, event_type, operation, payload, metadata,"
           " created_at, next_attempt_at) SELECT s.aggregate_type, s.aggregate_id, s.last_seq, gen_random_uuid(),"
           " 'ProductUpdated', 'PATCH', '{}', '{}', now(), now() FROM s RETURNING seq, outbox_id";
}

class UpgradeTest : public RelayTest {};

TEST_F(UpgradeTest, Version1TableWithDataUpgradesInPlaceWhileOldWritersAndARelayRun) {
    const long rows = std::max(1000L, std::atol(env_or("OUTBOX_IT_UPGRADE_ROWS", "200000").c_str()));
    db->exec_simple("DROP SCHEMA \"" + cfg.schema + "\" CASCADE");
    outbox::schema::migrate(*db, cfg, outbox::schema::What::all, 1);
    const std::string t = table();
    // History: `rows` published events over 1,000 aggregates; then 1,000 pending on a0..a99 (10
    // each), and on f0 a failed head with two events behind it.
    const auto t_fill = Clock::now();
    db->exec_simple("INSERT INTO " + t +
                    " (outbox_id, event_type, aggregate_type, aggregate_id, seq, operation, payload, status,"
                    " published_at, created_at) SELECT gen_random_uuid(), 'ProductCreated', 'PRD', 'a' || (g % 1000),"
                    " g / 1000 + 1, 'POST', '{\"n\":1}', 'PUBLISHED', now() - interval '1 day', now() - interval"
                    " '2 days' FROM generate_series(0, " +
                    std::to_string(rows - 1) + ") g");
    const long per = (rows + 999) / 1000;
    db->exec_simple("INSERT INTO " + t +
                    " (outbox_id, event_type, aggregate_type, aggregate_id, seq, operation, payload)"
                    " SELECT gen_random_uuid(), 'ProductUpdated', 'PRD', 'a' || (g % 100), " +
                    std::to_string(per + 1) + " + g / 100, 'PATCH', '{}' FROM generate_series(0, 999) g");
    db->exec_simple("INSERT INTO " + t +
                    " (outbox_id, event_type, aggregate_type, aggregate_id, seq, operation, payload, status,"
                    " retry_count, error_message) VALUES (gen_random_uuid(), 'X', 'PRD', 'f0', 1, 'POST', '{}',"
                    " 'FAILED', 5, 'boom'), (gen_random_uuid(), 'X', 'PRD', 'f0', 2, 'POST', '{}', 'PENDING', 0, NULL),"
                    " (gen_random_uuid(), 'X', 'PRD', 'f0', 3, 'POST', '{}', 'PENDING', 0, NULL)");
    db->exec_simple("INSERT INTO " + cfg.aggregates_qualified() +
                    " SELECT aggregate_type, aggregate_id, max(seq) FROM " + t + " GROUP BY 1, 2");
    db->exec_simple("ANALYZE " + t);
    const long long fill_ms = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t_fill).count();

    Collector queue(cfg.exchange);
    // A relay of this version, started before the upgrade: it backs off until the tables are there.
    outbox::Relay relay(cfg);
    std::thread relay_thread([&] { relay.run(); });

    // Writers of the previous version on the pending aggregates and new ones, all through.
    std::atomic<bool> stop{false};
    std::mutex mu;
    std::map<std::string, std::vector<std::pair<long, std::string>>> written; // aggregate -> (seq, id)
    std::atomic<long long> slowest_us{0};
    std::vector<std::thread> writers;
    for (int w = 0; w < 2; ++w) {
        writers.emplace_back([&, w] {
            outbox::pg::Conn c = outbox::pg::Conn::open(pg_url());
            const std::string sql = v1_write_sql(cfg);
            for (int i = 0; !stop; ++i) {
                const std::string agg = (i % 2 == 0 ? "a" : "w") + std::to_string((i / 2 + w * 5) % 10);
                const auto t0 = Clock::now();
                outbox::pg::Result r = c.exec(sql, {std::string("PRD"), agg});
                const long long us = std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - t0).count();
                long long prev = slowest_us.load();
                while (us > prev && !slowest_us.compare_exchange_weak(prev, us)) {
                }
                std::lock_guard<std::mutex> lock(mu);
                written[agg].emplace_back(r.get_int(0, 0), std::string(r.get(0, 1)));
            }
        });
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    outbox::pg::Conn m = outbox::pg::Conn::open(pg_url());
    const auto t_mig = Clock::now();
    const outbox::schema::Result res = outbox::schema::migrate(m, cfg);
    const long long migrate_ms = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t_mig).count();
    EXPECT_EQ(res.outbox_from, 1);
    EXPECT_EQ(res.outbox_to, 2);
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));
    stop = true;
    for (auto &w : writers) {
        w.join();
    }
    long total_written = 0;
    for (const auto &[agg, list] : written) {
        total_written += static_cast<long>(list.size());
    }
    ASSERT_GT(total_written, 0);
    // Everything but f0's three is published: the 1,000 pending and every write.
    const long expected = 1000 + total_written;
    const bool drained = eventually(
        [&] { return scalar_long("SELECT count(*) FROM " + t + " WHERE status = 'PENDING'") == 2; }, 90s, 100ms);
    relay.stop();
    relay_thread.join();
    ASSERT_TRUE(drained) << scalar_long("SELECT count(*) FROM " + t + " WHERE status = 'PENDING'") << " pending";
    const auto &msgs = queue.collect(static_cast<size_t>(expected), 10000);
    EXPECT_EQ(static_cast<long>(msgs.size()), expected);

    // Per aggregate, first deliveries in seq order with no gap; every write delivered.
    std::map<std::string, long> last;
    std::map<std::string, bool> seen;
    long out_of_order = 0;
    for (const auto &msg : msgs) {
        if (seen[msg.props.message_id]) {
            continue;
        }
        seen[msg.props.message_id] = true;
        const std::string agg = header_string(msg.props, "outbox-aggregate-id");
        const long seq = std::atol(header_string(msg.props, "outbox-seq").c_str());
        if (last.count(agg) > 0 && seq != last[agg] + 1) {
            ++out_of_order;
        }
        last[agg] = seq;
    }
    EXPECT_EQ(out_of_order, 0) << "per-aggregate order broken across the upgrade";
    for (const auto &[agg, list] : written) {
        for (const auto &[seq, id] : list) {
            EXPECT_TRUE(seen[id]) << agg << "/" << seq << " written by an old writer was not delivered";
        }
    }
    EXPECT_EQ(last.count("f0"), 0U) << "f0's failed head holds its aggregate back";
    EXPECT_EQ(scalar_long("SELECT count(*) FROM " + t +
                          " WHERE aggregate_id = 'f0' AND status = 'FAILED'"
                          " AND retry_count = 5 AND error_message = 'boom'"),
              1);
    EXPECT_EQ(scalar_long("SELECT count(*) FROM " + t + " WHERE status = 'PUBLISHED'"), rows + expected);
    std::printf("[ stats    ] %ld published rows + 1,003 unpublished (filled in %lld ms); migrate took %lld ms; "
                "old writers wrote %ld events, slowest write %lld ms\n",
                rows, fill_ms, migrate_ms, total_written, slowest_us.load() / 1000);
}

// Idempotency keys of events published before the upgrade stay with their version-1 rows: a
// partition drop of version-2 events leaves them (a retried write is still a duplicate), and the
// purge that deletes their rows deletes them too.
TEST_F(UpgradeTest, KeysOfVersion1EventsLiveAsLongAsTheirRows) {
    db->exec_simple("DROP SCHEMA \"" + cfg.schema + "\" CASCADE");
    outbox::schema::migrate(*db, cfg, outbox::schema::What::all, 1);
    db->exec_simple("INSERT INTO " + table() +
                    " (outbox_id, event_type, aggregate_type, aggregate_id, seq, operation, payload, status,"
                    " published_at, created_at, idempotency_key) VALUES (gen_random_uuid(), 'X', 'PRD', 'k1', 1,"
                    " 'POST', '{}', 'PUBLISHED', now() - interval '1 day', now() - interval '1 day', 'old-key')");
    cfg.set("outbox.partition_events", "1000");
    outbox::schema::migrate(*db, cfg, outbox::schema::What::all);
    // 1,000 version-2 events, published two days ago: a whole partition to drop.
    const std::string seq = outbox::stream::position_sequence(cfg);
    db->exec_simple("SELECT setval('" + seq + "', 999)");
    db->exec_simple("INSERT INTO " + events() +
                    " (position, outbox_id, event_type, aggregate_type, aggregate_id, seq, operation, payload)"
                    " SELECT nextval('" +
                    seq +
                    "'), gen_random_uuid(), 'X', 'PRD', 'n' || g, 1, 'POST', '{}'"
                    " FROM generate_series(1, 1000) g");
    db->exec_simple("INSERT INTO " + outbox::stream::receipts_table(cfg) +
                    " VALUES (1000, 1999, now() - interval '2 days')");
    db->exec_simple("UPDATE " + outbox::stream::relay_table(cfg) + " SET cursor = 1999");
    const std::string keys = outbox::stream::keys_table(cfg);
    // Younger than the version-1 row, older than the partition: the partition goes, the row stays.
    const outbox::retention::PurgeResult first = outbox::retention::purge(*db, cfg, 36 * 3600, 100);
    EXPECT_GE(first.partitions, 1);
    EXPECT_EQ(first.events, 1000);
    EXPECT_EQ(scalar_long("SELECT count(*) FROM " + keys + " WHERE idempotency_key = 'old-key'"), 1);
    outbox::Event ev;
    ev.set("aggregate_type", "PRD");
    ev.set("aggregate_id", "k1");
    ev.set("operation", "POST");
    ev.set("payload", "{}");
    ev.set("idempotency_key", "old-key");
    EXPECT_THROW(outbox::store::write(*db, cfg, ev), outbox::Error) << "still a duplicate";
    const outbox::retention::PurgeResult second = outbox::retention::purge(*db, cfg, 12 * 3600, 100);
    EXPECT_EQ(second.events, 1);
    EXPECT_EQ(scalar_long("SELECT count(*) FROM " + keys + " WHERE idempotency_key = 'old-key'"), 0);
}

} // namespace
