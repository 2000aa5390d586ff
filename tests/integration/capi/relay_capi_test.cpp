// The relay through the public C ABI, against the real PostgreSQL and RabbitMQ: steps and their
// size-prefixed stats, the log sink, run/stop across threads, and errors as status codes.
// Only outbox.h is used (this executable does not link the core); the broker side is checked
// through the table: with relay.unroutable_is_failure=false an event the broker accepted is
// PUBLISHED even though no queue is bound to the test's exchange.
#include "fixture.hpp"
#include "waits.hpp"

#include <chrono>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <mutex>
#include <thread>

using namespace outbox_test;
using namespace std::chrono_literals;

namespace {

using Clock = std::chrono::steady_clock;

// The password in a scheme://user:password@host URL, or "" when there is none.
std::string password_of(const std::string &url) {
    size_t scheme = url.find("://");
    if (scheme == std::string::npos) {
        return "";
    }
    size_t at = url.find('@', scheme + 3);
    size_t colon = url.find(':', scheme + 3);
    if (at == std::string::npos || colon == std::string::npos || colon > at) {
        return "";
    }
    return url.substr(colon + 1, at - colon - 1);
}

struct LogSink {
    std::mutex mu;
    std::vector<std::string> lines;

    static void fn(outbox_log_level level, const char *message, void *user_data) {
        auto *self = static_cast<LogSink *>(user_data);
        std::lock_guard<std::mutex> lock(self->mu);
        self->lines.push_back(std::to_string(static_cast<int>(level)) + " " + (message ? message : "<null>"));
    }
    std::vector<std::string> snapshot() {
        std::lock_guard<std::mutex> lock(mu);
        return lines;
    }
};

class RelayCapiTest : public PgTest {
  protected:
    void SetUp() override {
        PgTest::SetUp();
        if (HasFatalFailure()) {
            return;
        }
        exchange = unique_name("test.capi.");
        relay_name = unique_name("outbox-capi-relay-");
        ASSERT_EQ(outbox_config_set(cfg, "pg.url", pg_url().c_str()), OUTBOX_OK) << outbox_last_error();
        ASSERT_EQ(outbox_config_set(cfg, "amqp.url", amqp_url().c_str()), OUTBOX_OK) << outbox_last_error();
        ASSERT_EQ(outbox_config_set(cfg, "amqp.exchange", exchange.c_str()), OUTBOX_OK) << outbox_last_error();
        ASSERT_EQ(outbox_config_set(cfg, "relay.unroutable_is_failure", "false"), OUTBOX_OK) << outbox_last_error();
        ASSERT_EQ(outbox_config_set(cfg, "relay.poll_interval_ms", "50"), OUTBOX_OK) << outbox_last_error();
        ASSERT_EQ(outbox_config_set(cfg, "relay.name", relay_name.c_str()), OUTBOX_OK) << outbox_last_error();
    }

    // Commits `n` events, one per aggregate tag0..tag(n-1).
    void write(int n, const std::string &tag) {
        ASSERT_EQ(outbox_db_exec(db, "BEGIN"), OUTBOX_OK) << outbox_last_error();
        for (int i = 0; i < n; ++i) {
            outbox_event *ev = make_event(tag + std::to_string(i));
            ASSERT_EQ(outbox_write(db, ev), OUTBOX_OK) << outbox_last_error();
            outbox_event_free(ev);
        }
        ASSERT_EQ(outbox_db_exec(db, "COMMIT"), OUTBOX_OK) << outbox_last_error();
    }

    std::string exchange;
    std::string relay_name;
};

} // namespace

TEST_F(RelayCapiTest, StepPublishesFillsStatsUpToTheirSizeAndLogsWithoutPasswords) {
    write(5, "a");
    outbox_relay *relay = nullptr;
    ASSERT_EQ(outbox_relay_new(&relay, cfg), OUTBOX_OK) << outbox_last_error();
    ASSERT_NE(relay, nullptr);
    LogSink sink;
    ASSERT_EQ(outbox_relay_set_logger(relay, &LogSink::fn, &sink), OUTBOX_OK);

    outbox_relay_stats st;
    outbox_relay_stats_init(&st);
    ASSERT_EQ(outbox_relay_step(relay, &st), OUTBOX_OK) << outbox_last_error();
    EXPECT_EQ(st.size, sizeof(outbox_relay_stats));
    EXPECT_EQ(st.claimed, 5);
    EXPECT_EQ(st.published, 5);
    EXPECT_EQ(st.unroutable, 5) << "no queue is bound: returned, but accepted as configured";
    EXPECT_EQ(st.failed, 0);
    EXPECT_EQ(st.held_back, 0);
    EXPECT_EQ(st.unconfirmed, 0);
    EXPECT_GT(st.total_us, 0);
    EXPECT_GE(st.total_us, st.claim_us);
    EXPECT_EQ(count("status = 'PUBLISHED' AND published_at IS NOT NULL"), 5);

    // An older caller's smaller struct: filled up to its size, nothing beyond.
    write(3, "b");
    unsigned char buf[sizeof(outbox_relay_stats)];
    std::memset(buf, 0xAB, sizeof buf);
    auto *small = reinterpret_cast<outbox_relay_stats *>(buf);
    small->size = offsetof(outbox_relay_stats, published);
    ASSERT_EQ(outbox_relay_step(relay, small), OUTBOX_OK) << outbox_last_error();
    EXPECT_EQ(small->size, offsetof(outbox_relay_stats, published));
    EXPECT_EQ(small->claimed, 3);
    for (size_t i = offsetof(outbox_relay_stats, published); i < sizeof buf; ++i) {
        ASSERT_EQ(buf[i], 0xAB) << "byte " << i << " beyond the caller's size was written";
    }
    EXPECT_EQ(count("status = 'PUBLISHED'"), 8) << "the step published even though the struct could not say so";

    // No stats at all is fine; a size that was never set is not.
    ASSERT_EQ(outbox_relay_step(relay, nullptr), OUTBOX_OK) << outbox_last_error();
    outbox_relay_stats unset;
    std::memset(&unset, 0, sizeof unset);
    EXPECT_EQ(outbox_relay_step(relay, &unset), OUTBOX_ERR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(outbox_last_error()).find("size"), std::string::npos) << outbox_last_error();

    // The log sink heard the connects, with the URLs redacted.
    auto lines = sink.snapshot();
    std::string all;
    for (const auto &l : lines) {
        all += l + "\n";
    }
    EXPECT_NE(all.find("connected to PostgreSQL"), std::string::npos) << all;
    EXPECT_NE(all.find("connected to RabbitMQ"), std::string::npos) << all;
    EXPECT_NE(all.find(":***@"), std::string::npos) << "URLs are logged redacted: " << all;
    for (const std::string &url : {pg_url(), amqp_url()}) {
        const std::string pw = password_of(url);
        ASSERT_FALSE(pw.empty()) << "the test URLs carry a password: " << url;
        EXPECT_EQ(all.find(":" + pw + "@"), std::string::npos) << "a password in the log: " << all;
    }
    // Silencing the sink: no more calls.
    ASSERT_EQ(outbox_relay_set_logger(relay, nullptr, nullptr), OUTBOX_OK);
    outbox_relay_free(relay); // the next relay logs nothing to `sink`
    const size_t before = sink.snapshot().size();
    outbox_relay *quiet = nullptr;
    ASSERT_EQ(outbox_relay_new(&quiet, cfg), OUTBOX_OK);
    ASSERT_EQ(outbox_relay_set_logger(quiet, &LogSink::fn, &sink), OUTBOX_OK);
    ASSERT_EQ(outbox_relay_set_logger(quiet, nullptr, nullptr), OUTBOX_OK);
    ASSERT_EQ(outbox_relay_step(quiet, nullptr), OUTBOX_OK) << outbox_last_error();
    EXPECT_EQ(sink.snapshot().size(), before);
    outbox_relay_free(quiet);
}

// Under a backlog every step records its outcomes before it returns (storage version 2 reads
// nothing ahead that a later step would count; TSan runs this one too): each step's stats add up, every event is
// published once the steps come back empty, and per aggregate published_at never goes back in seq order.
TEST_F(RelayCapiTest, StepsDrainABacklogEachStepRecordingItsOutcomes) {
    ASSERT_EQ(outbox_config_set(cfg, "relay.batch_size", "16"), OUTBOX_OK) << outbox_last_error();
    constexpr int kAggregates = 24;
    constexpr int kPerAggregate = 25;
    for (int k = 0; k < kPerAggregate; ++k) {
        write(kAggregates, "ov");
    }

    outbox_relay *relay = nullptr;
    ASSERT_EQ(outbox_relay_new(&relay, cfg), OUTBOX_OK) << outbox_last_error();
    int64_t claimed = 0;
    int64_t published = 0;
    int steps = 0;
    while (true) {
        outbox_relay_stats st;
        outbox_relay_stats_init(&st);
        ASSERT_EQ(outbox_relay_step(relay, &st), OUTBOX_OK) << outbox_last_error();
        ASSERT_EQ(st.failed, 0);
        EXPECT_EQ(st.published, st.claimed) << "a step returned with outcomes not recorded";
        EXPECT_EQ(count("status = 'PUBLISHED'"), published + st.published);
        claimed += st.claimed;
        published += st.published;
        ASSERT_LT(++steps, 1000) << "the backlog does not drain";
        if (st.claimed == 0) {
            break;
        }
    }
    EXPECT_EQ(claimed, kAggregates * kPerAggregate);
    EXPECT_EQ(published, kAggregates * kPerAggregate) << "the stats lost or double-counted records";
    EXPECT_EQ(count("status = 'PUBLISHED'"), kAggregates * kPerAggregate);
    EXPECT_EQ(count("EXISTS (SELECT 1 FROM " + table + " o2 WHERE o2.aggregate_id = " + table +
                    ".aggregate_id AND o2.seq > " + table + ".seq AND o2.published_at < " + table + ".published_at)"),
              0);
    outbox_relay_free(relay);
}

// Without relay.overlap every step's outcomes are recorded when it returns, so
// outbox_relay_settle has nothing to do, twice too; and a second relay on the table stands by
// while the first holds it, then takes over once it is freed.
TEST_F(RelayCapiTest, SettleWithoutOverlapDoesNothingAndASecondRelayTakesOverWhenTheFirstIsFreed) {
    ASSERT_EQ(outbox_config_set(cfg, "relay.batch_size", "10"), OUTBOX_OK) << outbox_last_error();
    write(200, "settle");
    outbox_relay *relay = nullptr;
    ASSERT_EQ(outbox_relay_new(&relay, cfg), OUTBOX_OK) << outbox_last_error();
    outbox_relay_stats st;
    int64_t published = 0;
    for (int i = 0; i < 3; ++i) {
        outbox_relay_stats_init(&st);
        ASSERT_EQ(outbox_relay_step(relay, &st), OUTBOX_OK) << outbox_last_error();
        EXPECT_EQ(st.claimed, 10);
        published += st.published;
    }
    outbox_relay_stats_init(&st);
    ASSERT_EQ(outbox_relay_settle(relay, &st), OUTBOX_OK) << outbox_last_error();
    EXPECT_EQ(st.published, 0);
    EXPECT_EQ(count("status = 'PUBLISHED'"), 30);
    EXPECT_EQ(published, 30);
    ASSERT_EQ(outbox_relay_settle(relay, nullptr), OUTBOX_OK) << "settling twice is a no-op";
    outbox_relay *other = nullptr;
    ASSERT_EQ(outbox_relay_new(&other, cfg), OUTBOX_OK) << outbox_last_error();
    outbox_relay_stats_init(&st);
    ASSERT_EQ(outbox_relay_step(other, &st), OUTBOX_OK) << outbox_last_error();
    EXPECT_EQ(st.claimed, 0) << "the first relay holds the table";
    outbox_relay_free(relay);
    // The server lets the lock go when the freed relay's backend has ended, which it does after
    // the client hung up: the standby takes over within a few of its steps, not necessarily the next.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    for (;;) {
        outbox_relay_stats_init(&st);
        ASSERT_EQ(outbox_relay_step(other, &st), OUTBOX_OK) << outbox_last_error();
        if (st.claimed != 0 || std::chrono::steady_clock::now() >= deadline) {
            break;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    EXPECT_EQ(st.claimed, 10) << "the second took over where the first left off";
    EXPECT_EQ(count("status = 'PUBLISHED'"), 40);
    outbox_relay_free(other);
}

TEST_F(RelayCapiTest, RunPublishesUntilStoppedFromAnotherThread) {
    outbox_relay *relay = nullptr;
    ASSERT_EQ(outbox_relay_new(&relay, cfg), OUTBOX_OK) << outbox_last_error();
    for (int round = 0; round < 2; ++round) {
        SCOPED_TRACE("run " + std::to_string(round + 1));
        std::atomic<bool> done{false};
        std::atomic<int> rc{12345};
        std::thread runner([&] {
            rc = outbox_relay_run(relay);
            done = true;
        });
        // Events committed while it runs go out without anyone calling step.
        write(4, "r" + std::to_string(round) + "-");
        const bool published = eventually([&] { return count("status = 'PUBLISHED'") == 4L * (round + 1); }, 10s);
        EXPECT_TRUE(published) << count("status = 'PUBLISHED'") << " published";

        const auto t0 = Clock::now();
        std::thread stopper([&] { outbox_relay_stop(relay); });
        stopper.join();
        const bool returned = eventually([&] { return done.load(); }, 3s);
        const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0).count();
        EXPECT_TRUE(returned) << "outbox_relay_run did not return within 3 s of outbox_relay_stop";
        if (!returned && !eventually([&] { return done.load(); }, 30s)) {
            std::fprintf(stderr, "FATAL: outbox_relay_run ignores outbox_relay_stop; aborting instead of hanging\n");
            std::abort();
        }
        runner.join();
        EXPECT_EQ(rc.load(), OUTBOX_OK) << outbox_last_error();
        EXPECT_LT(took, 3000);
        // A stop request holds until reset: run returns at once.
        if (round == 0) {
            const auto t1 = Clock::now();
            EXPECT_EQ(outbox_relay_run(relay), OUTBOX_OK);
            EXPECT_LT(Clock::now() - t1, 1s);
            ASSERT_EQ(outbox_relay_reset(relay), OUTBOX_OK);
        }
    }
    outbox_relay_free(relay);
}

TEST_F(RelayCapiTest, NullAndMissingArgumentsAreErrorsNotCrashes) {
    outbox_relay *relay = reinterpret_cast<outbox_relay *>(0x1);
    EXPECT_EQ(outbox_relay_new(nullptr, cfg), OUTBOX_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(outbox_relay_new(&relay, nullptr), OUTBOX_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(relay, nullptr) << "the out-parameter is cleared on failure";
    EXPECT_NE(std::string(outbox_last_error()), "");
    outbox_relay_stats st;
    outbox_relay_stats_init(&st);
    EXPECT_EQ(outbox_relay_step(nullptr, &st), OUTBOX_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(outbox_relay_step(nullptr, nullptr), OUTBOX_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(outbox_relay_run(nullptr), OUTBOX_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(outbox_relay_set_logger(nullptr, &LogSink::fn, nullptr), OUTBOX_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(outbox_relay_reset(nullptr), OUTBOX_ERR_INVALID_ARGUMENT);
    outbox_relay_stop(nullptr); // no-ops
    outbox_relay_free(nullptr);

    // A relay needs pg.url.
    outbox_config *no_pg = nullptr;
    ASSERT_EQ(outbox_config_new(&no_pg), OUTBOX_OK);
    ASSERT_EQ(outbox_config_set(no_pg, "amqp.url", amqp_url().c_str()), OUTBOX_OK);
    relay = nullptr;
    EXPECT_EQ(outbox_relay_new(&relay, no_pg), OUTBOX_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(relay, nullptr);
    EXPECT_NE(std::string(outbox_last_error()).find("pg.url"), std::string::npos) << outbox_last_error();
    outbox_config_free(no_pg);

    // And amqp.url: no silent fallback to guest:guest@127.0.0.1:5672 (it used to connect there).
    outbox_config *no_amqp = nullptr;
    ASSERT_EQ(outbox_config_new(&no_amqp), OUTBOX_OK);
    ASSERT_EQ(outbox_config_set(no_amqp, "pg.url", pg_url().c_str()), OUTBOX_OK);
    EXPECT_EQ(outbox_relay_new(&relay, no_amqp), OUTBOX_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(relay, nullptr);
    EXPECT_NE(std::string(outbox_last_error()).find("amqp.url"), std::string::npos) << outbox_last_error();
    // The consumer and replay refuse it the same way.
    outbox_consumer *consumer = nullptr;
    EXPECT_EQ(outbox_consumer_new(&consumer, no_amqp, "no-broker-url"), OUTBOX_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(consumer, nullptr);
    EXPECT_NE(std::string(outbox_last_error()).find("amqp.url"), std::string::npos) << outbox_last_error();
    outbox_config_free(no_amqp);
}

TEST_F(RelayCapiTest, UnreachableServersAreConnectionErrorsWithoutPasswords) {
    write(2, "u");
    const std::string secret = "s3cr3t-" + unique_name("pw");
    // The broker: nothing listens on port 1.
    const std::string bad_amqp = "amqp://outbox:" + secret + "@127.0.0.1:1/%2f";
    ASSERT_EQ(outbox_config_set(cfg, "amqp.url", bad_amqp.c_str()), OUTBOX_OK);
    ASSERT_EQ(outbox_config_set(cfg, "amqp.connect_timeout_ms", "2000"), OUTBOX_OK);
    outbox_relay *relay = nullptr;
    ASSERT_EQ(outbox_relay_new(&relay, cfg), OUTBOX_OK) << outbox_last_error();
    LogSink sink;
    ASSERT_EQ(outbox_relay_set_logger(relay, &LogSink::fn, &sink), OUTBOX_OK);
    outbox_relay_stats st;
    outbox_relay_stats_init(&st);
    EXPECT_EQ(outbox_relay_step(relay, &st), OUTBOX_ERR_CONNECTION) << outbox_last_error();
    std::string msg = outbox_last_error();
    EXPECT_EQ(msg.find(secret), std::string::npos) << "password in the error: " << msg;
    EXPECT_NE(msg.find("127.0.0.1"), std::string::npos) << "the error names the broker: " << msg;
    // Again: still a clean error, and nothing was claimed or changed.
    EXPECT_EQ(outbox_relay_step(relay, &st), OUTBOX_ERR_CONNECTION);
    EXPECT_EQ(count("status = 'PENDING' AND retry_count = 0"), 2);
    for (const auto &l : sink.snapshot()) {
        EXPECT_EQ(l.find(secret), std::string::npos) << "password in the log: " << l;
    }
    outbox_relay_free(relay);

    // PostgreSQL: the same for the relay's own database connection.
    const std::string bad_pg = "postgresql://outbox:" + secret + "@127.0.0.1:1/outbox";
    ASSERT_EQ(outbox_config_set(cfg, "pg.url", bad_pg.c_str()), OUTBOX_OK);
    ASSERT_EQ(outbox_config_set(cfg, "pg.connect_timeout_s", "2"), OUTBOX_OK);
    ASSERT_EQ(outbox_relay_new(&relay, cfg), OUTBOX_OK) << outbox_last_error();
    EXPECT_EQ(outbox_relay_step(relay, nullptr), OUTBOX_ERR_CONNECTION) << outbox_last_error();
    msg = outbox_last_error();
    EXPECT_EQ(msg.find(secret), std::string::npos) << "password in the error: " << msg;
    outbox_relay_free(relay);
}

// With relay.overlap a step returns with the next batch in flight (its stats count its own batch);
// outbox_relay_settle confirms and records that batch and publishes nothing new.
TEST_F(RelayCapiTest, WithOverlapSettleRecordsTheBatchAStepLeftInFlight) {
    ASSERT_EQ(outbox_config_set(cfg, "relay.batch_size", "10"), OUTBOX_OK) << outbox_last_error();
    ASSERT_EQ(outbox_config_set(cfg, "relay.overlap", "true"), OUTBOX_OK) << outbox_last_error();
    write(45, "overlap");
    outbox_relay *relay = nullptr;
    ASSERT_EQ(outbox_relay_new(&relay, cfg), OUTBOX_OK) << outbox_last_error();
    outbox_relay_stats st;
    outbox_relay_stats_init(&st);
    ASSERT_EQ(outbox_relay_step(relay, &st), OUTBOX_OK) << outbox_last_error();
    EXPECT_EQ(st.claimed, 10);
    EXPECT_EQ(st.published, 10);
    EXPECT_EQ(count("status = 'PUBLISHED'"), 10) << "a step records its own batch only";
    outbox_relay_stats_init(&st);
    ASSERT_EQ(outbox_relay_settle(relay, &st), OUTBOX_OK) << outbox_last_error();
    EXPECT_EQ(st.claimed, 10) << "the batch left in flight";
    EXPECT_EQ(st.published, 10);
    EXPECT_EQ(count("status = 'PUBLISHED'"), 20);
    outbox_relay_stats_init(&st);
    ASSERT_EQ(outbox_relay_settle(relay, &st), OUTBOX_OK) << outbox_last_error();
    EXPECT_EQ(st.claimed, 0) << "nothing was left in flight";
    EXPECT_EQ(count("status = 'PUBLISHED'"), 20) << "settle publishes nothing new";
    int64_t published = 20;
    for (int i = 0; i < 10; ++i) {
        outbox_relay_stats_init(&st);
        ASSERT_EQ(outbox_relay_step(relay, &st), OUTBOX_OK) << outbox_last_error();
        published += st.published;
        if (st.claimed == 0) {
            break;
        }
    }
    EXPECT_EQ(published, 45);
    EXPECT_EQ(count("status = 'PUBLISHED'"), 45);
    outbox_relay_free(relay);
}
