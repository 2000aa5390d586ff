// Partitioned subscribers against real PostgreSQL and RabbitMQ (core/partitions.hpp): instances
// divide the partitions evenly and rebalance on join and leave; two instances that both claim a
// partition, and a slow handler while ownership moves, never handle one partition at once;
// effects stay exactly once and in per-aggregate order; another partition count is refused;
// a poison event is dead-lettered with its aggregate while that aggregate's later events go on;
// a plain subscriber of the same exchange and `outbox tail` are unaffected; the partition count
// changes by the README's procedure; a killed instance's partitions are taken over within the
// lease. A service that cannot be reached makes these tests fail.
#include "child_process.hpp"
#include "relay_fixture.hpp"
#include "test_shell.hpp"
#include "waits.hpp"

#include "consumer.hpp"
#include "error.hpp"
#include "partitions.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <regex>
#include <set>
#include <sstream>
#include <thread>

using namespace outbox_test;
using namespace std::chrono_literals;
namespace amqp = outbox::amqp;
using Clock = std::chrono::steady_clock;

namespace {

// One instance: outbox::Consumer::run on a thread of its own, connected (topology declared) by the
// constructor. Stopped, joined and destroyed (leaving the membership) by stop() or the destructor.
class Instance {
  public:
    Instance(const outbox::Config &cfg, const std::string &name, outbox::Consumer::Handler handler)
        : consumer_(std::make_unique<outbox::Consumer>(cfg, name)), handler_(std::move(handler)) {
        consumer_->set_logger([this](auto, const std::string &m) {
            std::lock_guard<std::mutex> lock(mu_);
            log_.push_back(m);
        });
        consumer_->connect();
        thread_ = std::thread([this] {
            try {
                consumer_->run(nullptr, handler_);
            } catch (const std::exception &e) {
                std::lock_guard<std::mutex> lock(mu_);
                error_ = e.what();
            }
        });
    }
    Instance(const Instance &) = delete;
    Instance &operator=(const Instance &) = delete;
    ~Instance() { stop(); }
    void stop() {
        if (thread_.joinable()) {
            consumer_->stop();
            thread_.join();
        }
        consumer_.reset();
    }
    // Read from the test thread while run() may reconnect: copied under no lock, so only used
    // once the assignment is stable (eventually() polls it).
    std::vector<int> held() const { return consumer_ ? consumer_->partitions_held() : std::vector<int>{}; }
    std::string error() const {
        std::lock_guard<std::mutex> lock(mu_);
        return error_;
    }
    std::string log_text() const {
        std::lock_guard<std::mutex> lock(mu_);
        std::string out;
        for (const auto &l : log_) {
            out += l + "\n";
        }
        return out;
    }

  private:
    std::unique_ptr<outbox::Consumer> consumer_;
    outbox::Consumer::Handler handler_;
    mutable std::mutex mu_;
    std::vector<std::string> log_;
    std::string error_;
    std::thread thread_;
};

class PartitionTest : public RelayTest {
  protected:
    void SetUp() override {
        RelayTest::SetUp();
        cfg.pg_url = consumer_pg_url();
        cfg.set("consumer.lease_ms", "1500");
        db->exec_simple("CREATE TABLE " + effects() +
                        " (n bigserial PRIMARY KEY, consumer text NOT NULL, outbox_id text NOT NULL,"
                        " aggregate text NOT NULL, seq bigint NOT NULL, instance text NOT NULL, part int NOT NULL)");
    }
    void TearDown() override {
        try {
            amqp::Connection c(Collector::options());
            for (const auto &[name, p] : subscribers_) {
                for (int i = 0; i < p; ++i) {
                    c.delete_queue(outbox::partitions::partition_queue(name, i));
                }
                if (p == 0) {
                    c.delete_queue(name);
                }
                c.delete_queue(name + ".dead");
                c.delete_exchange(name + ".dlx");
                c.delete_exchange(outbox::partitions::hash_exchange(name));
            }
        } catch (...) { // NOLINT(bugprone-empty-catch): clean-up only
        }
        RelayTest::TearDown();
    }

    std::string subscriber(const std::string &base, int partitions) {
        std::string name = base + "-" + suffix;
        subscribers_.emplace_back(name, partitions);
        return name;
    }
    outbox::Config partitioned(int partitions, const std::string &instance = "") const {
        outbox::Config c = cfg;
        c.set("consumer.partitions", std::to_string(partitions));
        if (!instance.empty()) {
            c.set("consumer.instance", instance);
        }
        return c;
    }

    std::string effects() const { return "\"" + cfg.schema + "\".effects"; }

    // The effect of one event, in the handler's transaction.
    void record(outbox::pg::Conn &tx, const std::string &consumer, const outbox::Delivery &d,
                const std::string &instance) const {
        tx.exec("INSERT INTO " + effects() +
                    " (consumer, outbox_id, aggregate, seq, instance, part) VALUES ($1, $2, $3, $4, $5, $6)",
                {consumer, d.event_id, d.aggregate_type + ":" + d.aggregate_id, std::to_string(d.seq), instance,
                 std::to_string(d.partition)});
    }

    void relay_all() {
        outbox::Relay relay(cfg);
        drain(relay);
    }

    long rows(const std::string &consumer) {
        return scalar_long("SELECT count(*) FROM " + effects() + " WHERE consumer = '" + consumer + "'");
    }
    // Events whose effect is missing or not exactly once.
    long not_once(const std::string &consumer) {
        return scalar_long("SELECT count(*) FROM " + table() + " o LEFT JOIN (SELECT outbox_id, count(*) AS k FROM " +
                           effects() + " WHERE consumer = '" + consumer +
                           "' GROUP BY outbox_id) e ON e.outbox_id = o.outbox_id::text WHERE coalesce(e.k, 0) <> 1");
    }
    // Effects applied out of per-aggregate order: each must follow the previous one of its
    // aggregate by exactly one sequence number, in the order they were applied.
    long order_violations(const std::string &consumer) {
        return scalar_long(
            "SELECT count(*) FROM (SELECT seq, lag(seq) OVER (PARTITION BY aggregate ORDER BY n) AS prev FROM " +
            effects() + " WHERE consumer = '" + consumer +
            "') x WHERE (prev IS NULL AND seq <> 1) OR (prev IS NOT NULL AND seq <> prev + 1)");
    }

    std::vector<std::pair<std::string, int>> subscribers_;
};

// Tracks handlers in progress per partition; max_ is the most ever seen at once for any one.
class Overlap {
  public:
    void enter(int p) {
        std::lock_guard<std::mutex> lock(mu_);
        max_ = std::max(max_, ++in_[p]);
    }
    void leave(int p) {
        std::lock_guard<std::mutex> lock(mu_);
        --in_[p];
    }
    int max() const {
        std::lock_guard<std::mutex> lock(mu_);
        return max_;
    }

  private:
    mutable std::mutex mu_;
    std::map<int, int> in_;
    int max_ = 0;
};

std::set<int> as_set(const std::vector<int> &v) {
    return {v.begin(), v.end()};
}

std::string services() {
    return std::string(OUTBOX_SOURCE_DIR) + "/scripts/services.sh";
}

// The `outbox relay` daemon as an operator runs it, on this test's schema and exchange.
std::vector<std::string> relay_daemon(const outbox::Config &cfg) {
    const std::string pg = pg_url(), amqp = amqp_url();
    const std::string exchange = "amqp.exchange=" + cfg.exchange, relay = "relay.name=" + cfg.relay_name;
    return {OUTBOX_CLI_PATH, "relay",  "--pg-url", pg,    "--amqp-url",         amqp, "--schema",    cfg.schema,
            "--set",         exchange, "--set",    relay, "--poll-interval-ms", "50", "--log-level", "warn"};
}

// Messages per queue, read with the README's `rabbitmqctl list_queues name messages`.
std::map<std::string, long> queue_depths(std::string *out) {
    int rc = -1;
    *out = shell(services() + " rabbitmqctl list_queues name messages", &rc);
    std::map<std::string, long> depths;
    if (rc != 0) {
        return depths;
    }
    std::istringstream in(*out);
    std::string line;
    const std::regex row(R"(^(\S+)\t(\d+)$)");
    while (std::getline(in, line)) {
        std::smatch m;
        if (std::regex_match(line, m, row)) {
            depths[m[1]] = std::stol(m[2]);
        }
    }
    return depths;
}

// Writes one event every `every` over `aggregates` aggregates, each in its own transaction on a
// connection of its own, until stop().
class Writer {
  public:
    Writer(const outbox::Config &cfg, int aggregates, const std::string &tag, std::chrono::milliseconds every)
        : thread_([this, cfg, aggregates, tag, every] {
              try {
                  outbox::pg::Conn conn = outbox::pg::Conn::open(pg_url());
                  outbox::Event ev;
                  ev.set("aggregate_type", "PRD");
                  ev.set("operation", "PUT");
                  for (long i = 0; !stop_.load(); ++i) {
                      ev.set("aggregate_id", tag + std::to_string(i % aggregates));
                      ev.set("payload", "{\"i\":" + std::to_string(i) + "}");
                      outbox::store::write(conn, cfg, ev);
                      ++written_;
                      std::this_thread::sleep_for(every);
                  }
              } catch (const std::exception &e) {
                  error_ = e.what();
              }
          }) {}
    Writer(const Writer &) = delete;
    Writer &operator=(const Writer &) = delete;
    ~Writer() { stop(); }
    // Stops and joins; returns the number of events committed, "" or the error in *error.
    long stop(std::string *error = nullptr) {
        stop_ = true;
        if (thread_.joinable()) {
            thread_.join();
        }
        if (error != nullptr) {
            *error = error_;
        }
        return written_.load();
    }
    [[nodiscard]] long written() const { return written_.load(); }

  private:
    std::atomic<bool> stop_{false};
    std::atomic<long> written_{0};
    std::string error_;
    std::thread thread_; // last: starts once the members above exist
};

} // namespace

TEST(PartitionAssignment, SpreadsEvenlyAndEveryPartitionHasOneOwner) {
    for (int members = 1; members <= 9; ++members) {
        std::vector<std::string> names;
        for (int i = 0; i < members; ++i) {
            names.push_back("i" + std::to_string(members - i)); // unsorted on purpose
        }
        std::map<int, int> owners;
        size_t most = 0, least = SIZE_MAX;
        for (const auto &n : names) {
            auto mine = outbox::partitions::assign(names, n, 16);
            most = std::max(most, mine.size());
            least = std::min(least, mine.size());
            for (int p : mine) {
                ++owners[p];
            }
        }
        EXPECT_EQ(owners.size(), 16U) << members;
        for (const auto &[p, k] : owners) {
            EXPECT_EQ(k, 1) << "partition " << p << " with " << members << " members";
        }
        EXPECT_LE(most - least, 1U) << members;
    }
    EXPECT_TRUE(outbox::partitions::assign({"a", "b"}, "c", 4).empty());
    EXPECT_EQ(outbox::partition_key("PRD", "1:2"), "3:PRD:1:2");
    EXPECT_NE(outbox::partition_key("a:b", "c"), outbox::partition_key("a", "b:c"));
}

// Instances join and leave while events flow: the assignment follows, evenly, with one owner
// per partition; every effect once and in per-aggregate order; a plain subscriber of the same
// exchange sees every event too.
TEST_F(PartitionTest, InstancesDivideThePartitionsAndRebalanceOnJoinAndLeave) {
    const std::string name = subscriber("it-part", 8);
    const std::string plain = subscriber("it-plain", 0);
    auto handler_for = [&](const std::string &instance) {
        return
            [this, name, instance](outbox::pg::Conn &tx, const outbox::Delivery &d) { record(tx, name, d, instance); };
    };
    Instance other(cfg, plain, [&](outbox::pg::Conn &tx, const outbox::Delivery &d) { record(tx, plain, d, "plain"); });
    auto a = std::make_unique<Instance>(partitioned(8, "a"), name, handler_for("a"));
    EXPECT_EQ(as_set(a->held()), (std::set<int>{0, 1, 2, 3, 4, 5, 6, 7}));

    write_events(300, 30, "x");
    relay_all();
    ASSERT_TRUE(eventually([&] { return rows(name) >= 300; }, 30s)) << rows(name) << "\n" << a->log_text();

    Instance b(partitioned(8, "b"), name, handler_for("b"));
    ASSERT_TRUE(eventually([&] { return a->held().size() == 4 && b.held().size() == 4; }, 10s))
        << a->log_text() << b.log_text();
    std::set<int> all = as_set(a->held());
    for (int p : b.held()) {
        EXPECT_TRUE(all.insert(p).second) << "partition " << p << " held twice";
    }
    EXPECT_EQ(all.size(), 8U);

    write_events(300, 30, "x");
    relay_all();
    ASSERT_TRUE(eventually([&] { return rows(name) >= 600; }, 30s)) << rows(name);
    // While the assignment was stable, each partition's events went to its owner only.
    EXPECT_EQ(scalar_long("SELECT count(DISTINCT part) FROM " + effects() + " WHERE consumer = '" + name +
                          "' AND n > (SELECT max(n) FROM " + effects() + " WHERE seq <= 10 AND consumer = '" + name +
                          "') AND instance = 'a' AND part NOT IN (" +
                          [&] {
                              std::string s;
                              for (int p : a->held()) {
                                  s += (s.empty() ? "" : ",") + std::to_string(p);
                              }
                              return s;
                          }() +
                          ")"),
              0);

    a->stop(); // leaves: b takes every partition at its next heartbeat
    a.reset();
    ASSERT_TRUE(eventually([&] { return b.held().size() == 8; }, 10s)) << b.log_text();
    write_events(300, 30, "x");
    relay_all();
    ASSERT_TRUE(eventually([&] { return rows(name) >= 900 && rows(plain) >= 900; }, 30s))
        << rows(name) << " " << rows(plain);
    std::this_thread::sleep_for(300ms);

    EXPECT_EQ(not_once(name), 0);
    EXPECT_EQ(order_violations(name), 0);
    EXPECT_EQ(not_once(plain), 0) << "the plain subscriber of the same exchange";
    EXPECT_EQ(b.error(), "");
    EXPECT_EQ(other.error(), "");
}

// Two instances that both claim every partition (one instance name, so one membership row): the
// broker's single active consumer lets only one receive; when it goes, the other takes over from
// the oldest unsettled message. A slow handler makes any overlap visible.
TEST_F(PartitionTest, TwoInstancesClaimingOnePartitionNeverHandleItAtOnce) {
    const std::string name = subscriber("it-claim", 2);
    Overlap overlap;
    std::atomic<int> by1{0}, by2{0};
    auto handler = [&](std::atomic<int> &count, const std::string &who) {
        return [&, who](outbox::pg::Conn &tx, const outbox::Delivery &d) {
            overlap.enter(d.partition);
            std::this_thread::sleep_for(15ms);
            record(tx, name, d, who);
            overlap.leave(d.partition);
            ++count;
        };
    };
    auto first = std::make_unique<Instance>(partitioned(2, "same"), name, handler(by1, "1"));
    Instance second(partitioned(2, "same"), name, handler(by2, "2"));
    EXPECT_EQ(first->held().size(), 2U);
    EXPECT_EQ(second.held().size(), 2U) << "both claim both partitions";

    write_events(200, 10, "c");
    relay_all();
    ASSERT_TRUE(eventually([&] { return by1.load() >= 40; }, 20s));
    EXPECT_EQ(by2.load(), 0) << "the standby received while the active consumer was there";
    first->stop();
    first.reset();
    ASSERT_TRUE(eventually([&] { return rows(name) >= 200; }, 30s)) << rows(name) << " " << second.log_text();
    std::this_thread::sleep_for(300ms);
    EXPECT_GT(by2.load(), 0);
    EXPECT_EQ(overlap.max(), 1) << "two handlers of one partition at once";
    EXPECT_EQ(not_once(name), 0);
    EXPECT_EQ(order_violations(name), 0);
}

// Ownership moves while a slow handler runs: the new owner waits as a standby until the old one
// has finished the message in hand and given the partition up.
TEST_F(PartitionTest, SlowHandlerWhileOwnershipMovesKeepsOnePartitionWithOneInstance) {
    const std::string name = subscriber("it-slow", 4);
    Overlap overlap;
    std::atomic<int> by_b{0};
    auto handler = [&](const std::string &who) {
        return [&, who](outbox::pg::Conn &tx, const outbox::Delivery &d) {
            overlap.enter(d.partition);
            std::this_thread::sleep_for(60ms);
            record(tx, name, d, who);
            overlap.leave(d.partition);
            if (who == "b") {
                ++by_b;
            }
        };
    };
    Instance a(partitioned(4, "a"), name, handler("a"));
    write_events(120, 12, "s");
    relay_all();
    ASSERT_TRUE(eventually([&] { return rows(name) >= 5; }, 20s));
    Instance b(partitioned(4, "b"), name, handler("b"));
    ASSERT_TRUE(eventually([&] { return rows(name) >= 120; }, 60s)) << rows(name) << "\n"
                                                                    << a.log_text() << b.log_text();
    std::this_thread::sleep_for(300ms);
    EXPECT_GT(by_b.load(), 0) << "b never took a partition over";
    EXPECT_EQ(overlap.max(), 1) << "two handlers of one partition at once";
    EXPECT_EQ(not_once(name), 0);
    EXPECT_EQ(order_violations(name), 0);
    EXPECT_EQ(a.error(), "");
    EXPECT_EQ(b.error(), "");
}

TEST_F(PartitionTest, AnotherPartitionCountIsRefusedWithTheProcedure) {
    const std::string name = subscriber("it-count", 4);
    outbox::Consumer four(partitioned(4), name);
    four.connect();
    outbox::Consumer two(partitioned(2), name);
    try {
        two.connect();
        FAIL() << "connected with another partition count";
    } catch (const outbox::Error &e) {
        EXPECT_EQ(e.code(), outbox::Errc::invalid_argument);
        EXPECT_NE(std::string(e.what()).find("partitioned into 4 partitions"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("drain, rebind, resume"), std::string::npos) << e.what();
    }
    outbox::Config classic = partitioned(2);
    classic.set("consumer.queue_type", "classic");
    try {
        outbox::Consumer c(classic, name);
        FAIL() << "a classic partitioned consumer was accepted";
    } catch (const outbox::Error &e) {
        EXPECT_EQ(e.code(), outbox::Errc::invalid_argument);
    }
}

// Issue 29: the instances of a new partitioned subscriber start at the same moment (a deployment
// of N replicas). Each records the subscriber's partition count, or reads the one another
// instance recorded an instant before; every one of them connects. Eight instances released
// together by a barrier, a fresh subscriber name each round, twenty rounds in a row.
TEST_F(PartitionTest, InstancesOfANewSubscriberStartedTogetherAllConnect) {
    constexpr int kInstances = 8;
    constexpr int kRounds = 20;
    constexpr int kPartitions = 2;
    int failed_rounds = 0;
    std::string failures;
    for (int round = 0; round < kRounds; ++round) {
        const std::string name = subscriber("it-start" + std::to_string(round), kPartitions);
        std::vector<std::unique_ptr<outbox::Consumer>> instances;
        for (int i = 0; i < kInstances; ++i) {
            instances.push_back(
                std::make_unique<outbox::Consumer>(partitioned(kPartitions, "i" + std::to_string(i)), name));
        }
        std::atomic<int> ready{0};
        std::atomic<bool> go{false};
        std::vector<std::string> errors(kInstances);
        std::vector<std::thread> threads;
        threads.reserve(kInstances);
        for (int i = 0; i < kInstances; ++i) {
            threads.emplace_back([&, i] {
                ++ready;
                while (!go.load()) {
                    std::this_thread::yield();
                }
                try {
                    instances[static_cast<size_t>(i)]->connect();
                } catch (const outbox::Error &e) {
                    errors[static_cast<size_t>(i)] = std::string(outbox::errc_name(e.code())) + ": " + e.what();
                } catch (const std::exception &e) {
                    errors[static_cast<size_t>(i)] = e.what();
                }
            });
        }
        const bool all_ready = eventually([&] { return ready.load() == kInstances; }, 10s, 1ms);
        go = true;
        for (auto &t : threads) {
            t.join();
        }
        ASSERT_TRUE(all_ready);
        int failed = 0;
        for (int i = 0; i < kInstances; ++i) {
            if (!errors[static_cast<size_t>(i)].empty()) {
                ++failed;
                failures += "round " + std::to_string(round) + " instance " + std::to_string(i) + ": " +
                            errors[static_cast<size_t>(i)] + "\n";
            }
        }
        failed_rounds += failed > 0 ? 1 : 0;
        if (failed == 0) {
            EXPECT_EQ(scalar_long("SELECT partitions FROM \"" + cfg.schema + "\".\"" + cfg.inbox_table +
                                  "_partitionings\" WHERE consumer = '" + name + "'"),
                      kPartitions);
        }
        instances.clear(); // leave the membership
    }
    std::printf("[ stats    ] %d of %d rounds had an instance that failed to connect\n", failed_rounds, kRounds);
    EXPECT_EQ(failed_rounds, 0) << failures;
}

// A poison event of a partitioned subscriber is dead-lettered with its aggregate and partition
// queue; the aggregate's later events go on, and the order check reports the gap.
TEST_F(PartitionTest, PoisonEventIsDeadLetteredWithItsAggregateAndLaterEventsGoOn) {
    const std::string name = subscriber("it-poison", 2);
    cfg.set("consumer.delivery_limit", "2");
    cfg.set("consumer.on_failure", "requeue"); // the redelivering way; ParkTest is of parking
    std::mutex mu;
    std::vector<std::string> orders;
    Instance a(partitioned(2, "a"), name, [&](outbox::pg::Conn &tx, const outbox::Delivery &d) {
        if (d.aggregate_id == "bad0" && d.seq == 2) {
            throw std::runtime_error("poison");
        }
        {
            std::lock_guard<std::mutex> lock(mu);
            orders.push_back(std::to_string(d.seq) + ":" + outbox::inbox::order_name(d.dedupe.order));
        }
        record(tx, name, d, "a");
    });
    write_events(4, 1, "bad");
    relay_all();
    ASSERT_TRUE(eventually([&] { return rows(name) >= 3; }, 20s)) << a.log_text();

    amqp::Connection c(Collector::options());
    c.qos(10);
    c.consume(name + ".dead", false);
    std::optional<amqp::Message> dead;
    eventually(
        [&] {
            auto ev = c.wait(100);
            if (ev && std::holds_alternative<amqp::Message>(*ev)) {
                dead = std::get<amqp::Message>(*ev);
                return true;
            }
            return false;
        },
        10s, 1ms);
    ASSERT_TRUE(dead.has_value());
    EXPECT_EQ(header_string(dead->props, "x-outbox-dead-aggregate"), "3:PRD:bad0");
    const std::string from = header_string(dead->props, "x-outbox-dead-queue");
    EXPECT_TRUE(from == name + ".p0" || from == name + ".p1") << from;
    EXPECT_EQ(header_string(dead->props, "outbox-seq"), "2");
    std::lock_guard<std::mutex> lock(mu);
    EXPECT_EQ(orders, (std::vector<std::string>{"1:in_order", "3:gap", "4:in_order"}));
    EXPECT_NE(a.log_text().find("of aggregate PRD:bad0"), std::string::npos) << a.log_text();
}

// The exchange's other readers see nothing new: while two instances of a partitioned subscriber
// consume, `outbox tail` (its own temporary queue on the fanout exchange) prints every event once,
// each aggregate's in seq order. (The documents' amqplib subscriber: node/test/partitions.test.js.)
TEST_F(PartitionTest, OutboxTailShowsEveryEventWhileAPartitionedSubscriberConsumes) {
    constexpr int kEvents = 120;
    const std::string name = subscriber("it-tail", 4);
    auto handler_for = [&](const std::string &instance) {
        return
            [this, name, instance](outbox::pg::Conn &tx, const outbox::Delivery &d) { record(tx, name, d, instance); };
    };
    Instance a(partitioned(4, "a"), name, handler_for("a"));
    Instance b(partitioned(4, "b"), name, handler_for("b"));
    // a gives b its half at a's next heartbeat.
    ASSERT_TRUE(eventually([&] { return a.held().size() == 2 && b.held().size() == 2; }, 10s))
        << a.log_text() << b.log_text();
    ChildProcess tail({OUTBOX_CLI_PATH, "tail", "--json", "--count", std::to_string(kEvents), "--timeout", "60",
                       "--amqp-url", amqp_url(), "--exchange", cfg.exchange});
    ASSERT_TRUE(tail.wait_output("tailing exchange", 15000)) << tail.output();

    const std::vector<std::string> ids = write_events(kEvents, 12, "tl");
    relay_all();
    ASSERT_TRUE(eventually([&] { return rows(name) >= kEvents; }, 30s)) << rows(name) << "\n" << a.log_text();
    ASSERT_EQ(tail.wait(30000), 0) << tail.output();

    // The event ids `outbox tail` printed, in the order it printed them.
    std::vector<std::string> printed;
    std::istringstream lines(tail.output());
    std::string line;
    const std::regex id_field(R"re("OUTBOX_ID":"([0-9a-f-]{36})")re");
    while (std::getline(lines, line)) {
        std::smatch m;
        if (!line.empty() && line[0] == '{' && std::regex_search(line, m, id_field)) {
            printed.push_back(m[1]);
        }
    }
    ASSERT_EQ(printed.size(), static_cast<size_t>(kEvents)) << tail.output();
    EXPECT_EQ(std::set<std::string>(printed.begin(), printed.end()), std::set<std::string>(ids.begin(), ids.end()))
        << "tail printed another set of events, or one twice";
    std::map<std::string, std::pair<std::string, long>> where; // event id -> (aggregate, seq)
    outbox::pg::Result r = db->exec("SELECT outbox_id::text, aggregate_id, seq FROM " + table());
    for (int i = 0; i < r.rows(); ++i) {
        where[std::string(r.get(i, 0))] = {std::string(r.get(i, 1)), static_cast<long>(r.get_int(i, 2))};
    }
    std::map<std::string, long> last_seq;
    for (const auto &id : printed) {
        const auto &[aggregate, seq] = where.at(id);
        EXPECT_EQ(seq, last_seq[aggregate] + 1) << "tail printed " << aggregate << " seq " << seq << " out of order";
        last_seq[aggregate] = seq;
    }
    EXPECT_EQ(not_once(name), 0);
    EXPECT_EQ(order_violations(name), 0);
    EXPECT_EQ(scalar_long("SELECT count(DISTINCT instance) FROM " + effects() + " WHERE consumer = '" + name + "'"), 2)
        << "both instances consumed while tail ran";
    EXPECT_EQ(a.error(), "");
    EXPECT_EQ(b.error(), "");
}

// The README's procedure for changing P ("Changing P": drain, rebind, resume), done with its
// commands from 4 to 8 while a writer commits events throughout: the `outbox relay` daemon
// stopped, the partition queues emptied (watched with `rabbitmqctl list_queues name messages`),
// the instances stopped, the queues deleted with `rabbitmqctl delete_queue`, the recorded count
// deleted, the instances started with 8, then the relay. Every event's effect exactly once, and
// each aggregate's in seq order across the change, aggregates that moved to another queue included.
TEST_F(PartitionTest, ChangingThePartitionCountByTheReadmeProcedureLosesNothingAndKeepsOrder) {
    const std::string name = subscriber("it-repart", 8); // clean-up: p0 .. p7
    auto handler_for = [&](const std::string &instance) {
        return
            [this, name, instance](outbox::pg::Conn &tx, const outbox::Delivery &d) { record(tx, name, d, instance); };
    };
    auto a = std::make_unique<Instance>(partitioned(4, "a"), name, handler_for("a"));
    auto b = std::make_unique<Instance>(partitioned(4, "b"), name, handler_for("b"));
    auto relay = std::make_unique<ChildProcess>(relay_daemon(cfg));
    Writer writer(cfg, 24, "rp", 20ms);
    ASSERT_TRUE(eventually([&] { return rows(name) >= 60; }, 30s)) << rows(name) << "\n" << relay->output();

    // 1. Drain: stop the relays; let the instances empty p0 .. p3; stop them.
    ASSERT_EQ(relay->terminate(), 0) << relay->output();
    const long written_at_drain = writer.written();
    std::string listing;
    ASSERT_TRUE(eventually(
        [&] {
            auto depths = queue_depths(&listing);
            long left = 0;
            for (int i = 0; i < 4; ++i) {
                auto it = depths.find(outbox::partitions::partition_queue(name, i));
                left += it == depths.end() ? 1000000 : it->second;
            }
            return left == 0;
        },
        60s, 200ms))
        << listing;
    a->stop();
    b->stop();
    a.reset();
    b.reset();
    EXPECT_EQ(rows(name), scalar_long("SELECT count(*) FROM " + table() + " WHERE status = 'PUBLISHED'"))
        << "the instances stopped before every published event was consumed";

    // 2. Rebind: delete the empty partition queues, forget the recorded count.
    for (int i = 0; i < 4; ++i) {
        int rc = -1;
        const std::string q = outbox::partitions::partition_queue(name, i);
        const std::string out = shell(services() + " rabbitmqctl delete_queue " + q, &rc);
        ASSERT_EQ(rc, 0) << out;
    }
    db->exec("DELETE FROM \"" + cfg.schema + "\".outbox_inbox_partitionings WHERE consumer = $1", {name});
    EXPECT_GT(writer.written(), written_at_drain) << "the writer went on committing during the drain";

    // 3. Resume: the instances with 8 partitions, then the relay.
    a = std::make_unique<Instance>(partitioned(8, "a"), name, handler_for("a"));
    b = std::make_unique<Instance>(partitioned(8, "b"), name, handler_for("b"));
    EXPECT_EQ(scalar_long("SELECT partitions FROM \"" + cfg.schema +
                          "\".outbox_inbox_partitionings WHERE consumer = '" + name + "'"),
              8);
    relay = std::make_unique<ChildProcess>(relay_daemon(cfg));
    const long resumed_at = writer.written();
    ASSERT_TRUE(eventually([&] { return rows(name) >= resumed_at + 60; }, 60s)) << rows(name) << " " << resumed_at;
    std::string writer_error;
    const long written = writer.stop(&writer_error);
    EXPECT_EQ(writer_error, "");
    ASSERT_TRUE(eventually([&] { return rows(name) >= written; }, 60s))
        << rows(name) << " of " << written << "\n"
        << relay->output() << a->log_text() << b->log_text();
    std::this_thread::sleep_for(500ms); // a duplicate effect would show up now
    EXPECT_EQ(relay->terminate(), 0) << relay->output();

    EXPECT_EQ(scalar_long("SELECT count(*) FROM " + table()), written);
    EXPECT_EQ(scalar_long("SELECT count(*) FROM " + table() + " WHERE status <> 'PUBLISHED'"), 0);
    EXPECT_EQ(rows(name), written);
    EXPECT_EQ(not_once(name), 0) << "an event lost or applied twice";
    EXPECT_EQ(order_violations(name), 0) << "an aggregate's events applied out of seq order";
    EXPECT_GT(
        scalar_long("SELECT count(DISTINCT part) FROM " + effects() + " WHERE consumer = '" + name + "' AND part >= 4"),
        0)
        << "the new partitions p4 .. p7 were never consumed";
    const long moved = scalar_long("SELECT count(*) FROM (SELECT aggregate FROM " + effects() + " WHERE consumer = '" +
                                   name + "' GROUP BY aggregate HAVING count(DISTINCT part) > 1) moved");
    EXPECT_GT(moved, 0) << "no aggregate moved to another queue: the change was not exercised";
    std::printf("[ stats    ] %ld events, %ld of them committed while the relay was stopped; %ld of 24 aggregates "
                "moved to another partition queue\n",
                written, resumed_at - written_at_drain, moved);
    EXPECT_EQ(a->error(), "");
    EXPECT_EQ(b->error(), "");
}

// kill -9 of an instance process (the fault suite's consumer, public C API) while another runs:
// the survivor consumes the dead instance's partitions within the lease, one heartbeat
// (lease / 4) and a margin for reconnecting and the first message on a loaded 2-core machine.
TEST_F(PartitionTest, KilledInstanceProcessIsTakenOverWithinTheLeaseAndAHeartbeat) {
    constexpr int kLeaseMs = 1500; // the fixture's consumer.lease_ms
    constexpr int kHeartbeatMs = kLeaseMs / 4;
    constexpr int kMarginMs = 1500;
    constexpr int kBoundMs = kLeaseMs + kHeartbeatMs + kMarginMs;
    constexpr int kEvents = 400;
    const std::string name = subscriber("it-kill", 4);
    // The fault consumer's effects table: one row per (consumer, event), n its applications.
    db->exec_simple("DROP TABLE " + effects());
    db->exec_simple(
        "CREATE TABLE " + effects() +
        " (applied bigserial, consumer text NOT NULL, outbox_id text NOT NULL, aggregate_id text NOT NULL,"
        " seq bigint NOT NULL, n int NOT NULL, instance text, part int, PRIMARY KEY (consumer, outbox_id))");
    const std::string log_path = ::testing::TempDir() + "outbox-killed-instance-" + suffix + ".log";
    std::remove(log_path.c_str());
    ChildProcess doomed({OUTBOX_FAULT_CONSUMER_PATH, "--name", name, "--schema", cfg.schema, "--exchange", cfg.exchange,
                         "--log", log_path, "--handler-sleep-us", "100000", "--set", "consumer.partitions=4", "--set",
                         "consumer.instance=a-doomed", "--set", "consumer.lease_ms=" + std::to_string(kLeaseMs)},
                        {"OUTBOX_PG_URL=" + consumer_pg_url(), "OUTBOX_AMQP_URL=" + amqp_url()});
    auto log_text = [&] {
        std::ifstream in(log_path);
        std::stringstream ss;
        ss << in.rdbuf();
        return ss.str();
    };
    ASSERT_TRUE(eventually([&] { return log_text().find("partitions [0,1,2,3] of 4") != std::string::npos; }, 20s))
        << log_text() << doomed.output();

    // The survivor, in this process: when it first handled a message of each partition after the kill.
    std::mutex mu;
    std::map<int, Clock::time_point> first_after_kill;
    std::optional<Clock::time_point> killed_at;
    Instance survivor(partitioned(4, "b-survivor"), name, [&](outbox::pg::Conn &tx, const outbox::Delivery &d) {
        {
            std::lock_guard<std::mutex> lock(mu);
            if (killed_at && first_after_kill.count(d.partition) == 0) {
                first_after_kill[d.partition] = Clock::now();
            }
        }
        tx.exec("INSERT INTO " + effects() +
                    " (consumer, outbox_id, aggregate_id, seq, n, instance, part) VALUES ($1, $2, $3, $4, 1, $5, $6)"
                    " ON CONFLICT (consumer, outbox_id) DO UPDATE SET n = effects.n + 1",
                {name, d.event_id, d.aggregate_id, std::to_string(d.seq), "b-survivor", std::to_string(d.partition)});
    });
    // Sorted, "a-doomed" keeps 0 and 2, "b-survivor" gets 1 and 3.
    ASSERT_TRUE(eventually([&] { return log_text().find("partitions [0,2] of 4") != std::string::npos; }, 20s))
        << log_text();
    ASSERT_TRUE(eventually([&] { return as_set(survivor.held()) == std::set<int>{1, 3}; }, 20s)) << survivor.log_text();

    write_events(kEvents, 40, "k");
    relay_all();
    const std::string doomed_rows =
        "SELECT count(*) FROM " + effects() + " WHERE consumer = '" + name + "' AND instance IS NULL";
    // The doomed instance handles 10 messages a second per partition: a backlog stays in 0 and 2.
    ASSERT_TRUE(eventually([&] { return scalar_long(doomed_rows) >= 10; }, 20s)) << log_text();
    {
        std::lock_guard<std::mutex> lock(mu);
        killed_at = Clock::now();
    }
    doomed.signal(SIGKILL);
    ASSERT_EQ(doomed.wait(5000), 128 + SIGKILL);
    const long handled_by_doomed = scalar_long(doomed_rows);

    std::optional<Clock::time_point> assigned_at;
    ASSERT_TRUE(eventually(
        [&] {
            if (!assigned_at && survivor.held().size() == 4) {
                assigned_at = Clock::now();
            }
            std::lock_guard<std::mutex> lock(mu);
            return first_after_kill.count(0) != 0 && first_after_kill.count(2) != 0;
        },
        std::chrono::milliseconds(kBoundMs * 4), 5ms))
        << survivor.log_text();
    auto ms = [&](Clock::time_point t) {
        return std::chrono::duration_cast<std::chrono::milliseconds>(t - *killed_at).count();
    };
    long long took = 0;
    {
        std::lock_guard<std::mutex> lock(mu);
        took = std::max(ms(first_after_kill[0]), ms(first_after_kill[2]));
    }
    std::printf("[ takeover ] kill -9 of the instance holding partitions 0 and 2: the survivor held all 4 after "
                "%lld ms and had consumed from both after %lld ms (bound %d ms = lease %d + heartbeat %d + margin "
                "%d)\n",
                assigned_at ? static_cast<long long>(ms(*assigned_at)) : -1LL, took, kBoundMs, kLeaseMs, kHeartbeatMs,
                kMarginMs);
    EXPECT_LE(took, kBoundMs) << "the dead instance's partitions were taken over too late";
    EXPECT_GE(took, kLeaseMs - kHeartbeatMs) << "taken over before the lease could have run out: not by the lease?";

    ASSERT_TRUE(eventually(
        [&] {
            return scalar_long("SELECT count(*) FROM " + effects() + " WHERE consumer = '" + name + "'") >= kEvents;
        },
        60s))
        << survivor.log_text();
    std::this_thread::sleep_for(300ms);
    EXPECT_GT(handled_by_doomed, 0);
    EXPECT_EQ(scalar_long("SELECT count(*) FROM " + table() + " o LEFT JOIN " + effects() +
                          " e ON e.outbox_id = o.outbox_id::text AND e.consumer = '" + name +
                          "' WHERE coalesce(e.n, 0) <> 1"),
              0)
        << "an event lost or applied twice";
    EXPECT_EQ(scalar_long("SELECT count(*) FROM (SELECT seq, lag(seq) OVER (PARTITION BY aggregate_id ORDER BY "
                          "applied) AS prev FROM " +
                          effects() + " WHERE consumer = '" + name +
                          "') x WHERE (prev IS NULL AND seq <> 1) OR (prev IS NOT NULL AND seq <> prev + 1)"),
              0)
        << "an aggregate's events applied out of seq order";
    EXPECT_EQ(survivor.error(), "");
}
