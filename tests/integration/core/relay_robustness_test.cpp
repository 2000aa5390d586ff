// The relay under stress, against the real PostgreSQL and RabbitMQ: several relays at once with
// concurrent writers, kill -9 of the `outbox relay` daemon, lost connections to either server, and
// SIGTERM under load. What must hold every time (DESIGN.md, "The relay's rules"):
//  - nothing committed is lost: every committed event reaches the queue at least once;
//  - nothing rolled back is published;
//  - a row is PUBLISHED only if the broker confirmed it, so the queue holds every PUBLISHED row;
//  - per aggregate, the first delivery of seq n comes after the first delivery of seq n-1.
// Every wait is bounded; a relay thread or child process that does not finish aborts the run
// instead of hanging it.
#include "relay_fixture.hpp"
#include "test_shell.hpp"
#include "waits.hpp"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <mutex>
#include <sstream>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

extern char **environ;

using namespace outbox_test;
using namespace std::chrono_literals;

namespace {

using Clock = std::chrono::steady_clock;

// A thread that must finish: join() waits at most `limit`, then aborts the whole run (a hung
// relay must fail the suite loudly, never hang it). The body's exceptions are kept for the test.
class Worker {
  public:
    Worker() = default;
    explicit Worker(std::function<void()> body) { start(std::move(body)); }
    Worker(const Worker &) = delete;
    Worker &operator=(const Worker &) = delete;
    ~Worker() { join(60s, "worker (cleanup)"); }

    void start(std::function<void()> body) {
        thread_ = std::thread([this, body = std::move(body)] {
            try {
                body();
            } catch (const std::exception &e) {
                std::lock_guard<std::mutex> lock(mu_);
                error_ = e.what();
            } catch (...) {
                std::lock_guard<std::mutex> lock(mu_);
                error_ = "unknown exception";
            }
            finished_ = true;
        });
    }
    void join(std::chrono::milliseconds limit, const char *what) {
        if (!thread_.joinable()) {
            return;
        }
        if (!eventually([&] { return finished_.load(); }, limit, 5ms)) {
            std::fprintf(stderr, "FATAL: %s did not finish within %lld ms; aborting instead of hanging\n", what,
                         static_cast<long long>(limit.count()));
            std::abort();
        }
        thread_.join();
    }
    [[nodiscard]] bool finished() const { return finished_.load(); }
    std::string error() const {
        std::lock_guard<std::mutex> lock(mu_);
        return error_;
    }

  private:
    std::thread thread_;
    std::atomic<bool> finished_{false};
    mutable std::mutex mu_;
    std::string error_;
};

// A Relay running run() on its own thread, with its log kept and its steps counted.
class RunningRelay {
  public:
    explicit RunningRelay(const outbox::Config &cfg) : relay_(cfg) {
        relay_.set_logger([this](outbox::LogLevel level, const std::string &msg) {
            std::lock_guard<std::mutex> lock(mu_);
            if (level >= outbox::LogLevel::warn) {
                ++warnings_;
            }
            if (msg.rfind("event ", 0) == 0) {
                return; // one line per failed event: counted, not kept
            }
            if (log_.size() < 10000) {
                log_.push_back(msg);
            }
        });
        worker_.start([this] {
            relay_.run([this](const outbox::RelayStats &st) {
                published_ += st.published;
                read_ += st.read;
                failed_ += st.failed;
                ++steps_;
            });
        });
    }
    RunningRelay(const RunningRelay &) = delete;
    RunningRelay &operator=(const RunningRelay &) = delete;
    ~RunningRelay() { stop_and_join(); }

    // stop() and wait for run() to return; returns how long that took.
    long long stop_and_join(std::chrono::milliseconds limit = 30s) {
        const auto t0 = Clock::now();
        relay_.stop();
        worker_.join(limit, "relay run()");
        stopped_ = true;
        return ms_since(t0);
    }
    [[nodiscard]] bool running() const { return !stopped_.load(); }
    // Log lines starting with `prefix`.
    int log_count(const std::string &prefix) const {
        std::lock_guard<std::mutex> lock(mu_);
        return static_cast<int>(
            std::count_if(log_.begin(), log_.end(), [&](const std::string &m) { return m.rfind(prefix, 0) == 0; }));
    }
    std::vector<std::string> log() const {
        std::lock_guard<std::mutex> lock(mu_);
        return log_;
    }
    std::string error() const { return worker_.error(); }
    int warnings() const {
        std::lock_guard<std::mutex> lock(mu_);
        return warnings_;
    }
    [[nodiscard]] int64_t published() const { return published_.load(); }
    [[nodiscard]] int64_t events_read() const { return read_.load(); }
    [[nodiscard]] int64_t failed() const { return failed_.load(); }
    [[nodiscard]] int64_t steps() const { return steps_.load(); }

  private:
    mutable std::mutex mu_;
    std::vector<std::string> log_;
    int warnings_ = 0;
    std::atomic<int64_t> published_{0}, read_{0}, failed_{0}, steps_{0};
    std::atomic<bool> stopped_{false};
    outbox::Relay relay_; // after what its logger uses
    Worker worker_;       // last: joined before anything else goes
};

// One message as the queue received it.
struct Delivery {
    std::string id;
    std::string aggregate;
    long seq = -1;
};

// A Collector read on its own thread, so the broker never waits for the test and the test can
// look at what arrived so far at any time.
class BackgroundCollector {
  public:
    explicit BackgroundCollector(const std::string &exchange) : collector_(exchange) {
        worker_.start([this] { loop(); });
    }
    BackgroundCollector(const BackgroundCollector &) = delete;
    BackgroundCollector &operator=(const BackgroundCollector &) = delete;
    ~BackgroundCollector() {
        stop_ = true;
        worker_.join(30s, "collector");
    }

    std::vector<Delivery> snapshot() const {
        std::lock_guard<std::mutex> lock(mu_);
        return deliveries_;
    }
    std::unordered_set<std::string> ids() const {
        std::lock_guard<std::mutex> lock(mu_);
        return ids_;
    }
    size_t size() const {
        std::lock_guard<std::mutex> lock(mu_);
        return deliveries_.size();
    }
    std::string error() const { return worker_.error(); }

    // Waits until no message arrived for `quiet` (true), or `limit` passed (false).
    bool wait_quiet(std::chrono::milliseconds quiet, std::chrono::milliseconds limit) {
        return eventually(
            [&] {
                std::lock_guard<std::mutex> lock(mu_);
                return Clock::now() - last_ >= quiet;
            },
            limit, 10ms);
    }
    // Waits until every id of `want` arrived (true) or `limit` passed (false).
    bool wait_for(const std::vector<std::string> &want, std::chrono::milliseconds limit) {
        size_t from = 0; // ids before `from` are known to have arrived
        return eventually(
            [&] {
                std::lock_guard<std::mutex> lock(mu_);
                while (from < want.size() && ids_.count(want[from]) != 0) {
                    ++from;
                }
                return from == want.size();
            },
            limit, 20ms);
    }

  private:
    void loop() {
        while (!stop_) {
            std::optional<outbox::amqp::Event> ev = collector_.connection().wait(100);
            if (!ev) {
                continue;
            }
            if (auto *m = std::get_if<outbox::amqp::Message>(&*ev)) {
                Delivery d;
                d.id = m->props.message_id;
                d.aggregate = header_string(m->props, "outbox-aggregate-id");
                std::string seq = header_string(m->props, "outbox-seq");
                d.seq = seq.empty() ? -1 : std::stol(seq);
                std::lock_guard<std::mutex> lock(mu_);
                ids_.insert(d.id);
                deliveries_.push_back(std::move(d));
                last_ = Clock::now();
            }
        }
    }

    Collector collector_;
    mutable std::mutex mu_;
    std::vector<Delivery> deliveries_;
    std::unordered_set<std::string> ids_;
    Clock::time_point last_ = Clock::now();
    std::atomic<bool> stop_{false};
    Worker worker_; // last
};

struct RowInfo {
    std::string aggregate;
    long seq = 0;
    std::string status;
};

std::unordered_map<std::string, RowInfo> load_rows(outbox::pg::Conn &db, const std::string &table) {
    outbox::pg::Result r = db.exec("SELECT outbox_id, aggregate_id, seq, status FROM " + table);
    std::unordered_map<std::string, RowInfo> rows;
    rows.reserve(static_cast<size_t>(r.rows()));
    for (int i = 0; i < r.rows(); ++i) {
        rows.emplace(std::string(r.get(i, 0)),
                     RowInfo{std::string(r.get(i, 1)), static_cast<long>(r.get_int(i, 2)), std::string(r.get(i, 3))});
    }
    return rows;
}

// What the queue received, checked against the table.
struct Analysis {
    size_t messages = 0;
    size_t distinct = 0;
    size_t duplicates = 0;            // messages beyond the first of their event
    std::vector<std::string> unknown; // delivered, but no such row (e.g. rolled back)
    std::vector<std::string> order;   // first deliveries out of per-aggregate order
    std::vector<std::string> headers; // aggregate/seq headers that do not match the row
    std::vector<std::string> missing; // rows never delivered
};

Analysis analyse(const std::vector<Delivery> &deliveries, const std::unordered_map<std::string, RowInfo> &rows) {
    Analysis a;
    a.messages = deliveries.size();
    std::unordered_set<std::string> seen;
    std::unordered_map<std::string, long> last_first; // aggregate -> seq of its latest first delivery
    for (const Delivery &d : deliveries) {
        auto row = rows.find(d.id);
        if (row == rows.end()) {
            if (a.unknown.size() < 20) {
                a.unknown.push_back(d.id);
            }
            continue;
        }
        if (row->second.aggregate != d.aggregate || row->second.seq != d.seq) {
            if (a.headers.size() < 20) {
                a.headers.push_back(d.id + " has headers " + d.aggregate + "/" + std::to_string(d.seq) + ", row " +
                                    row->second.aggregate + "/" + std::to_string(row->second.seq));
            }
        }
        if (!seen.insert(d.id).second) {
            ++a.duplicates;
            continue;
        }
        long &last = last_first[row->second.aggregate];
        if (row->second.seq != last + 1 && a.order.size() < 20) {
            a.order.push_back("aggregate " + row->second.aggregate + ": first delivery of seq " +
                              std::to_string(row->second.seq) + " after seq " + std::to_string(last));
        }
        last = std::max(last, row->second.seq);
    }
    a.distinct = seen.size();
    for (const auto &[id, row] : rows) {
        if (seen.count(id) == 0 && a.missing.size() < 20) {
            a.missing.push_back(id + " (" + row.aggregate + "/" + std::to_string(row.seq) + ", " + row.status + ")");
        }
    }
    return a;
}

std::string join_lines(const std::vector<std::string> &v) {
    std::string out;
    for (const auto &s : v) {
        out += "\n  " + s;
    }
    return out;
}

// Writes `n` events over `aggregates` aggregates named tag0..., in transactions of `per_tx`.
std::vector<std::string> write_backlog(outbox::pg::Conn &conn, const outbox::Config &cfg, int n, int aggregates,
                                       const std::string &tag, int per_tx = 1000) {
    std::vector<std::string> ids;
    ids.reserve(static_cast<size_t>(n));
    outbox::Event ev;
    ev.set("aggregate_type", "PRD");
    ev.set("operation", "PUT");
    for (int i = 0; i < n; ++i) {
        if (i % per_tx == 0) {
            conn.exec_simple("BEGIN");
        }
        ev.set("aggregate_id", tag + std::to_string(i % aggregates));
        ev.set("payload", "{\"i\":" + std::to_string(i) + "}");
        outbox::store::write(conn, cfg, ev);
        ids.push_back(ev.resolved_id);
        if (i % per_tx == per_tx - 1 || i == n - 1) {
            conn.exec_simple("COMMIT");
        }
    }
    return ids;
}

// Writers: each thread its own connection, transactions of 1 to 6 events. Within a transaction
// the aggregates are taken in increasing order (as every writer does), so writers never deadlock
// on the aggregates' sequence rows. Every 25th transaction is rolled back on purpose.
class Writers {
  public:
    Writers(const outbox::Config &cfg, int threads, int events_per_thread, int aggregates, const std::string &tag,
            std::chrono::microseconds pause = 0us)
        : cfg_(cfg), lists_(static_cast<size_t>(threads)), rolled_back_lists_(static_cast<size_t>(threads)) {
        for (int t = 0; t < threads; ++t) {
            workers_.push_back(std::make_unique<Worker>([this, t, events_per_thread, aggregates, tag, pause] {
                write(t, events_per_thread, aggregates, tag, pause);
            }));
        }
    }
    ~Writers() {
        stop_ = true;
        join();
    }
    void stop() { stop_ = true; }
    void join(std::chrono::milliseconds limit = 120s) {
        for (auto &w : workers_) {
            w->join(limit, "writer");
        }
    }
    std::vector<std::string> committed() const {
        std::lock_guard<std::mutex> lock(mu_);
        std::vector<std::string> out;
        for (const auto &l : lists_) {
            out.insert(out.end(), l.begin(), l.end());
        }
        return out;
    }
    std::vector<std::string> rolled_back() const {
        std::lock_guard<std::mutex> lock(mu_);
        std::vector<std::string> out;
        for (const auto &l : rolled_back_lists_) {
            out.insert(out.end(), l.begin(), l.end());
        }
        return out;
    }
    std::string errors() const {
        std::string out;
        for (const auto &w : workers_) {
            if (!w->error().empty()) {
                out += w->error() + "\n";
            }
        }
        return out;
    }
    [[nodiscard]] int multi_event_transactions() const { return multi_.load(); }

  private:
    void write(int t, int n, int aggregates, const std::string &tag, std::chrono::microseconds pause) {
        outbox::pg::Conn conn = outbox::pg::Conn::open(pg_url());
        // Commits need not wait for the disk here (the relay sees them all the same): keeps the
        // writers fast on a small machine.
        conn.exec_simple("SET synchronous_commit = off");
        std::mt19937 rng(static_cast<unsigned>(std::random_device{}()) + static_cast<unsigned>(t));
        int written = 0;
        int tx = 0;
        while (written < n && !stop_) {
            int size = std::min<int>(n - written, static_cast<int>(rng() % 2 == 0 ? 1 : 2 + rng() % 5));
            const bool rollback = ++tx % 25 == 0;
            int agg = static_cast<int>(rng() % static_cast<unsigned>(std::max(1, aggregates - 2 * size)));
            std::vector<std::string> ids;
            if (size > 1 || rollback) {
                conn.exec_simple("BEGIN");
            }
            for (int i = 0; i < size; ++i) {
                outbox::Event ev;
                ev.set("aggregate_type", "PRD");
                ev.set("operation", "PATCH");
                ev.set("aggregate_id", tag + std::to_string(agg));
                ev.set("payload", "{\"writer\":" + std::to_string(t) + ",\"n\":" + std::to_string(written + i) + "}");
                outbox::store::write(conn, cfg_, ev);
                ids.push_back(ev.resolved_id);
                agg += static_cast<int>(rng() % 3); // same aggregate again, or a later one
            }
            if (rollback) {
                conn.exec_simple("ROLLBACK");
            } else if (size > 1) {
                conn.exec_simple("COMMIT");
                ++multi_;
            }
            std::lock_guard<std::mutex> lock(mu_);
            auto &dst = rollback ? rolled_back_lists_[static_cast<size_t>(t)] : lists_[static_cast<size_t>(t)];
            dst.insert(dst.end(), ids.begin(), ids.end());
            if (!rollback) {
                written += size;
            }
            if (pause.count() > 0) {
                std::this_thread::sleep_for(pause);
            }
        }
    }

    outbox::Config cfg_;
    mutable std::mutex mu_;
    std::vector<std::vector<std::string>> lists_;
    std::vector<std::vector<std::string>> rolled_back_lists_;
    std::atomic<bool> stop_{false};
    std::atomic<int> multi_{0};
    std::vector<std::unique_ptr<Worker>> workers_; // last
};

// The `outbox` CLI as a child process, stdout and stderr to a file. Killed (SIGKILL) and reaped
// on destruction if still running.
class Child {
  public:
    Child(const std::vector<std::string> &args, const std::string &log_path) {
        std::vector<char *> argv;
        argv.push_back(const_cast<char *>(OUTBOX_CLI_PATH));
        for (const auto &a : args) {
            argv.push_back(const_cast<char *>(a.c_str()));
        }
        argv.push_back(nullptr);
        posix_spawn_file_actions_t fa;
        posix_spawn_file_actions_init(&fa);
        posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
        posix_spawn_file_actions_addopen(&fa, 1, log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
        posix_spawn_file_actions_adddup2(&fa, 1, 2);
        int rc = posix_spawn(&pid_, OUTBOX_CLI_PATH, &fa, nullptr, argv.data(), environ);
        posix_spawn_file_actions_destroy(&fa);
        if (rc != 0) {
            pid_ = -1;
            ADD_FAILURE() << "cannot start " << OUTBOX_CLI_PATH << ": " << std::strerror(rc);
        }
        started_ = Clock::now();
    }
    Child(const Child &) = delete;
    Child &operator=(const Child &) = delete;
    ~Child() {
        if (running()) {
            ::kill(pid_, SIGKILL);
            int st = 0;
            waitpid(pid_, &st, 0);
        }
    }
    [[nodiscard]] bool running() const { return pid_ > 0 && !reaped_; }
    void signal(int sig) const {
        if (running()) {
            ::kill(pid_, sig);
        }
    }
    // Waits at most `limit` for the child to exit; true with its wait status when it did.
    bool wait_exit(std::chrono::milliseconds limit, int *status) {
        if (!running()) {
            *status = status_;
            return pid_ > 0;
        }
        bool done = eventually(
            [&] {
                pid_t r = waitpid(pid_, &status_, WNOHANG);
                return r == pid_;
            },
            limit, 5ms);
        if (done) {
            reaped_ = true;
            *status = status_;
        }
        return done;
    }
    [[nodiscard]] long long age_ms() const { return ms_since(started_); }

  private:
    pid_t pid_ = -1;
    bool reaped_ = false;
    int status_ = 0;
    Clock::time_point started_;
};

// rabbitmqctl for the test node, bounded in time like every other wait here.
std::string rabbitmqctl() {
    return "timeout 60 " + std::string(OUTBOX_SOURCE_DIR) + "/scripts/services.sh rabbitmqctl";
}

class RelayRobustnessTest : public RelayTest {
  protected:
    void SetUp() override {
        RelayTest::SetUp();
        cfg.set("relay.poll_interval_ms", "50");
        log_path = ::testing::TempDir() + "outbox-relay-" + suffix + ".log";
        std::remove(log_path.c_str());
    }
    void TearDown() override {
        std::remove(log_path.c_str());
        RelayTest::TearDown();
    }

    std::vector<std::string> cli_relay_args(int batch_size, const std::string &level, int window = 0) const {
        std::vector<std::string> args{"relay",
                                      "--pg-url",
                                      cfg.pg_url,
                                      "--amqp-url",
                                      cfg.amqp_url,
                                      "--set",
                                      "outbox.schema=" + cfg.schema,
                                      "--set",
                                      "amqp.exchange=" + cfg.exchange,
                                      "--set",
                                      "relay.name=" + cfg.relay_name,
                                      "--batch-size",
                                      std::to_string(batch_size),
                                      "--log-level",
                                      level};
        if (window > 0) {
            args.insert(args.end(), {"--window", std::to_string(window)});
        }
        return args;
    }

    // As autovacuum would after a bulk load: with the statistics of an empty table the claim
    // plans a bitmap scan over the whole backlog (~200 ms per step at 20k pending) instead of
    // walking the pending index, and the kills/stops would nearly always land in the claim.
    void analyze() { db->exec_simple("ANALYZE " + table()); }

    long count_status(const std::string &status) {
        return scalar_long("SELECT count(*) FROM " + table() + " WHERE status = '" + status + "'");
    }

    // Steps a relay of this test's configuration until nothing is PENDING (rows locked by a
    // killed relay's dying backend are skipped until it is gone, so this polls), at most `limit`.
    bool drain_all(std::chrono::milliseconds limit) {
        outbox::Relay relay(cfg);
        return eventually(
            [&] {
                drain(relay);
                return count_status("PENDING") == 0;
            },
            limit, 50ms);
    }

    std::string log_path;
};

} // namespace

// 1. Three relays over 20,000 events that four writers commit while the relays run. One relay per
// table is active (storage version 2: it holds the table's relay lock); the others stand by. The
// active one is stopped twice while the writers run, and the next takes over where it left off.
TEST_F(RelayRobustnessTest, ThreeRelaysHandOverKeepingPerAggregateOrderWhileFourWritersCommit) {
    constexpr int kWriters = 4;
    constexpr int kPerWriter = 5000;
    constexpr int kAggregates = 300;
    cfg.set("relay.batch_size", "200");
    BackgroundCollector queue(cfg.exchange);
    const auto t0 = Clock::now();

    std::vector<std::unique_ptr<RunningRelay>> relays;
    for (int i = 0; i < 3; ++i) {
        outbox::Config c = cfg;
        c.set("relay.name", cfg.relay_name + "-" + std::to_string(i));
        relays.push_back(std::make_unique<RunningRelay>(c));
    }
    Writers writers(cfg, kWriters, kPerWriter, kAggregates, "a");
    std::vector<size_t> handed_over;
    for (int round = 0; round < 2; ++round) {
        size_t active = relays.size();
        eventually(
            [&] {
                for (size_t i = 0; i < relays.size(); ++i) {
                    if (relays[i]->running() && relays[i]->published() > 0) {
                        active = i;
                    }
                }
                return active < relays.size();
            },
            30s, 10ms);
        ASSERT_LT(active, relays.size()) << "no relay became active";
        EXPECT_LT(relays[active]->stop_and_join(), 20000);
        handed_over.push_back(active);
    }
    writers.join();
    ASSERT_EQ(writers.errors(), "") << "a writer failed";
    const std::vector<std::string> committed = writers.committed();
    const std::vector<std::string> rolled_back = writers.rolled_back();
    ASSERT_EQ(committed.size(), static_cast<size_t>(kWriters * kPerWriter));
    EXPECT_GT(writers.multi_event_transactions(), 500);
    EXPECT_GT(rolled_back.size(), 0U);
    const long long write_ms = ms_since(t0);

    const bool all_published =
        eventually([&] { return count_status("PUBLISHED") == static_cast<long>(committed.size()); }, 60s, 50ms);
    const long long publish_ms = ms_since(t0);
    for (auto &r : relays) {
        if (r->running()) {
            EXPECT_LT(r->stop_and_join(), 20000) << "stop() must make run() return promptly";
        }
        EXPECT_EQ(r->error(), "");
    }
    ASSERT_TRUE(all_published) << count_status("PUBLISHED") << " of " << committed.size()
                               << " published within 60 s; pending " << count_status("PENDING") << ", failed "
                               << count_status("FAILED");
    EXPECT_TRUE(queue.wait_for(committed, 30s)) << "not every committed event reached the queue";
    EXPECT_TRUE(queue.wait_quiet(300ms, 10s));
    EXPECT_EQ(queue.error(), "");

    auto rows = load_rows(*db, table());
    EXPECT_EQ(rows.size(), committed.size()) << "the table holds exactly the committed events";
    for (const auto &id : rolled_back) {
        ASSERT_EQ(rows.count(id), 0U) << "a rolled-back event is in the table: " << id;
    }
    Analysis a = analyse(queue.snapshot(), rows);
    EXPECT_TRUE(a.unknown.empty()) << "delivered but not committed (rolled back?):" << join_lines(a.unknown);
    EXPECT_TRUE(a.missing.empty()) << "committed but never delivered:" << join_lines(a.missing);
    if (!a.missing.empty()) {
        // Where the relays left the missing events: their positions, the cursor, the receipts near.
        outbox::pg::Result d =
            db->exec("SELECT e.position, (SELECT cursor FROM " + outbox::stream::relay_table(cfg) +
                         "), (SELECT string_agg(from_position || '-' || to_position, ' ') FROM " +
                         outbox::stream::receipts_table(cfg) +
                         " r WHERE r.to_position >= e.position - 3 AND r.from_position <= e.position + 3) FROM " +
                         events() + " e WHERE e.outbox_id::text = ANY(CAST($1 AS text[]))",
                     {"{" +
                      [&] {
                          std::string j;
                          for (const auto &m : a.missing) {
                              j += (j.empty() ? "" : ",") + m.substr(0, 36);
                          }
                          return j;
                      }() +
                      "}"});
        for (int i = 0; i < d.rows(); ++i) {
            std::printf("[ missing  ] position %s, cursor %s, receipts near: %s\n", std::string(d.get(i, 0)).c_str(),
                        std::string(d.get(i, 1)).c_str(), std::string(d.get(i, 2)).c_str());
        }
    }
    EXPECT_TRUE(a.order.empty()) << "per-aggregate order broken:" << join_lines(a.order);
    EXPECT_TRUE(a.headers.empty()) << join_lines(a.headers);
    EXPECT_EQ(a.distinct, committed.size());
    // No failure was injected: a relay republishes only what it could not mark, so a clean run
    // has no duplicate at all.
    EXPECT_EQ(a.duplicates, 0U) << "duplicates in a run without failures";
    EXPECT_EQ(count_status("PUBLISHED"), static_cast<long>(committed.size()));
    int64_t sum = 0;
    for (size_t i = 0; i < relays.size(); ++i) {
        EXPECT_GT(relays[i]->published(), 0) << "relay " << i << " never took over";
        EXPECT_EQ(relays[i]->failed(), 0) << "relay " << i;
        sum += relays[i]->published();
    }
    EXPECT_EQ(sum, static_cast<int64_t>(committed.size())) << "each event marked by exactly one relay";
    std::printf("[ stats    ] %zu events (%zu rolled back, %d multi-event tx) on %d aggregates; written in %lld ms, "
                "all published after %lld ms; per relay %lld/%lld/%lld; %zu messages, %zu duplicates\n",
                committed.size(), rolled_back.size(), writers.multi_event_transactions(), kAggregates, write_ms,
                publish_ms, static_cast<long long>(relays[0]->published()),
                static_cast<long long>(relays[1]->published()), static_cast<long long>(relays[2]->published()),
                a.messages, a.duplicates);
}

// 2. kill -9 of the `outbox relay` daemon at random points while a backlog drains, 10 times.
TEST_F(RelayRobustnessTest, KilledDaemonLosesNothingAndMarksOnlyConfirmedEvents) {
    constexpr int kRounds = 10;
    constexpr int kBatch = 100;
    BackgroundCollector queue(cfg.exchange);
    std::vector<std::string> committed = write_backlog(*db, cfg, 5000, 500, "k");
    analyze();
    std::mt19937 rng(std::random_device{}());
    int rounds_with_progress = 0;
    int rounds_killed_mid_backlog = 0;
    std::string rounds_summary;
    for (int round = 0; round < kRounds; ++round) {
        const long before = count_status("PUBLISHED");
        {
            Child child(cli_relay_args(kBatch, "warn"), log_path);
            // Kill at a random point of the backlog's drain, counted in events published (up to
            // three quarters of it): a delay from the start lands before the first publish when a
            // loaded machine makes start-up slow, and after the last one on a quiet machine.
            const long pending = count_status("PENDING");
            const long kill_at =
                before + 1 + static_cast<long>(rng() % static_cast<unsigned long>(std::max(1L, pending * 3 / 4)));
            const auto started = std::chrono::steady_clock::now();
            while (count_status("PUBLISHED") < kill_at && std::chrono::steady_clock::now() - started < 20s) {
                std::this_thread::sleep_for(std::chrono::milliseconds(1));
            }
            const long kill_after = kill_at - before;
            child.signal(SIGKILL);
            int status = 0;
            ASSERT_TRUE(child.wait_exit(10s, &status)) << "the killed relay did not go away";
            ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL)
                << "round " << round << ": the relay exited by itself before the kill (status " << status << "):\n"
                << tail(read_file(log_path));
            rounds_summary += " at " + std::to_string(kill_after) + " of " + std::to_string(pending);
        }
        const long after = count_status("PUBLISHED");
        rounds_with_progress += after > before ? 1 : 0;
        rounds_killed_mid_backlog += count_status("PENDING") > 0 ? 1 : 0;
        rounds_summary += "/+" + std::to_string(after - before);
        // Writers add events between rounds: a transaction of many (at least 300, and enough to
        // keep a backlog of ~4,000 for the next kill to land in), and a few on their own.
        const int top_up = std::max(300, 4000 - static_cast<int>(count_status("PENDING")));
        auto more = write_backlog(*db, cfg, top_up, 500, "k", top_up);
        committed.insert(committed.end(), more.begin(), more.end());
        auto single = write_backlog(*db, cfg, 20, 20, "s" + std::to_string(round) + "-", 1);
        committed.insert(committed.end(), single.begin(), single.end());
    }
    EXPECT_GE(rounds_with_progress, 3) << "the daemon rarely got to publish before the kill:" << rounds_summary << "\n"
                                       << tail(read_file(log_path));
    EXPECT_GE(rounds_killed_mid_backlog, kRounds / 2) << "kills should land while a backlog drains:" << rounds_summary;
    EXPECT_EQ(count_status("FAILED"), 0);

    // Nothing marked without a confirm: every row PUBLISHED by now must be in the queue. Wait for
    // the queue to go quiet first (the killed relays' last confirmed messages may still be in
    // flight to the collector).
    EXPECT_TRUE(queue.wait_quiet(500ms, 15s));
    {
        auto rows = load_rows(*db, table());
        auto got = queue.ids();
        std::vector<std::string> unconfirmed;
        for (const auto &[id, row] : rows) {
            if (row.status == "PUBLISHED" && got.count(id) == 0 && unconfirmed.size() < 20) {
                unconfirmed.push_back(id + " (" + row.aggregate + "/" + std::to_string(row.seq) + ")");
            }
        }
        EXPECT_TRUE(unconfirmed.empty()) << "PUBLISHED rows the queue never received:" << join_lines(unconfirmed);
    }

    // A last relay drains the rest.
    ASSERT_TRUE(drain_all(30s)) << count_status("PENDING") << " still pending";
    EXPECT_TRUE(queue.wait_for(committed, 30s)) << "not every committed event reached the queue";
    EXPECT_TRUE(queue.wait_quiet(300ms, 10s));
    EXPECT_EQ(queue.error(), "");
    auto rows = load_rows(*db, table());
    EXPECT_EQ(rows.size(), committed.size());
    EXPECT_EQ(count_status("PUBLISHED"), static_cast<long>(committed.size()));
    Analysis a = analyse(queue.snapshot(), rows);
    EXPECT_TRUE(a.unknown.empty()) << join_lines(a.unknown);
    EXPECT_TRUE(a.missing.empty()) << "committed but never delivered:" << join_lines(a.missing);
    EXPECT_TRUE(a.order.empty()) << "per-aggregate order broken:" << join_lines(a.order);
    EXPECT_TRUE(a.headers.empty()) << join_lines(a.headers);
    // A kill loses at most the marks of the step in progress and of the next batch, which the
    // daemon publishes while the step's confirms come in (relay.overlap): two batches per kill.
    EXPECT_LE(a.duplicates, static_cast<size_t>(kRounds * 2 * kBatch));
    std::printf("[ stats    ] %zu events, %d kills (after/published:%s), %zu messages, %zu duplicates\n",
                committed.size(), kRounds, rounds_summary.c_str(), a.messages, a.duplicates);
}

// 3. The relay's connections are cut under it: PostgreSQL backends terminated, the AMQP
// connection closed by the broker. It reconnects by itself and loses nothing.
TEST_F(RelayRobustnessTest, RecoversFromLostConnectionsWithoutLosingEvents) {
    cfg.set("relay.batch_size", "100");
    BackgroundCollector queue(cfg.exchange);
    RunningRelay relay(cfg);
    // Writers keep committing while connections are cut.
    Writers writers(cfg, 1, 1000000, 200, "c", 2ms);
    auto connects = [&](const std::string &what) { return relay.log_count("connected to " + what); };
    ASSERT_TRUE(eventually([&] { return connects("RabbitMQ") >= 1 && connects("PostgreSQL") >= 1; }, 10s))
        << "the relay never connected:" << join_lines(relay.log());

    // (a) PostgreSQL: terminate the relay's backend, three times, each time waiting for it to be back.
    for (int i = 0; i < 3; ++i) {
        const int before = connects("PostgreSQL");
        std::this_thread::sleep_for(150ms);
        long killed = 0;
        ASSERT_TRUE(eventually(
            [&] {
                killed = scalar_long("SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity"
                                     " WHERE application_name = '" +
                                     cfg.relay_name + "'");
                return killed > 0;
            },
            10s))
            << "no backend named " << cfg.relay_name;
        // The relay has one session (version 1 had a second one, for the batch it claimed ahead).
        EXPECT_GE(killed, 1);
        EXPECT_LE(killed, 2);
        EXPECT_TRUE(eventually([&] { return connects("PostgreSQL") > before; }, 10s))
            << "the relay did not reconnect to PostgreSQL:" << join_lines(relay.log());
    }

    // (b) RabbitMQ: close the relay's connection from the broker side, twice.
    for (int i = 0; i < 2; ++i) {
        const int before = connects("RabbitMQ");
        std::this_thread::sleep_for(150ms);
        std::string pid;
        std::string listing;
        ASSERT_TRUE(eventually(
            [&] {
                int rc = 0;
                listing =
                    shell(rabbitmqctl() + " -q list_connections --no-table-headers pid name client_properties", &rc);
                std::istringstream in(listing);
                std::string line;
                while (std::getline(in, line)) {
                    // The `name` column is "host:port -> host:port"; the name the relay gives its
                    // connection is the connection_name client property.
                    if (line.rfind('<', 0) == 0 &&
                        line.find("{\"connection_name\",\"" + cfg.relay_name + "\"}") != std::string::npos) {
                        pid = line.substr(0, line.find('\t'));
                        return true;
                    }
                }
                return false;
            },
            15s, 200ms))
            << "the relay's AMQP connection is not listed:\n"
            << listing;
        int rc = 0;
        std::string out = shell(rabbitmqctl() + " close_connection '" + pid + "' 'outbox robustness test'", &rc);
        ASSERT_EQ(rc, 0) << out;
        EXPECT_TRUE(eventually([&] { return connects("RabbitMQ") > before; }, 15s))
            << "the relay did not reconnect to RabbitMQ:" << join_lines(relay.log());
    }

    // Let it run a little on fresh connections, stop the writers, and everything must go out.
    std::this_thread::sleep_for(300ms);
    writers.stop();
    writers.join();
    ASSERT_EQ(writers.errors(), "");
    const std::vector<std::string> committed = writers.committed();
    const auto t_stop = Clock::now();
    const bool all_published =
        eventually([&] { return count_status("PUBLISHED") == static_cast<long>(committed.size()); }, 30s, 50ms);
    const long long catch_up_ms = ms_since(t_stop);
    EXPECT_LT(relay.stop_and_join(), 20000);
    EXPECT_EQ(relay.error(), "");
    ASSERT_TRUE(all_published) << count_status("PUBLISHED") << " of " << committed.size()
                               << " published within 30 s of the last write; log:" << join_lines(relay.log());
    EXPECT_TRUE(queue.wait_for(committed, 30s)) << "not every committed event reached the queue";
    EXPECT_TRUE(queue.wait_quiet(300ms, 10s));
    EXPECT_EQ(queue.error(), "");
    auto rows = load_rows(*db, table());
    EXPECT_EQ(rows.size(), committed.size());
    Analysis a = analyse(queue.snapshot(), rows);
    EXPECT_TRUE(a.unknown.empty()) << join_lines(a.unknown);
    EXPECT_TRUE(a.missing.empty()) << "committed but never delivered:" << join_lines(a.missing);
    EXPECT_TRUE(a.order.empty()) << "per-aggregate order broken:" << join_lines(a.order);
    EXPECT_TRUE(a.headers.empty()) << join_lines(a.headers);
    // Each cut loses at most the marks of one step (a batch).
    EXPECT_LE(a.duplicates, static_cast<size_t>(5 * 100));
    std::printf("[ stats    ] %zu events, %d PostgreSQL and %d RabbitMQ connects, %d warnings, caught up %lld ms "
                "after the last write, %zu messages, %zu duplicates\n",
                committed.size(), connects("PostgreSQL"), connects("RabbitMQ"), relay.warnings(), catch_up_ms,
                a.messages, a.duplicates);
}

// 4. SIGTERM to the daemon under load: exit 0 promptly, nothing half-done, the rest still PENDING.
// Three daemons in turn over one 20,000-event backlog, each stopped at a different point of its
// steps; then an in-process relay drains the rest.
TEST_F(RelayRobustnessTest, SigtermUnderLoadExitsCleanlyWithNothingHalfDone) {
    constexpr long kEvents = 20000;
    constexpr int kStops = 3;
    BackgroundCollector queue(cfg.exchange);
    const std::vector<std::string> all = write_backlog(*db, cfg, static_cast<int>(kEvents), 1000, "g", 5000);
    analyze();
    std::string summary;
    for (int round = 0; round < kStops; ++round) {
        SCOPED_TRACE("stop " + std::to_string(round + 1));
        const long before = count_status("PUBLISHED");
        std::remove(log_path.c_str());
        long long exit_ms = 0;
        {
            // A small confirm window makes publishing the larger part of each step, so the stop
            // often lands while messages are in flight (the case "nothing half-done" is about).
            Child child(cli_relay_args(200, "debug", 1), log_path); // debug: the per-step lines
            // At least 300 ms in, and only once it is publishing: the stop must land under load.
            ASSERT_TRUE(eventually([&] { return child.age_ms() >= 300 && count_status("PUBLISHED") > before; }, 15s))
                << "the daemon published nothing:\n"
                << tail(read_file(log_path));
            const auto t_term = Clock::now();
            child.signal(SIGTERM);
            int status = 0;
            ASSERT_TRUE(child.wait_exit(20s, &status)) << "no exit within 20 s of SIGTERM:\n"
                                                       << tail(read_file(log_path));
            exit_ms = ms_since(t_term);
            EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status << "\n"
                                                                       << tail(read_file(log_path));
        }
        const std::string log = read_file(log_path);
        EXPECT_NE(log.find("relay stopped"), std::string::npos) << "run() did not return normally:\n" << tail(log);
        const size_t last_batch = log.rfind("batch: ");
        summary += "\n    stop " + std::to_string(round + 1) + ": exit " + std::to_string(exit_ms) +
                   " ms after SIGTERM; last step \"" +
                   (last_batch == std::string::npos ? std::string("none")
                                                    : log.substr(last_batch, log.find('\n', last_batch) - last_batch)) +
                   "\"";

        // What the stop left: every PUBLISHED row is in the queue, every other row is PENDING
        // with no retry counted, and nothing in the queue is left PENDING (it would go out twice).
        EXPECT_TRUE(queue.wait_quiet(500ms, 15s));
        auto rows = load_rows(*db, table());
        ASSERT_EQ(rows.size(), static_cast<size_t>(kEvents));
        auto got = queue.ids();
        long published = 0;
        long pending = 0;
        std::vector<std::string> unconfirmed; // PUBLISHED, not in the queue
        std::vector<std::string> half_done;   // in the queue, not marked PUBLISHED
        for (const auto &[id, row] : rows) {
            if (row.status == "PUBLISHED") {
                ++published;
                if (got.count(id) == 0 && unconfirmed.size() < 20) {
                    unconfirmed.push_back(id);
                }
            } else if (row.status == "PENDING") {
                ++pending;
                if (got.count(id) != 0 && half_done.size() < 20) {
                    half_done.push_back(id + " (" + row.aggregate + "/" + std::to_string(row.seq) + ")");
                }
            }
        }
        EXPECT_TRUE(unconfirmed.empty()) << "PUBLISHED rows the queue never received:" << join_lines(unconfirmed);
        EXPECT_EQ(published + pending, kEvents) << "every row PUBLISHED or still PENDING (none FAILED)";
        EXPECT_GT(published, before);
        EXPECT_GT(pending, 0) << "the daemon drained everything before SIGTERM: the stop did not happen under load";
        EXPECT_EQ(scalar_long("SELECT count(*) FROM " + table() + " WHERE retry_count > 0"), 0)
            << "a stop is not a failure";
        EXPECT_TRUE(half_done.empty()) << "delivered but left PENDING by the stop (would be duplicates):"
                                       << join_lines(half_done);
        EXPECT_EQ(queue.size(), static_cast<size_t>(published)) << "each PUBLISHED row delivered exactly once";
        summary += ", " + std::to_string(published) + " published";
    }

    // A last relay drains the rest; together they cover every event.
    const auto t_drain = Clock::now();
    ASSERT_TRUE(drain_all(60s)) << count_status("PENDING") << " still pending";
    summary += "\n    drained the rest in " + std::to_string(ms_since(t_drain)) + " ms";
    EXPECT_TRUE(queue.wait_for(all, 30s)) << "not every event reached the queue";
    EXPECT_TRUE(queue.wait_quiet(300ms, 10s));
    EXPECT_EQ(queue.error(), "");
    auto rows = load_rows(*db, table());
    EXPECT_EQ(count_status("PUBLISHED"), kEvents);
    Analysis a = analyse(queue.snapshot(), rows);
    EXPECT_TRUE(a.unknown.empty()) << join_lines(a.unknown);
    EXPECT_TRUE(a.missing.empty()) << "never delivered:" << join_lines(a.missing);
    EXPECT_TRUE(a.order.empty()) << "per-aggregate order broken:" << join_lines(a.order);
    EXPECT_TRUE(a.headers.empty()) << join_lines(a.headers);
    EXPECT_EQ(a.duplicates, 0U) << "clean stops leave nothing to publish twice";
    std::printf("[ stats    ] %ld events, %d SIGTERMs:%s\n    total %zu messages, %zu duplicates\n", kEvents, kStops,
                summary.c_str(), a.messages, a.duplicates);
}
