// The partitioned inbox (inbox schema version 3) against the real PostgreSQL: where rows land,
// deduplication across partitions and across the upgrade from version 2, partitions made ahead,
// rows moved out of the default partition, and purges that drop whole partitions.
#include "config.hpp"
#include "inbox.hpp"
#include "pg.hpp"
#include "schema.hpp"
#include "test_env.hpp"
#include "uuid.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace {

using namespace outbox_test;

std::string v4_id(std::mt19937_64 &rng) {
    char buf[40];
    const uint64_t a = rng();
    const uint64_t b = rng();
    std::snprintf(buf, sizeof buf, "%08x-%04x-4%03x-a%03x-%012llx", static_cast<unsigned>(a >> 32),
                  static_cast<unsigned>(a >> 16) & 0xffffU, static_cast<unsigned>(a) & 0xfffU,
                  static_cast<unsigned>(b >> 48) & 0xfffU, static_cast<unsigned long long>(b & 0xffffffffffffULL));
    return buf;
}

// A v7 id for the given time (uuid::v7 never goes back in time within a thread; these must).
std::string v7_at(int64_t ms, std::mt19937_64 &rng) {
    char buf[64];
    const uint64_t r = rng();
    const auto t = static_cast<unsigned long long>(ms);
    std::snprintf(buf, sizeof buf, "%08llx-%04llx-7%03x-b%03x-%012llx", t >> 16, t & 0xffffULL,
                  static_cast<unsigned>(r) & 0xfffU, static_cast<unsigned>(r >> 12) & 0xfffU,
                  static_cast<unsigned long long>(r >> 16) & 0xffffffffffffULL);
    return buf;
}

class InboxTest : public ::testing::Test {
  protected:
    void SetUp() override {
        std::random_device rd;
        rng.seed(rd());
        cfg.set("outbox.schema", "ib_" + std::to_string(rng() % 100000000));
        db.emplace(outbox::pg::Conn::open(pg_url()));
    }
    void TearDown() override {
        if (db && db->ok()) {
            db->exec_simple("DROP SCHEMA IF EXISTS \"" + cfg.schema + "\" CASCADE");
        }
    }

    std::string scalar(const std::string &sql, const outbox::pg::Params &params = {}) {
        outbox::pg::Result r = db->exec(sql, params);
        return r.rows() == 0 || r.is_null(0, 0) ? std::string("<null>") : std::string(r.get(0, 0));
    }
    std::string inbox() const { return cfg.inbox_qualified(); }
    std::string table(const std::string &suffix) const {
        return "\"" + cfg.schema + "\".\"" + cfg.inbox_table + suffix + "\"";
    }

    bool dedupe(const std::string &id, const std::string &consumer = "search") {
        outbox::inbox::Key key{consumer, id, "PRD", "1", 0};
        return outbox::inbox::dedupe(*db, cfg, key, false).first_time;
    }
    // The partition holding the consumer's row for id.
    std::string where(const std::string &id, const std::string &consumer = "search") {
        return scalar("SELECT tableoid::regclass::text FROM " + inbox() + " WHERE consumer = $1 AND outbox_id = $2",
                      {consumer, id});
    }
    std::string partition_count() {
        return scalar("SELECT count(*) FROM pg_inherits WHERE inhparent = CAST($1 AS regclass)", {inbox()});
    }
    int64_t now_ms() { return outbox::inbox::db_now_ms(*db); }

    outbox::Config cfg;
    std::optional<outbox::pg::Conn> db;
    std::mt19937_64 rng;
};

TEST_F(InboxTest, MigrateMakesTheCurrentPartitionAndThoseAheadOnce) {
    outbox::schema::Result r = outbox::schema::migrate(*db, cfg);
    EXPECT_EQ(r.inbox_to, 4);
    // _before, the default, the current partition and inbox.partitions_ahead (3) more.
    EXPECT_EQ(partition_count(), "6");
    outbox::schema::migrate(*db, cfg);
    EXPECT_EQ(partition_count(), "6") << "a second migrate makes nothing new";
    EXPECT_EQ(scalar("SELECT relkind FROM pg_class WHERE oid = CAST($1 AS regclass)", {inbox()}), "p");
}

TEST_F(InboxTest, EachIdLandsInThePartitionOfItsTimeAndIsCaughtThereWhenRedelivered) {
    outbox::schema::migrate(*db, cfg);
    const int64_t now = now_ms();
    const std::string current = v7_at(now, rng);
    const std::string later = v7_at(now + 2LL * 86400 * 1000, rng);
    const std::string far = v7_at(now + 400LL * 86400 * 1000, rng);
    const std::string old = v7_at(now - 30LL * 86400 * 1000, rng);
    const std::string random = v4_id(rng);
    for (const std::string &id : {current, later, far, old, random}) {
        EXPECT_TRUE(dedupe(id)) << id;
        EXPECT_TRUE(dedupe(id, "cache")) << "another consumer has its own row: " << id;
    }
    for (const std::string &id : {current, later, far, old, random}) {
        EXPECT_FALSE(dedupe(id)) << "a redelivery is caught: " << id;
        EXPECT_FALSE(dedupe(id, "cache")) << id;
    }
    EXPECT_NE(where(current).find("_p"), std::string::npos) << where(current);
    EXPECT_NE(where(later), where(current)) << "two days later is another partition";
    EXPECT_NE(where(later).find("_p"), std::string::npos) << where(later);
    EXPECT_NE(where(far).find("_default"), std::string::npos) << where(far);
    EXPECT_NE(where(old).find("_before"), std::string::npos) << where(old);
    EXPECT_NE(where(random).find("_before"), std::string::npos) << "ids that are not v7 carry no time";
    EXPECT_EQ(scalar("SELECT count(*) FROM " + inbox()), "10");
}

TEST_F(InboxTest, RowsInTheDefaultPartitionMoveToTheirPartitionWhenItIsMade) {
    outbox::schema::migrate(*db, cfg);
    const int64_t now = now_ms();
    const int64_t ahead = now + 20LL * 86400 * 1000;
    const std::string id = v7_at(ahead, rng);
    ASSERT_TRUE(dedupe(id));
    ASSERT_NE(where(id).find("_default"), std::string::npos);
    outbox::inbox::ensure_partitions(*db, cfg, ahead);
    EXPECT_NE(where(id).find("_p"), std::string::npos) << where(id);
    EXPECT_EQ(scalar("SELECT count(*) FROM " + table("_default")), "0");
    EXPECT_FALSE(dedupe(id)) << "still caught after the move";
    EXPECT_EQ(partition_count(), std::to_string(2 + 4 + 4)) << "the new now's day and 3 ahead, not the days between";
}

TEST_F(InboxTest, UpgradeFromVersion2KeepsItsRowsAndDeduplicatesAgainstThem) {
    cfg.set("inbox.retention_s", "0");
    outbox::schema::migrate(*db, cfg, outbox::schema::What::all, 2);
    ASSERT_EQ(outbox::schema::installed_version(*db, cfg, outbox::schema::What::inbox), 2);
    // Rows as version 2 stored them: v7 ids of the last days and random ids, 20,000 of them.
    db->exec("INSERT INTO " + inbox() +
                 " (consumer, outbox_id, processed_at) SELECT 'search', CASE WHEN g % 2 = 0 THEN gen_random_uuid() ELSE"
                 " CAST(lpad(to_hex(CAST(floor(extract(epoch FROM now()) * 1000) AS bigint) - g * 1000), 12, '0') ||"
                 " '7000a000' || lpad(to_hex(g), 12, '0') AS uuid) END, now() - g * interval '1 second'"
                 " FROM generate_series(1, 20000) g",
             {});
    const std::string v7_row =
        scalar("SELECT outbox_id FROM " + inbox() + " WHERE substr(CAST(outbox_id AS text), 15, 1) = '7' LIMIT 1");
    const std::string v4_row =
        scalar("SELECT outbox_id FROM " + inbox() + " WHERE substr(CAST(outbox_id AS text), 15, 1) = '4' LIMIT 1");
    ASSERT_NE(outbox::uuid::v7_millis(v7_row), 0U) << v7_row;
    db->exec_simple("CREATE ROLE \"" + cfg.schema + "_reader\" NOLOGIN");
    db->exec_simple("GRANT SELECT, INSERT ON " + inbox() + " TO \"" + cfg.schema + "_reader\"");

    outbox::schema::Result r = outbox::schema::migrate(*db, cfg);
    EXPECT_EQ(r.inbox_from, 2);
    EXPECT_EQ(r.inbox_to, 4); // version 4: the parked aggregates' tables
    EXPECT_EQ(scalar("SELECT count(*) FROM " + table("_v1")), "20000") << "the rows stay, in the version-1 table";
    EXPECT_EQ(scalar("SELECT count(*) FROM " + inbox()), "0");
    EXPECT_FALSE(dedupe(v7_row)) << "an event recorded before the upgrade is still a duplicate";
    EXPECT_FALSE(dedupe(v4_row));
    EXPECT_TRUE(dedupe(v7_row, "cache")) << "for another consumer it is new";
    EXPECT_TRUE(dedupe(v7_at(now_ms(), rng)));
    EXPECT_EQ(scalar("SELECT count(*) FROM " + inbox()), "2");
    EXPECT_EQ(
        scalar("SELECT has_table_privilege($1, CAST($2 AS regclass), 'INSERT')", {cfg.schema + "_reader", inbox()}),
        "t")
        << "the partitioned table has the grants of the version-1 table";

    // A purge removes old rows from the version-1 table as it did before the upgrade.
    const int64_t purged = outbox::inbox::purge(*db, cfg, 10000, 500);
    EXPECT_EQ(purged, 20000 - 10000 + 1) << "rows processed over 10,000 s ago (g > 10000), and not the new ones";
    db->exec_simple("DROP OWNED BY \"" + cfg.schema + "_reader\"");
    db->exec_simple("DROP ROLE \"" + cfg.schema + "_reader\"");
}

TEST_F(InboxTest, PurgeDropsPartitionsWhollyPastTheCutoffAndDeletesOnlyInTheUndatedOnes) {
    cfg.set("inbox.partition_s", "60");
    cfg.set("inbox.retention_s", "0");
    outbox::schema::migrate(*db, cfg);
    const int64_t now = now_ms();
    const int64_t minute = now / 60000 * 60000;
    // 50 events in the current minute's partition, 40 in the next, 30 with random ids (_before).
    const std::string first = v7_at(minute, rng);
    ASSERT_TRUE(dedupe(first));
    for (int i = 1; i < 50; ++i) {
        ASSERT_TRUE(dedupe(v7_at(minute + i, rng)));
    }
    std::string late;
    for (int i = 0; i < 40; ++i) {
        late = v7_at(minute + 60000 + i, rng);
        ASSERT_TRUE(dedupe(late));
    }
    for (int i = 0; i < 30; ++i) {
        ASSERT_TRUE(dedupe(v4_id(rng)));
    }
    // A delivery that is still recent at the cutoff keeps its whole partition.
    db->exec("UPDATE " + inbox() + " SET processed_at = now() + interval '1 hour' WHERE outbox_id = $1", {late});
    const std::string first_partition = where(first);

    // Ten minutes on, purging rows older than 5 minutes.
    const int64_t purged = outbox::inbox::purge_at(*db, cfg, 300, 7, now + 600000);
    EXPECT_EQ(purged, 50 + 30) << "the first partition dropped, the random ids deleted";
    EXPECT_EQ(scalar("SELECT to_regclass($1)", {first_partition}), "<null>") << first_partition << " is dropped";
    // It was taken out as "<inbox>_x<date>", then dropped: no table of either name is left.
    const std::string detached = std::string(first_partition).replace(first_partition.rfind("_p"), 2, "_x");
    EXPECT_EQ(scalar("SELECT to_regclass($1)", {detached}), "<null>") << detached << " is dropped";
    EXPECT_EQ(scalar("SELECT count(*) FROM " + inbox()), "40") << "the partition of the late delivery is kept whole";
    EXPECT_FALSE(dedupe(late));
    // Partitions are made up to 3 ahead of the purge's clock.
    const int64_t upper = std::stoll(
        scalar("SELECT max(CAST(substring(pg_get_expr(c.relpartbound, c.oid) FROM 'TO \\(''?(\\d+)') AS bigint)) FROM"
               " pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid WHERE i.inhparent = CAST($1 AS regclass)",
               {inbox()}));
    EXPECT_EQ(upper, (now + 600000) / 60000 * 60000 + 4 * 60000);

    // Once the late row is old too, its partition goes.
    db->exec("UPDATE " + inbox() + " SET processed_at = now() WHERE outbox_id = $1", {late});
    EXPECT_EQ(outbox::inbox::purge_at(*db, cfg, 300, 7, now + 600000), 40);
    EXPECT_EQ(scalar("SELECT count(*) FROM " + inbox()), "0");
}

TEST_F(InboxTest, APurgeWaitsOutAConsumersOpenTransactionWithoutHoldingOthersUp) {
    cfg.set("inbox.partition_s", "60");
    cfg.set("inbox.retention_s", "0");
    outbox::schema::migrate(*db, cfg);
    const int64_t now = now_ms();
    ASSERT_TRUE(dedupe(v7_at(now / 60000 * 60000, rng)));
    // A consumer's handler transaction stays open for 1.5 s on the inbox.
    outbox::pg::Conn handler = outbox::pg::Conn::open(pg_url());
    handler.exec_simple("BEGIN");
    outbox::inbox::Key key{"search", v7_at(now, rng), "PRD", "1", 0};
    ASSERT_TRUE(outbox::inbox::dedupe(handler, cfg, key, false).first_time);
    std::vector<std::string> others;
    for (int i = 0; i < 5; ++i) {
        others.push_back(v7_at(now + i, rng));
    }
    std::thread closer([&] {
        // Meanwhile other consumers go on: each waits for the purge's lock 100 ms at most.
        outbox::pg::Conn other = outbox::pg::Conn::open(pg_url());
        std::this_thread::sleep_for(std::chrono::milliseconds(1000));
        for (const std::string &id : others) {
            const auto t0 = std::chrono::steady_clock::now();
            outbox::inbox::Key k{"cache", id, "PRD", "1", 0};
            EXPECT_TRUE(outbox::inbox::dedupe(other, cfg, k, false).first_time);
            EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(1000));
            std::this_thread::sleep_for(std::chrono::milliseconds(100));
        }
        handler.exec_simple("COMMIT");
    });
    const auto t0 = std::chrono::steady_clock::now();
    const int64_t purged = outbox::inbox::purge_at(*db, cfg, 60, 100, now + 600000);
    const auto waited = std::chrono::steady_clock::now() - t0;
    closer.join();
    EXPECT_GE(purged, 1) << "counted before the lock: rows committed while it waited go uncounted";
    EXPECT_GT(waited, std::chrono::milliseconds(1000)) << "the purge waited for the open transaction";
    EXPECT_EQ(scalar("SELECT count(*) FROM " + inbox()), "0") << "every row, the late ones too, was past the cutoff";
}

TEST_F(InboxTest, TwoPurgesAtOnceDropEachPartitionOnce) {
    cfg.set("inbox.partition_s", "60");
    cfg.set("inbox.retention_s", "0");
    outbox::schema::migrate(*db, cfg);
    const int64_t now = now_ms();
    for (int i = 0; i < 40; ++i) {
        ASSERT_TRUE(dedupe(v7_at(now / 60000 * 60000 + (i % 4) * 60000 + i, rng)));
    }
    std::vector<int64_t> got(4, -1);
    std::vector<std::string> errors(4);
    std::vector<std::thread> purgers;
    for (size_t t = 0; t < got.size(); ++t) {
        purgers.emplace_back([&, t] {
            try {
                outbox::pg::Conn c = outbox::pg::Conn::open(pg_url());
                got[t] = outbox::inbox::purge_at(c, cfg, 60, 100, now + 900000);
            } catch (const std::exception &e) {
                errors[t] = e.what();
            }
        });
    }
    for (std::thread &t : purgers) {
        t.join();
    }
    for (size_t t = 0; t < got.size(); ++t) {
        EXPECT_EQ(errors[t], "") << "purge " << t;
        EXPECT_GE(got[t], 0) << "purge " << t;
    }
    EXPECT_EQ(got[0] + got[1] + got[2] + got[3], 40) << "each partition's rows counted by the purge that dropped it";
    EXPECT_EQ(scalar("SELECT count(*) FROM " + inbox()), "0");
    EXPECT_EQ(partition_count(), "6") << "_before, the default, and the new now's partition and 3 ahead, once each";
}

TEST_F(InboxTest, PurgeStillRefusesAnAgeBelowTheRetention) {
    outbox::schema::migrate(*db, cfg);
    EXPECT_THROW(outbox::inbox::purge(*db, cfg, 60, 100), outbox::Error);
}

} // namespace
