// The calls the `outbox` command is built on (outbox_migrate_versions, outbox_replay_from,
// outbox_purge_published_progress, outbox_purge_estimate, outbox_lag, outbox_tail_*,
// outbox_relay_set_step_callback), against the real PostgreSQL and RabbitMQ.
#include "fixture.hpp"

#include <algorithm>
#include <atomic>
#include <mutex>
#include <thread>

using namespace outbox_test;

namespace {

class OperatorCapiTest : public PgTest {
  protected:
    void SetUp() override {
        PgTest::SetUp();
        exchange = schema + ".fanout";
        const std::pair<const char *, std::string> options[] = {{"pg.url", pg_url()},
                                                                {"amqp.url", amqp_url()},
                                                                {"amqp.exchange", exchange},
                                                                {"relay.listen", "false"},
                                                                {"relay.poll_interval_ms", "50"}};
        for (const auto &[key, value] : options) {
            ASSERT_EQ(outbox_config_set(cfg, key, value.c_str()), OUTBOX_OK) << key;
        }
    }
    std::string write_one(const std::string &agg) {
        outbox_event *ev = make_event(agg);
        EXPECT_EQ(outbox_write(db, ev), OUTBOX_OK) << outbox_last_error();
        std::string id = outbox_event_id(ev) != nullptr ? outbox_event_id(ev) : "";
        outbox_event_free(ev);
        return id;
    }
    std::string exchange;
};

TEST_F(OperatorCapiTest, MigrateVersionsSaysWhatItDid) {
    outbox_config *c = nullptr;
    ASSERT_EQ(outbox_config_new(&c), OUTBOX_OK);
    const std::string other = schema + "_v";
    ASSERT_EQ(outbox_config_set(c, "outbox.schema", other.c_str()), OUTBOX_OK);
    outbox_db *d = nullptr;
    ASSERT_EQ(outbox_db_open(&d, pg_url().c_str(), c), OUTBOX_OK);
    int of = -1, ot = -1, inf = -1, it = -1;
    ASSERT_EQ(outbox_migrate_versions(&of, &ot, &inf, &it, d, OUTBOX_MIGRATE_OUTBOX), OUTBOX_OK) << outbox_last_error();
    EXPECT_EQ(of, 0);
    EXPECT_GE(ot, 1);
    EXPECT_EQ(inf, 0) << "not asked: 0";
    EXPECT_EQ(it, 0);
    ASSERT_EQ(outbox_migrate_versions(&of, &ot, &inf, &it, d, OUTBOX_MIGRATE_ALL), OUTBOX_OK) << outbox_last_error();
    EXPECT_EQ(of, ot) << "the outbox was up to date";
    EXPECT_EQ(inf, 0);
    EXPECT_GE(it, 1);
    outbox_db_close(d);
    outbox_config_free(c);
    admin.query("DROP SCHEMA IF EXISTS \"" + other + "\" CASCADE");
}

TEST_F(OperatorCapiTest, ReplayFromAnEventOrATimeGoesThroughATail) {
    std::vector<std::string> ids;
    for (int i = 0; i < 3; ++i) {
        ids.push_back(write_one("r1"));
    }
    outbox_tail *tail = nullptr;
    ASSERT_EQ(outbox_tail_open(&tail, cfg, nullptr), OUTBOX_OK) << outbox_last_error();
    EXPECT_EQ(std::string(outbox_tail_name(tail, 0)), exchange);
    EXPECT_FALSE(std::string(outbox_tail_name(tail, 1)).empty());
    int64_t n = -1, from = -1;
    ASSERT_EQ(outbox_replay_from(&n, &from, db, cfg, "PRD", "r1", ids[1].c_str(), nullptr), OUTBOX_OK)
        << outbox_last_error();
    EXPECT_EQ(n, 2);
    EXPECT_EQ(from, 2);
    for (size_t i = 1; i < 3; ++i) {
        outbox_message *m = nullptr;
        ASSERT_EQ(outbox_tail_next(&m, tail, 5000), OUTBOX_OK) << outbox_last_error();
        EXPECT_STREQ(outbox_message_property(m, "message_id"), ids[i].c_str());
        EXPECT_STREQ(outbox_message_property(m, "outbox-replay"), "true");
        EXPECT_STREQ(outbox_message_field(m, "OUTBOX_ID"), ids[i].c_str());
        outbox_message_free(m);
    }
    // From a time before every event: all three; after the last: none.
    ASSERT_EQ(outbox_replay_from(&n, &from, db, cfg, "PRD", "r1", nullptr, "2000-01-01T00:00:00Z"), OUTBOX_OK);
    EXPECT_EQ(n, 3);
    EXPECT_EQ(from, 1);
    ASSERT_EQ(outbox_replay_from(&n, &from, db, cfg, "PRD", "r1", ids[0].c_str(), "2999-01-01T00:00:00Z"), OUTBOX_OK);
    EXPECT_EQ(n, 0);
    EXPECT_EQ(from, 0);
    EXPECT_EQ(outbox_replay_from(&n, &from, db, cfg, "PRD", "other", ids[0].c_str(), nullptr), OUTBOX_ERR_NOT_FOUND);
    // The three replayed from 2000 arrive too, and then nothing more.
    outbox_message *m = nullptr;
    for (int i = 0; i < 3; ++i) {
        ASSERT_EQ(outbox_tail_next(&m, tail, 5000), OUTBOX_OK);
        outbox_message_free(m);
    }
    EXPECT_EQ(outbox_tail_next(&m, tail, 50), OUTBOX_ERR_TIMEOUT);
    outbox_tail_close(tail);
}

TEST_F(OperatorCapiTest, PurgeReportsProgressAndLagIsTheOldestDueAge) {
    // Old published rows an upgrade left in the version-1 table: purged in batches.
    admin.query("INSERT INTO \"" + schema + "\".outbox_v1" +
                " (outbox_id, event_type, aggregate_type, aggregate_id, seq, operation, payload, status, published_at)"
                " SELECT gen_random_uuid(), 'X', 'OLD', 'o' || g, 1, 'POST', '{}', 'PUBLISHED',"
                " now() - interval '40 days' FROM generate_series(1, 7) g");
    int64_t estimate = -1;
    ASSERT_EQ(outbox_purge_estimate(&estimate, db, 30 * 86400), OUTBOX_OK) << outbox_last_error();
    EXPECT_GE(estimate, 0);
    std::vector<int64_t> seen;
    auto progress = [](int64_t done, void *ud) { static_cast<std::vector<int64_t> *>(ud)->push_back(done); };
    int64_t deleted = -1;
    ASSERT_EQ(outbox_purge_published_progress(&deleted, db, 30 * 86400, 3, progress, &seen), OUTBOX_OK)
        << outbox_last_error();
    EXPECT_EQ(deleted, 7);
    // After each committed batch that removed rows: 3, 6, 7.
    ASSERT_GE(seen.size(), 3U);
    EXPECT_EQ(seen[0], 3);
    EXPECT_EQ(seen[1], 6);
    EXPECT_EQ(seen.back(), 7);
    EXPECT_TRUE(std::is_sorted(seen.begin(), seen.end()));
    EXPECT_EQ(count("status = 'PUBLISHED'"), 0);

    double lag = -1;
    ASSERT_EQ(outbox_lag(&lag, db), OUTBOX_OK);
    EXPECT_EQ(lag, 0) << "nothing due";
    write_one("l1");
    // A pending event is due from its creation: created 30 s ago, it is 30 s late.
    admin.query("UPDATE \"" + schema + "\".outbox_events SET created_at = now() - interval '30 seconds'");
    ASSERT_EQ(outbox_lag(&lag, db), OUTBOX_OK);
    EXPECT_GE(lag, 29.0);
    EXPECT_LT(lag, 120.0);
}

struct Seen {
    std::mutex mu;
    std::vector<outbox_status> statuses;
    std::vector<std::string> errors;
    int64_t published = 0;
    int pg_up = -1, amqp_up = -1;
    std::string node;
    int64_t retry_in_ms = -1;
    outbox_relay *relay = nullptr;
    size_t stop_after = 0;
};

void on_step(const outbox_relay_step_info *info, void *ud) {
    auto *s = static_cast<Seen *>(ud);
    std::lock_guard<std::mutex> lock(s->mu);
    ASSERT_GE(info->size, sizeof(outbox_relay_step_info));
    ASSERT_NE(info->stats, nullptr);
    ASSERT_GE(info->stats->size, sizeof(outbox_relay_stats));
    s->statuses.push_back(info->status);
    s->errors.emplace_back(info->error);
    s->published += info->stats->published;
    s->pg_up = info->pg_up;
    s->amqp_up = info->amqp_up;
    s->node = info->amqp_node;
    s->retry_in_ms = info->retry_in_ms;
    if (s->statuses.size() >= s->stop_after && (s->published > 0 || info->status != OUTBOX_OK)) {
        outbox_relay_stop(s->relay);
    }
}

TEST_F(OperatorCapiTest, StepCallbackSeesEveryStepSuccessfulOrNot) {
    write_one("s1");
    // A queue on the exchange, so the event is routable.
    outbox_tail *tail = nullptr;
    ASSERT_EQ(outbox_tail_open(&tail, cfg, nullptr), OUTBOX_OK) << outbox_last_error();
    Seen ok;
    ASSERT_EQ(outbox_relay_new(&ok.relay, cfg), OUTBOX_OK);
    ok.stop_after = 1;
    ASSERT_EQ(outbox_relay_set_step_callback(ok.relay, on_step, &ok), OUTBOX_OK);
    ASSERT_EQ(outbox_relay_run(ok.relay), OUTBOX_OK) << outbox_last_error();
    EXPECT_EQ(ok.published, 1);
    EXPECT_EQ(ok.statuses.back(), OUTBOX_OK);
    EXPECT_EQ(ok.errors.back(), "");
    EXPECT_EQ(ok.pg_up, 1);
    EXPECT_EQ(ok.amqp_up, 1);
    EXPECT_FALSE(ok.node.empty());
    EXPECT_EQ(ok.retry_in_ms, 0);
    outbox_relay_free(ok.relay);
    outbox_tail_close(tail);

    // A broker that refuses: the step fails, the callback says why, the run goes on retrying.
    ASSERT_EQ(outbox_config_set(cfg, "amqp.url", "amqp://outbox:wrong-password@127.0.0.1:1/%2f"), OUTBOX_OK);
    write_one("s2");
    Seen bad;
    ASSERT_EQ(outbox_relay_new(&bad.relay, cfg), OUTBOX_OK);
    bad.stop_after = 1;
    ASSERT_EQ(outbox_relay_set_step_callback(bad.relay, on_step, &bad), OUTBOX_OK);
    ASSERT_EQ(outbox_relay_run(bad.relay), OUTBOX_OK);
    ASSERT_FALSE(bad.statuses.empty());
    EXPECT_EQ(bad.statuses.back(), OUTBOX_ERR_CONNECTION) << bad.errors.back();
    EXPECT_FALSE(bad.errors.back().empty());
    EXPECT_EQ(bad.errors.back().find("wrong-password"), std::string::npos) << bad.errors.back();
    EXPECT_EQ(bad.amqp_up, 0);
    EXPECT_GT(bad.retry_in_ms, 0);
    EXPECT_EQ(bad.published, 0);
    // Removed: the run reports nothing.
    ASSERT_EQ(outbox_relay_set_step_callback(bad.relay, nullptr, nullptr), OUTBOX_OK);
    outbox_relay_free(bad.relay);
}

} // namespace
