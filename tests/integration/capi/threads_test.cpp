// Handles are used from one thread at a time; distinct handles from distinct threads at once.
// This runs writers, a relay and a consumer concurrently on their own handles (sharing one
// read-only configuration) and is also built and run under ThreadSanitizer by the test command.
#include "fixture.hpp"

#include <atomic>
#include <set>
#include <thread>

using namespace outbox_test;

TEST_F(PgTest, DistinctHandlesOnDistinctThreadsAtOnce) {
    const std::string exchange = unique_name("test.threads.");
    ASSERT_EQ(outbox_config_set(cfg, "amqp.exchange", exchange.c_str()), OUTBOX_OK);
    ASSERT_EQ(outbox_config_set(cfg, "amqp.url", amqp_url().c_str()), OUTBOX_OK);
    ASSERT_EQ(outbox_config_set(cfg, "pg.url", pg_url().c_str()), OUTBOX_OK);
    const std::string consumer_name = unique_name("threads-consumer-");
    ASSERT_EQ(outbox_config_set(cfg, "consumer.queue_type", "classic"), OUTBOX_OK);

    outbox_consumer *consumer = nullptr;
    ASSERT_EQ(outbox_consumer_new(&consumer, cfg, consumer_name.c_str()), OUTBOX_OK);
    ASSERT_EQ(outbox_consumer_connect(consumer), OUTBOX_OK) << outbox_last_error();

    constexpr int writers = 4;
    constexpr int per_writer = 150;
    std::atomic<int> written{0};
    std::atomic<bool> writing_done{false};
    std::vector<std::thread> threads;
    for (int w = 0; w < writers; ++w) {
        threads.emplace_back([&, w] {
            outbox_db *mine = nullptr;
            if (outbox_db_open(&mine, pg_url().c_str(), cfg) != OUTBOX_OK) {
                ADD_FAILURE() << outbox_last_error();
                return;
            }
            outbox_event *ev = make_event();
            for (int i = 0; i < per_writer; ++i) {
                std::string agg = "t" + std::to_string(w) + "-" + std::to_string(i % 10);
                outbox_event_set(ev, "aggregate_id", agg.c_str());
                if (outbox_write(mine, ev) == OUTBOX_OK) {
                    ++written;
                } else {
                    ADD_FAILURE() << outbox_last_error();
                }
                // An error on this thread never shows on another: last_error is per thread.
                EXPECT_EQ(outbox_event_set(ev, "operation", "NOPE"), OUTBOX_ERR_INVALID_EVENT);
                outbox_event_set(ev, "operation", "POST");
            }
            outbox_event_free(ev);
            outbox_db_close(mine);
        });
    }
    std::atomic<int> relayed{0};
    threads.emplace_back([&] {
        outbox_relay *relay = nullptr;
        if (outbox_relay_new(&relay, cfg) != OUTBOX_OK) {
            ADD_FAILURE() << outbox_last_error();
            return;
        }
        auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
        while (relayed < writers * per_writer && std::chrono::steady_clock::now() < deadline) {
            outbox_relay_stats st;
            outbox_relay_stats_init(&st);
            if (outbox_relay_step(relay, &st) != OUTBOX_OK) {
                ADD_FAILURE() << outbox_last_error();
                break;
            }
            relayed += static_cast<int>(st.published);
            if (st.claimed == 0) {
                std::this_thread::sleep_for(std::chrono::milliseconds(20));
            }
        }
        outbox_relay_free(relay);
    });
    std::set<std::string> received;
    threads.emplace_back([&] {
        auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
        while (received.size() < size_t(writers * per_writer) && std::chrono::steady_clock::now() < deadline) {
            outbox_message *msg = nullptr;
            outbox_status st = outbox_consumer_next(&msg, consumer, 200);
            if (st == OUTBOX_ERR_TIMEOUT) {
                continue;
            }
            if (st != OUTBOX_OK) {
                ADD_FAILURE() << outbox_last_error();
                break;
            }
            received.insert(outbox_message_field(msg, "OUTBOX_ID"));
            EXPECT_EQ(outbox_consumer_ack(consumer, msg), OUTBOX_OK);
            outbox_message_free(msg);
        }
    });
    for (auto &t : threads) {
        t.join();
    }
    EXPECT_EQ(written.load(), writers * per_writer);
    EXPECT_EQ(relayed.load(), writers * per_writer);
    EXPECT_EQ(received.size(), size_t(writers * per_writer));
    outbox_consumer_free(consumer);
}
