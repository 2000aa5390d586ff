// The relay with relay.overlap (as outbox_relay_run() always steps): the next batch goes out while
// a batch's confirms come in, and a step records its own batch only. Nothing is lost, nothing is
// published twice without need, per-aggregate order holds, and what a step leaves in flight is
// recorded by the next step, by settle(), or at the end of run().
#include "relay_fixture.hpp"

#include <atomic>
#include <chrono>
#include <map>
#include <set>
#include <thread>

using namespace outbox_test;

namespace {

// Every message once, and per aggregate in seq order from 1 on; returns the number of aggregates.
size_t expect_once_in_order(const std::vector<outbox::amqp::Message> &msgs) {
    std::set<std::string> ids;
    std::map<std::string, long> last_seq;
    for (const outbox::amqp::Message &m : msgs) {
        EXPECT_TRUE(ids.insert(m.props.message_id).second) << "published twice: " << m.props.message_id;
        const std::string agg = header_string(m.props, "outbox-aggregate-id");
        const long seq = std::stol(header_string(m.props, "outbox-seq"));
        EXPECT_EQ(seq, last_seq[agg] + 1) << agg << ": out of order";
        last_seq[agg] = seq;
    }
    return last_seq.size();
}

} // namespace

class RelayOverlapTest : public RelayTest {
  protected:
    void SetUp() override {
        RelayTest::SetUp();
        cfg.set("relay.overlap", "true");
    }

    long published_rows() { return scalar_long("SELECT count(*) FROM " + table() + " WHERE status = 'PUBLISHED'"); }
    long cursor() {
        return scalar_long("SELECT cursor FROM " + outbox::stream::relay_table(cfg) + " WHERE name = 'default'");
    }
};

TEST_F(RelayOverlapTest, ABacklogGoesOutOnceInOrderAndEveryStepRecordsItsOwnBatch) {
    cfg.set("relay.batch_size", "500");
    Collector queue(cfg.exchange);
    write_events(6000, 150);
    outbox::Relay relay(cfg);
    long recorded = 0;
    for (int i = 0; i < 100; ++i) {
        const outbox::RelayStats s = relay.step();
        recorded += s.published;
        EXPECT_EQ(s.published, s.read) << "a step records exactly its batch";
        EXPECT_EQ(published_rows(), recorded) << "after step " << i;
        if (s.read == 0) {
            break;
        }
    }
    EXPECT_EQ(recorded, 6000);
    EXPECT_EQ(cursor(), 6000) << "the cursor passed every position, and no further";
    EXPECT_EQ(expect_once_in_order(queue.collect(6000)), 150U);
    EXPECT_EQ(queue.drain(300).size(), 6000U) << "nothing more was published";
}

TEST_F(RelayOverlapTest, TheBatchLeftInFlightIsOnTheQueueAndSettleRecordsIt) {
    cfg.set("relay.batch_size", "100");
    Collector queue(cfg.exchange);
    write_events(250, 25);
    outbox::Relay relay(cfg);
    const outbox::RelayStats first = relay.step();
    EXPECT_EQ(first.read, 100);
    EXPECT_EQ(first.published, 100);
    EXPECT_EQ(published_rows(), 100);
    EXPECT_EQ(cursor(), 100) << "held below the batch in flight";
    EXPECT_GT(queue.collect(101, 3000).size(), 100U) << "the next batch went out before the step returned";
    const outbox::RelayStats settled = relay.settle();
    EXPECT_EQ(settled.read, 100) << "the batch read ahead";
    EXPECT_EQ(settled.published, 100);
    EXPECT_EQ(published_rows(), 200);
    EXPECT_EQ(cursor(), 200);
    EXPECT_EQ(relay.settle().read, 0) << "nothing is left in flight";
    EXPECT_EQ(published_rows(), 200) << "settle publishes nothing new";
    const outbox::RelayStats rest = drain(relay);
    EXPECT_EQ(rest.published, 50);
    EXPECT_EQ(expect_once_in_order(queue.collect(250)), 25U);
}

// The first batch fails (no queue is bound): the next batch, read ahead and opened while the heads
// were out, holds later events of the same aggregates. They must not go out before their heads.
TEST_F(RelayOverlapTest, ANextBatchBehindAFailedOneKeepsItsEventsBehindTheirParkedAggregates) {
    {
        outbox::amqp::Connection c(Collector::options());
        c.declare_exchange(cfg.exchange, "fanout", true, false);
    }
    cfg.set("relay.batch_size", "10");
    cfg.set("relay.backoff_base_ms", "20000");
    cfg.set("relay.backoff_max_ms", "20000");
    write_events(40, 5); // aggregate i % 5: eight events each
    outbox::Relay relay(cfg);
    for (int i = 0; i < 6; ++i) {
        const outbox::RelayStats s = relay.step();
        EXPECT_EQ(s.published, 0);
    }
    EXPECT_EQ(published_rows(), 0);
    EXPECT_EQ(scalar_long("SELECT count(*) FROM " + outbox::stream::parked_table(cfg)), 40)
        << "the failed heads and every later event of their aggregates";

    Collector queue(cfg.exchange);
    db->exec("UPDATE " + outbox::stream::parked_table(cfg) + " SET next_attempt_at = now()");
    const outbox::RelayStats total = drain(relay);
    EXPECT_EQ(total.published, 40);
    EXPECT_EQ(relay.settle().published, 0);
    EXPECT_EQ(published_rows(), 40);
    EXPECT_EQ(expect_once_in_order(queue.collect(40)), 5U);
}

// run() stops with a batch in flight: it confirms and records it, sends nothing new, so every
// message on the queue is recorded as published and the rest is pending.
TEST_F(RelayOverlapTest, RunStoppedMidBacklogRecordsEverythingItPublished) {
    cfg.set("relay.overlap", "false"); // run() overlaps whatever the setting
    cfg.set("relay.batch_size", "200");
    cfg.set("relay.listen", "false");
    Collector queue(cfg.exchange);
    write_events(20000, 400);
    outbox::Relay relay(cfg);
    std::atomic<long> published{0};
    std::thread runner([&] {
        relay.run([&](const outbox::RelayStats &s) {
            if (published.fetch_add(s.published) + s.published >= 3000) {
                relay.stop();
            }
        });
    });
    runner.join();
    const long rows = published_rows();
    EXPECT_GE(rows, 3000);
    EXPECT_LT(rows, 20000) << "stopped mid-backlog";
    const auto &msgs = queue.drain(1000);
    EXPECT_EQ(static_cast<long>(msgs.size()), rows) << "every message on the queue is recorded, and only those";
    expect_once_in_order(msgs);
    EXPECT_LE(cursor(), rows);
}
