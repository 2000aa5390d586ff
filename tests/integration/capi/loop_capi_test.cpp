// The consumer loop as a step machine (outbox_loop_*) against real PostgreSQL and RabbitMQ, driven
// the way a face drives it: on a driver connection of its own (here a plain libpq PGconn that the
// library never sees) and on the library's connection. Exactly-once effects, failures counted and
// dead-lettered, a handler's own settling, a lost driver connection, and broker connections closed
// under a running loop, which goes on consuming.
#include "fixture.hpp"
#include "libpq_driver.hpp"
#include "test_shell.hpp"

#include <atomic>
#include <functional>
#include <map>
#include <thread>

using namespace outbox_test;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

namespace {

// A face's driver: runs what the loop hands out on its own PGconn and reports back.
struct Driver {
    PGconn *conn = nullptr;

    void exec(outbox_loop *loop) const {
        int kind = 0;
        const outbox_statement *st = outbox_loop_statement(loop, &kind);
        ASSERT_NE(st, nullptr);
        const Outcome o = run_statement(conn, st);
        if (o.ok) {
            const auto row = o.row();
            EXPECT_EQ(outbox_loop_exec_done(loop, row.data(), row.size()), OUTBOX_OK) << outbox_last_error();
        } else {
            EXPECT_EQ(outbox_loop_exec_failed(loop, o.opt(o.sqlstate), o.message.c_str(), o.closed ? 1 : 0), OUTBOX_OK);
        }
    }
};

using Handler = std::function<int(const outbox_message *, PGconn *)>; // 0 ok, 1 failed

// Drives `loop` until done; returns outbox_loop_result().
outbox_status drive(outbox_loop *loop, Driver *drv, const Handler &handler) {
    while (true) {
        switch (outbox_loop_next(loop)) {
        case OUTBOX_LOOP_BLOCK:
            EXPECT_EQ(outbox_loop_block(loop), OUTBOX_OK) << outbox_last_error();
            break;
        case OUTBOX_LOOP_EXEC:
            drv->exec(loop);
            break;
        case OUTBOX_LOOP_HANDLE: {
            const outbox_message *m = outbox_loop_message(loop);
            outbox_db *db = outbox_loop_db(loop);
            PGconn *c = db != nullptr ? static_cast<PGconn *>(outbox_db_pgconn(db)) : drv->conn;
            const int rc = handler(m, c);
            EXPECT_EQ(outbox_loop_handler_done(loop, rc, rc == 0 ? nullptr : "the handler says no"), OUTBOX_OK);
            break;
        }
        case OUTBOX_LOOP_WAIT:
            std::this_thread::sleep_for(std::chrono::milliseconds(std::min(outbox_loop_wait_ms(loop), 200)));
            EXPECT_EQ(outbox_loop_waited(loop), OUTBOX_OK);
            break;
        case OUTBOX_LOOP_OPEN:
            PQfinish(drv->conn);
            drv->conn = PQconnectdb(pg_url().c_str());
            EXPECT_EQ(outbox_loop_opened(loop, PQstatus(drv->conn) == CONNECTION_OK ? 1 : 0, PQerrorMessage(drv->conn)),
                      OUTBOX_OK);
            break;
        default:
            return outbox_loop_result(loop, nullptr);
        }
    }
}

const char *failure_mode_for_test() {
    return ::testing::UnitTest::GetInstance()->current_test_info()->name() ==
                   std::string("OnADriverConnectionAFailingAggregateParksAndRedriveAndSkipLetItThroughInOrder")
               ? "park"
               : "requeue";
}

class CapiLoopTest : public PgTest {
  protected:
    void SetUp() override {
        PgTest::SetUp();
        if (HasFatalFailure()) {
            return;
        }
        name = unique_name("capi-loop-");
        exchange = "capi-loop-" + schema;
        ASSERT_EQ(outbox_config_set(cfg, "pg.url", pg_url().c_str()), OUTBOX_OK);
        ASSERT_EQ(outbox_config_set(cfg, "amqp.url", amqp_url().c_str()), OUTBOX_OK);
        ASSERT_EQ(outbox_config_set(cfg, "amqp.exchange", exchange.c_str()), OUTBOX_OK);
        ASSERT_EQ(outbox_config_set(cfg, "consumer.delivery_limit", "3"), OUTBOX_OK);
        // These tests are of the redelivering way; the parking test sets consumer.on_failure=park.
        ASSERT_EQ(outbox_config_set(cfg, "consumer.on_failure", failure_mode_for_test()), OUTBOX_OK);
        admin.query("CREATE TABLE \"" + schema + "\".effects (outbox_id text PRIMARY KEY, n int NOT NULL)");
        ASSERT_EQ(outbox_consumer_new(&consumer, cfg, name.c_str()), OUTBOX_OK) << outbox_last_error();
        ASSERT_EQ(outbox_consumer_connect(consumer), OUTBOX_OK) << outbox_last_error();
        drv.conn = PQconnectdb(pg_url().c_str());
        ASSERT_EQ(PQstatus(drv.conn), CONNECTION_OK);
    }
    void TearDown() override {
        outbox_loop_free(loop);
        outbox_consumer_free(consumer);
        outbox_relay_free(relay);
        PQfinish(drv.conn);
        const std::string ctl = std::string(OUTBOX_SOURCE_DIR) + "/scripts/services.sh rabbitmqctl -q";
        int rc = 0;
        for (const auto &q : {name, name + ".dead"}) {
            shell(ctl + " delete_queue '" + q + "'", &rc);
        }
        PgTest::TearDown();
    }

    void write(const std::string &aggregate, int n) {
        for (int i = 0; i < n; ++i) {
            outbox_event *ev = nullptr;
            ASSERT_EQ(outbox_event_new(&ev), OUTBOX_OK);
            ASSERT_EQ(outbox_event_set(ev, "aggregate_type", "PRD"), OUTBOX_OK);
            ASSERT_EQ(outbox_event_set(ev, "aggregate_id", aggregate.c_str()), OUTBOX_OK);
            ASSERT_EQ(outbox_event_set(ev, "operation", "PUT"), OUTBOX_OK);
            ASSERT_EQ(outbox_event_set(ev, "payload", "{\"n\":1}"), OUTBOX_OK);
            ASSERT_EQ(outbox_write(db, ev), OUTBOX_OK) << outbox_last_error();
            outbox_event_free(ev);
        }
    }
    // Relays everything pending; a step that fails (its broker connection closed by a test) is
    // tried again, as the relay daemon does.
    long relay_all() {
        if (relay == nullptr) {
            EXPECT_EQ(outbox_relay_new(&relay, cfg), OUTBOX_OK) << outbox_last_error();
        }
        long published = 0;
        for (int i = 0; i < 100; ++i) {
            outbox_relay_stats s;
            outbox_relay_stats_init(&s);
            const outbox_status st = outbox_relay_step(relay, &s);
            published += s.published;
            if (st == OUTBOX_OK && s.claimed == 0) {
                break;
            }
            if (st != OUTBOX_OK) {
                std::this_thread::sleep_for(100ms);
            }
        }
        return published;
    }
    // Relays until `n` events are published or 60 s passed: on a cluster that lost a node, the broker
    // refuses publishes while it elects a queue leader, and the relay holds those events back a while.
    long relay_until(long n) {
        long published = 0;
        for (auto until = Clock::now() + 60s; published < n && Clock::now() < until;) {
            published += relay_all();
            if (published < n) {
                std::this_thread::sleep_for(200ms);
            }
        }
        return published;
    }
    void new_loop(int connection, outbox_db *on = nullptr, int64_t limit = 0, int idle_ms = 5000) {
        outbox_loop_options o;
        outbox_loop_options_init(&o);
        o.connection = connection;
        o.limit = limit;
        o.idle_timeout_ms = idle_ms;
        ASSERT_EQ(outbox_loop_new(&loop, consumer, on, &o), OUTBOX_OK) << outbox_last_error();
    }
    // The handler's effect, in the loop's transaction on `c`.
    static bool effect(const outbox_message *m, PGconn *c, const std::string &schema) {
        const std::string sql = "INSERT INTO \"" + schema + "\".effects VALUES ($1, 1)";
        const char *values[] = {outbox_message_field(m, "OUTBOX_ID")};
        PGresult *r = PQexecParams(c, sql.c_str(), 1, nullptr, values, nullptr, nullptr, 0);
        const bool ok = PQresultStatus(r) == PGRES_COMMAND_OK;
        PQclear(r);
        return ok;
    }
    long effects() { return std::stol(admin.scalar("SELECT count(*) FROM \"" + schema + "\".effects")); }
    void consume_across(const std::function<void()> &disrupt);

    std::string name, exchange;
    outbox_consumer *consumer = nullptr;
    outbox_relay *relay = nullptr;
    outbox_loop *loop = nullptr;
    Driver drv;
};

} // namespace

TEST_F(CapiLoopTest, OnADriverConnectionEachEventTakesEffectOnceAndAPoisonOneIsDeadLettered) {
    write("a", 5);
    write("poison", 1);
    ASSERT_EQ(relay_all(), 6);
    std::map<std::string, int> calls;
    new_loop(OUTBOX_LOOP_DRIVER_LENT, nullptr, 0, 1500);
    const std::string sch = schema;
    auto handler = [&](const outbox_message *m, PGconn *c) {
        const std::string agg = outbox_message_field(m, "AGGREGATE_ID");
        ++calls[agg];
        if (agg == "poison") {
            return 1;
        }
        return effect(m, c, sch) ? 0 : 1;
    };
    EXPECT_EQ(drive(loop, &drv, handler), OUTBOX_OK) << outbox_last_error();
    int64_t handled = 0;
    EXPECT_EQ(outbox_loop_result(loop, &handled), OUTBOX_OK);
    EXPECT_EQ(handled, 5);
    EXPECT_EQ(effects(), 5);
    EXPECT_EQ(calls["a"], 5);
    EXPECT_EQ(calls["poison"], 3) << "consumer.delivery_limit attempts, then dead-lettered";
    EXPECT_EQ(PQtransactionStatus(drv.conn), PQTRANS_IDLE) << "no transaction left open on the driver's connection";
}

// consumer.on_failure=park on a face's driver connection: the loop hands out the parking flows'
// statements (OUTBOX_LOOP_SQL_STATEMENT) and the driver runs them like any other.
TEST_F(CapiLoopTest, OnADriverConnectionAFailingAggregateParksAndRedriveAndSkipLetItThroughInOrder) {
    for (const auto &[k, v] : {std::pair<const char *, const char *>{"consumer.max_attempts", "2"},
                               {"consumer.retry_initial_ms", "20"},
                               {"consumer.retry_poll_ms", "20"}}) {
        ASSERT_EQ(outbox_config_set(cfg, k, v), OUTBOX_OK);
    }
    outbox_consumer_free(consumer);
    ASSERT_EQ(outbox_consumer_new(&consumer, cfg, name.c_str()), OUTBOX_OK) << outbox_last_error();
    write("a", 5);
    write("p", 3);
    write("x", 2);
    ASSERT_EQ(relay_all(), 10);
    std::map<std::string, std::vector<int64_t>> applied;
    bool p_fails = true;
    const std::string sch = schema;
    auto handler = [&](const outbox_message *m, PGconn *c) {
        const std::string agg = outbox_message_field(m, "AGGREGATE_ID");
        if (agg == "p" && p_fails) {
            return 1;
        }
        if (agg == "x" && outbox_message_seq(m) == 1) {
            return static_cast<int>(OUTBOX_HANDLER_PERMANENT);
        }
        if (!effect(m, c, sch)) {
            return 1;
        }
        applied[agg].push_back(outbox_message_seq(m));
        return 0;
    };
    new_loop(OUTBOX_LOOP_DRIVER_LENT, nullptr, 0, 1500);
    ASSERT_EQ(drive(loop, &drv, handler), OUTBOX_OK) << outbox_last_error();
    EXPECT_EQ(applied["a"], (std::vector<int64_t>{1, 2, 3, 4, 5}));
    EXPECT_TRUE(applied["p"].empty() && applied["x"].empty()) << "nothing of a parked aggregate is applied";
    char *json = nullptr;
    ASSERT_EQ(outbox_parked_list(&json, db, name.c_str(), 0, 10), OUTBOX_OK) << outbox_last_error();
    const std::string list = json;
    outbox_string_free(json);
    EXPECT_NE(list.find("\"aggregate_id\":\"p\",\"state\":\"parked\",\"attempts\":2"), std::string::npos) << list;
    EXPECT_NE(list.find("\"aggregate_id\":\"x\",\"state\":\"parked\",\"attempts\":1"), std::string::npos) << list;
    EXPECT_NE(list.find("\"waiting\":2"), std::string::npos) << list;
    EXPECT_NE(list.find("\"waiting\":1"), std::string::npos) << list;

    p_fails = false;
    int64_t n = 0;
    ASSERT_EQ(outbox_parked_redrive(&n, db, name.c_str(), "PRD", "p"), OUTBOX_OK) << outbox_last_error();
    EXPECT_EQ(n, 1);
    char *skipped = nullptr;
    ASSERT_EQ(outbox_parked_skip(&skipped, db, name.c_str(), "PRD", "x", nullptr, "capi-test", "bad price"), OUTBOX_OK)
        << outbox_last_error();
    outbox_string_free(skipped);
    outbox_loop_free(loop);
    loop = nullptr;
    new_loop(OUTBOX_LOOP_DRIVER_LENT, nullptr, 0, 1500);
    ASSERT_EQ(drive(loop, &drv, handler), OUTBOX_OK) << outbox_last_error();
    EXPECT_EQ(applied["p"], (std::vector<int64_t>{1, 2, 3})) << "redriven in seq order";
    EXPECT_EQ(applied["x"], (std::vector<int64_t>{2})) << "after the skipped head";
    ASSERT_EQ(outbox_parked_list(&json, db, name.c_str(), 0, 10), OUTBOX_OK);
    EXPECT_STREQ(json, "[]");
    outbox_string_free(json);
    EXPECT_EQ(effects(), 9);
    EXPECT_EQ(PQtransactionStatus(drv.conn), PQTRANS_IDLE);
}

TEST_F(CapiLoopTest, ARedeliveredEventIsAcknowledgedWithoutTheHandler) {
    write("a", 1);
    ASSERT_EQ(relay_all(), 1);
    // The event is recorded in the inbox already (as after a lost ack): the loop skips the handler.
    outbox_message *m = nullptr;
    ASSERT_EQ(outbox_consumer_next(&m, consumer, 5000), OUTBOX_OK) << outbox_last_error();
    outbox_dedupe_result r;
    outbox_dedupe_result_init(&r);
    ASSERT_EQ(outbox_consumer_dedupe_message(&r, db, consumer, m), OUTBOX_OK) << outbox_last_error();
    ASSERT_EQ(outbox_consumer_nack(consumer, m, 1), OUTBOX_OK);
    outbox_message_free(m);
    int calls = 0;
    new_loop(OUTBOX_LOOP_DRIVER_LENT, nullptr, 0, 1500);
    EXPECT_EQ(drive(loop, &drv, [&](const outbox_message *, PGconn *) { return ++calls, 0; }), OUTBOX_OK);
    EXPECT_EQ(calls, 0);
}

TEST_F(CapiLoopTest, AHandlerThatSettlesItsMessageKeepsItsChoice) {
    write("a", 2);
    ASSERT_EQ(relay_all(), 2);
    int calls = 0;
    new_loop(OUTBOX_LOOP_DRIVER_LENT, nullptr, 0, 1500);
    auto handler = [&](const outbox_message *m, PGconn *) {
        ++calls;
        EXPECT_EQ(outbox_consumer_ack(consumer, m), OUTBOX_OK) << outbox_last_error();
        return 1; // fails after acking: the ack stands, the loop settles nothing more
    };
    EXPECT_EQ(drive(loop, &drv, handler), OUTBOX_OK) << outbox_last_error();
    EXPECT_EQ(calls, 2) << "each acked once by the handler, never redelivered";
}

TEST_F(CapiLoopTest, ALostLentDriverConnectionEndsTheLoopAndTheMessageComesBackUncounted) {
    write("a", 1);
    ASSERT_EQ(relay_all(), 1);
    new_loop(OUTBOX_LOOP_DRIVER_LENT);
    auto kill = [&](const outbox_message *, PGconn *c) {
        admin.query("SELECT pg_terminate_backend($1::int)", {std::to_string(PQbackendPID(c))});
        return 1;
    };
    EXPECT_EQ(drive(loop, &drv, kill), OUTBOX_ERR_CONNECTION);
    EXPECT_NE(std::string(outbox_last_error()).find("connection lost in the handler"), std::string::npos)
        << outbox_last_error();
    // Redelivered, not counted as an attempt: an owned driver connection goes on after OPEN.
    outbox_loop_free(loop);
    loop = nullptr;
    PQfinish(drv.conn);
    drv.conn = nullptr; // the owned loop asks for its connection first (OUTBOX_LOOP_OPEN)
    new_loop(OUTBOX_LOOP_DRIVER_OWNED, nullptr, 1);
    const std::string sch = schema;
    int64_t handled = 0;
    EXPECT_EQ(drive(loop, &drv, [&](const outbox_message *m, PGconn *c) { return effect(m, c, sch) ? 0 : 1; }),
              OUTBOX_OK)
        << outbox_last_error();
    EXPECT_EQ(outbox_loop_result(loop, &handled), OUTBOX_OK);
    EXPECT_EQ(handled, 1);
    EXPECT_EQ(effects(), 1);
}

// Consumes on each kind of connection (a driver's connection lent by the face, the library's
// connection, the loop's own) while `disrupt` takes the consumer's broker connection away after its
// second event: the loop reconnects and goes on with two events published afterwards, each taking
// effect once. A watchdog stops a loop that never comes back, so the test fails instead of hanging.
void CapiLoopTest::consume_across(const std::function<void()> &disrupt) {
    outbox_db *lent = nullptr;
    ASSERT_EQ(outbox_db_open(&lent, pg_url().c_str(), cfg), OUTBOX_OK) << outbox_last_error();
    const std::string sch = schema;
    long expected = 0;
    for (int kind : {int{OUTBOX_LOOP_DRIVER_LENT}, int{OUTBOX_LOOP_LIBRARY}, -1 /* library, its own connection */}) {
        write("k" + std::to_string(kind), 2);
        expected += 2;
        ASSERT_EQ(relay_all(), 2);
        outbox_loop_free(loop);
        loop = nullptr;
        new_loop(kind < 0 ? OUTBOX_LOOP_LIBRARY : kind, kind == OUTBOX_LOOP_LIBRARY ? lent : nullptr, 0, -1);
        int handled = 0;
        bool disrupted = false;
        auto handler = [&](const outbox_message *m, PGconn *c) {
            if (!effect(m, c, sch)) {
                return 1;
            }
            if (++handled == 2 && !disrupted) {
                disrupted = true;
                disrupt();
                write("after" + std::to_string(kind), 2); // published once the loop is back
                EXPECT_EQ(relay_until(2), 2);
            }
            if (handled == 4) {
                outbox_consumer_stop(consumer);
            }
            return 0;
        };
        std::atomic<bool> done{false};
        std::thread watchdog([&] {
            for (auto until = Clock::now() + 120s; !done && Clock::now() < until;) {
                std::this_thread::sleep_for(50ms);
            }
            if (!done) {
                ADD_FAILURE() << "kind " << kind << ": no fourth event within 120 s";
                outbox_consumer_stop(consumer);
            }
        });
        EXPECT_EQ(drive(loop, &drv, handler), OUTBOX_OK) << outbox_last_error();
        done = true;
        watchdog.join();
        EXPECT_EQ(handled, 4) << "kind " << kind;
        expected += 2;
        EXPECT_EQ(effects(), expected);
        ASSERT_EQ(outbox_consumer_reset(consumer), OUTBOX_OK);
    }
    outbox_db_close(lent);
}

// Every broker connection of the consumer closed under a running loop (as a node restart or an
// operator does).
TEST_F(CapiLoopTest, ClosingEveryBrokerConnectionDoesNotEndTheLoop) {
    // Only this consumer's connections: other tests run side by side.
    const std::string close =
        std::string(OUTBOX_SOURCE_DIR) + "/tests/support/close_amqp_connections.sh 'outbox-consumer " + name + "'";
    consume_across([&] {
        int rc = 0;
        const std::string out = shell(close, &rc);
        EXPECT_EQ(rc, 0) << out;
    });
}

// On a 3-node cluster (its queue a quorum queue), the node the consumer is connected to killed
// (kill -9) under a running loop: it goes on from the next address of amqp.url. A killed node is
// started again before the next kill, so two of three always run; the relay is given the two nodes
// left.
TEST_F(CapiLoopTest, KillingTheClusterNodeOfTheConsumerDoesNotEndTheLoop) {
    const std::string urls = test_cluster_amqp_url();
    ASSERT_FALSE(urls.empty()) << "OUTBOX_TEST_CLUSTER_AMQP_URL is not set: run through scripts/test.sh (it starts "
                                  "the test cluster)";
    std::vector<std::string> nodes;
    for (size_t at = 0; at != std::string::npos;) {
        const size_t comma = urls.find(',', at);
        nodes.push_back(urls.substr(at, comma == std::string::npos ? comma : comma - at));
        at = comma == std::string::npos ? comma : comma + 1;
    }
    ASSERT_EQ(nodes.size(), 3U) << urls;
    const std::string script = std::string(OUTBOX_SOURCE_DIR) + "/tests/support/cluster_node.sh";
    int rc = 0;
    std::string out = shell(script + " ensure", &rc);
    ASSERT_EQ(rc, 0) << out;
    ASSERT_EQ(outbox_config_set(cfg, "amqp.url", urls.c_str()), OUTBOX_OK);
    outbox_consumer_free(consumer);
    consumer = nullptr;
    ASSERT_EQ(outbox_consumer_new(&consumer, cfg, name.c_str()), OUTBOX_OK) << outbox_last_error();
    ASSERT_EQ(outbox_consumer_connect(consumer), OUTBOX_OK) << outbox_last_error();
    consume_across([&] {
        out = shell(script + " ensure && " + script + " kill-node-of 'outbox-consumer " + name + "'", &rc);
        ASSERT_EQ(rc, 0) << out;
        const int killed = std::stoi(out.substr(out.find_last_of("123", out.size())));
        std::string others;
        for (int n = 1; n <= 3; ++n) {
            others += n == killed ? "" : (others.empty() ? "" : ",") + nodes[n - 1];
        }
        outbox_relay_free(relay);
        relay = nullptr; // relay_all() opens one on the two nodes left
        ASSERT_EQ(outbox_config_set(cfg, "amqp.url", others.c_str()), OUTBOX_OK);
    });
    out = shell(script + " ensure", &rc);
    EXPECT_EQ(rc, 0) << out;
}

TEST_F(CapiLoopTest, EntryPointsRefuseBadArguments) {
    outbox_loop *l = reinterpret_cast<outbox_loop *>(this);
    EXPECT_EQ(outbox_loop_new(&l, nullptr, nullptr, nullptr), OUTBOX_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(l, nullptr);
    EXPECT_EQ(outbox_loop_new(nullptr, consumer, nullptr, nullptr), OUTBOX_ERR_INVALID_ARGUMENT);
    outbox_loop_options o;
    outbox_loop_options_init(&o);
    o.connection = 42;
    EXPECT_EQ(outbox_loop_new(&l, consumer, nullptr, &o), OUTBOX_ERR_INVALID_ARGUMENT);
    o.connection = OUTBOX_LOOP_DRIVER_LENT;
    EXPECT_EQ(outbox_loop_new(&l, consumer, db, &o), OUTBOX_ERR_INVALID_ARGUMENT) << "a driver loop takes no db";
    o.placeholders = "squiggly";
    EXPECT_EQ(outbox_loop_new(&l, consumer, nullptr, &o), OUTBOX_ERR_INVALID_ARGUMENT);
    o.size = 0;
    EXPECT_EQ(outbox_loop_new(&l, consumer, nullptr, &o), OUTBOX_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(outbox_loop_next(nullptr), OUTBOX_LOOP_DONE);
    EXPECT_EQ(outbox_loop_block(nullptr), OUTBOX_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(outbox_loop_statement(nullptr, nullptr), nullptr);
    EXPECT_EQ(outbox_loop_message(nullptr), nullptr);
    EXPECT_EQ(outbox_loop_db(nullptr), nullptr);
    EXPECT_EQ(outbox_loop_wait_ms(nullptr), 0);
    EXPECT_EQ(outbox_loop_result(nullptr, nullptr), OUTBOX_ERR_INVALID_ARGUMENT);
    outbox_loop_free(nullptr);
    new_loop(OUTBOX_LOOP_DRIVER_LENT);
    EXPECT_EQ(outbox_loop_exec_done(loop, nullptr, 0), OUTBOX_ERR_INVALID_ARGUMENT) << "not at exec";
    EXPECT_EQ(outbox_loop_handler_done(loop, 0, nullptr), OUTBOX_ERR_INVALID_ARGUMENT) << "not at handle";
    EXPECT_EQ(outbox_loop_handler_done(loop, 7, nullptr), OUTBOX_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(outbox_loop_opened(loop, 1, nullptr), OUTBOX_ERR_INVALID_ARGUMENT) << "not at open";
    EXPECT_EQ(outbox_status_retriable(OUTBOX_ERR_CONNECTION), 1);
    EXPECT_EQ(outbox_status_retriable(OUTBOX_ERR_INVALID_EVENT), 0);
    EXPECT_EQ(outbox_status_retriable(OUTBOX_OK), 0);
}
