// Operator tools (core/admin, `outbox stats|retry-failed|purge|replay|tail`, `outbox relay
// --metrics-addr`, its outbox_amqp_node gauge included) against the real PostgreSQL and RabbitMQ.
#include "admin.hpp"
#include "closed_port.hpp"
#include "identifiers.hpp"
#include "relay_fixture.hpp"
#include "waits.hpp"

#include <httplib.h>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <map>
#include <mutex>
#include <regex>
#include <sstream>
#include <thread>

namespace {

using namespace outbox_test;
using Clock = std::chrono::steady_clock;

int free_port() {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = 0;
    bind(fd, reinterpret_cast<sockaddr *>(&a), sizeof a);
    socklen_t len = sizeof a;
    getsockname(fd, reinterpret_cast<sockaddr *>(&a), &len);
    close(fd);
    return ntohs(a.sin_port);
}

// A child process with stdout and stderr in files.
class Child {
  public:
    explicit Child(std::vector<std::string> args) {
        static int n = 0;
        out_ = "/tmp/outbox-admin-test-" + std::to_string(getpid()) + "-" + std::to_string(++n);
        err_ = out_ + ".err";
        out_ += ".out";
        pid_ = fork();
        if (pid_ == 0) {
            int o = open(out_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
            int e = open(err_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
            dup2(o, 1);
            dup2(e, 2);
            // Nothing of the test's (the proxy's listener, broker connections) leaks into the child.
            for (int fd = 3; fd < 1024; ++fd) {
                close(fd);
            }
            std::vector<char *> argv;
            for (auto &a : args) {
                argv.push_back(a.data());
            }
            argv.push_back(nullptr);
            execv(argv[0], argv.data());
            _exit(127);
        }
    }
    ~Child() {
        if (pid_ > 0 && !done_) {
            kill(pid_, SIGKILL);
            waitpid(pid_, nullptr, 0);
        }
        unlink(out_.c_str());
        unlink(err_.c_str());
    }
    [[nodiscard]] std::string out() const { return read_file(out_); }
    [[nodiscard]] std::string err() const { return read_file(err_); }
    bool wait_err(const std::string &what, int timeout_ms) const {
        const auto end = Clock::now() + std::chrono::milliseconds(timeout_ms);
        while (Clock::now() < end) {
            if (err().find(what) != std::string::npos) {
                return true;
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(50));
        }
        return false;
    }
    // Exit status, or -1 when it did not exit within timeout_ms (then it is killed).
    int wait(int timeout_ms) {
        const auto end = Clock::now() + std::chrono::milliseconds(timeout_ms);
        int status = 0;
        while (Clock::now() < end) {
            if (waitpid(pid_, &status, WNOHANG) == pid_) {
                done_ = true;
                return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
        }
        return -1;
    }
    int terminate() {
        kill(pid_, SIGTERM);
        return wait(10000);
    }

  private:
    pid_t pid_ = -1;
    bool done_ = false;
    std::string out_, err_;
};

// Runs the CLI to completion; returns its stdout (exit status in *rc).
std::string run_cli(const std::vector<std::string> &args, int *rc) {
    std::vector<std::string> full{OUTBOX_CLI_PATH};
    full.insert(full.end(), args.begin(), args.end());
    Child c(full);
    *rc = c.wait(30000);
    if (*rc != 0) {
        ADD_FAILURE() << "outbox exited " << *rc << ": " << c.err();
    }
    return c.out();
}

// A TCP forwarder from a free 127.0.0.1 port to the broker; close() drops the listener and every
// forwarded connection (the broker looks unreachable), open() listens again on the same port.
class TcpProxy {
  public:
    // The listener is bound here, before anything else can take the port (a free_port() that was
    // closed again could be handed to the next caller, e.g. the relay's metrics server).
    explicit TcpProxy(int target_port) : target_(target_port) {
        listen_now();
        sockaddr_in a{};
        socklen_t len = sizeof a;
        getsockname(listen_fd_, reinterpret_cast<sockaddr *>(&a), &len);
        port_ = ntohs(a.sin_port);
        thread_ = std::thread([this] { loop(); });
    }
    ~TcpProxy() {
        quit_ = true;
        thread_.join();
        shut();
    }
    void set_open(bool open) {
        open_ = open;
        std::this_thread::sleep_for(std::chrono::milliseconds(150)); // the loop applies it
    }
    [[nodiscard]] int port() const { return port_; }

  private:
    void shut() {
        if (listen_fd_ >= 0) {
            close(listen_fd_);
            listen_fd_ = -1;
        }
        for (auto [a, b] : conns_) {
            close(a);
            close(b);
        }
        conns_.clear();
    }
    void listen_now() {
        listen_fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        int one = 1;
        setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        sockaddr_in a{};
        a.sin_family = AF_INET;
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        a.sin_port = htons(static_cast<uint16_t>(port_));
        if (bind(listen_fd_, reinterpret_cast<sockaddr *>(&a), sizeof a) != 0 || listen(listen_fd_, 16) != 0) {
            close(listen_fd_);
            listen_fd_ = -1;
        }
    }
    int connect_target() const {
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        sockaddr_in a{};
        a.sin_family = AF_INET;
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        a.sin_port = htons(static_cast<uint16_t>(target_));
        if (connect(fd, reinterpret_cast<sockaddr *>(&a), sizeof a) != 0) {
            close(fd);
            return -1;
        }
        return fd;
    }
    void loop() {
        while (!quit_) {
            if (open_ && listen_fd_ < 0) {
                listen_now();
            } else if (!open_ && listen_fd_ >= 0) {
                shut();
            }
            std::vector<pollfd> fds;
            if (listen_fd_ >= 0) {
                fds.push_back({listen_fd_, POLLIN, 0});
            }
            for (auto [a, b] : conns_) {
                fds.push_back({a, POLLIN, 0});
                fds.push_back({b, POLLIN, 0});
            }
            if (poll(fds.data(), fds.size(), 50) <= 0) {
                continue;
            }
            size_t i = 0;
            if (listen_fd_ >= 0) {
                if ((fds[0].revents & POLLIN) != 0) {
                    int c = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
                    int t = c >= 0 ? connect_target() : -1;
                    if (c >= 0 && t >= 0) {
                        conns_.emplace_back(c, t);
                    } else if (c >= 0) {
                        close(c);
                    }
                }
                i = 1;
            }
            std::vector<size_t> dead;
            for (size_t k = 0; i + 1 < fds.size() + 1 && k < (fds.size() - i) / 2; ++k) {
                for (int side = 0; side < 2; ++side) {
                    const pollfd &p = fds[i + 2 * k + static_cast<size_t>(side)];
                    if ((p.revents & (POLLIN | POLLHUP | POLLERR)) == 0) {
                        continue;
                    }
                    char buf[65536];
                    ssize_t n = read(p.fd, buf, sizeof buf);
                    int peer = side == 0 ? conns_[k].second : conns_[k].first;
                    if (n <= 0 || write(peer, buf, static_cast<size_t>(n)) != n) {
                        dead.push_back(k);
                        break;
                    }
                }
            }
            for (auto it = dead.rbegin(); it != dead.rend(); ++it) {
                close(conns_[*it].first);
                close(conns_[*it].second);
                conns_.erase(conns_.begin() + static_cast<long>(*it));
            }
        }
    }
    int target_;
    int port_ = 0;
    std::atomic<bool> open_{true};
    std::atomic<bool> quit_{false};
    int listen_fd_ = -1;
    std::vector<std::pair<int, int>> conns_;
    std::thread thread_;
};

int broker_port() {
    const std::string url = amqp_url();
    std::smatch m;
    if (std::regex_search(url, m, std::regex(R"(@[^:/]+:(\d+))"))) {
        return std::stoi(m[1]);
    }
    return 5672;
}

// A strict check of the Prometheus text exposition format (0.0.4); returns the samples.
std::map<std::string, double> parse_prometheus(const std::string &text) {
    std::map<std::string, double> samples;
    const std::regex help(R"(^# HELP [a-zA-Z_:][a-zA-Z0-9_:]* .*$)");
    const std::regex type(R"(^# TYPE ([a-zA-Z_:][a-zA-Z0-9_:]*) (counter|gauge|histogram|summary|untyped)$)");
    const std::regex sample(
        R"(^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{([a-zA-Z_][a-zA-Z0-9_]*="([^"\\\n]|\\[\\"n])*"(,[a-zA-Z_][a-zA-Z0-9_]*="([^"\\\n]|\\[\\"n])*")*)?\})? ([-+]?([0-9.]+([eE][-+]?[0-9]+)?|Inf|NaN))$)");
    std::map<std::string, std::string> types;
    std::istringstream in(text);
    std::string line;
    EXPECT_FALSE(text.empty());
    EXPECT_EQ(text.back(), '\n') << "the exposition must end with a newline";
    while (std::getline(in, line)) {
        std::smatch m;
        if (std::regex_match(line, m, type)) {
            EXPECT_EQ(types.count(m[1]), 0u) << "TYPE twice: " << line;
            types[m[1]] = m[2];
        } else if (std::regex_match(line, help)) {
        } else if (std::regex_match(line, m, sample)) {
            std::string name = m[1];
            std::string base = std::regex_replace(name, std::regex("_(bucket|sum|count)$"), "");
            EXPECT_TRUE(types.count(name) != 0 || types.count(base) != 0) << "sample before its TYPE: " << line;
            samples[name + std::string(m[2])] = std::stod(std::string(m[7]) == "+Inf" ? "inf" : std::string(m[7]));
        } else {
            ADD_FAILURE() << "not Prometheus text format: '" << line << "'";
        }
    }
    return samples;
}

class AdminTest : public RelayTest {
  protected:
    // Inserts one row directly, with the given status and ages in seconds (published_ago < 0: NULL).
    // An event in the state the relay would have left it (storage version 2): PUBLISHED has a
    // receipt, a retried PENDING or a FAILED one is parked, a plain PENDING one is just written.
    std::string insert_row(const std::string &type, const std::string &id, int seq, const std::string &status,
                           int created_ago, int published_ago = -1, int retry_count = 0, const std::string &error = "",
                           int next_attempt_in = 0) {
        outbox::pg::Result r = db->exec(
            "INSERT INTO " + events() +
                " (position, outbox_id, event_type, aggregate_type, aggregate_id, seq, operation, payload, created_at)"
                " VALUES (nextval('" +
                outbox::stream::position_sequence(cfg) +
                "'), gen_random_uuid(), $1 || 'Created', $1, $2, CAST($3 AS bigint), 'POST', '{\"n\":1}',"
                " now() - CAST($4 AS int) * interval '1 second') RETURNING outbox_id, position",
            {type, id, std::to_string(seq), std::to_string(created_ago)});
        const std::string outbox_id(r.get(0, 0));
        const std::string position(r.get(0, 1));
        if (status == "PUBLISHED") {
            db->exec("INSERT INTO " + outbox::stream::receipts_table(cfg) +
                         " (from_position, to_position, published_at) VALUES (CAST($1 AS bigint), CAST($1 AS bigint),"
                         " now() - CAST($2 AS int) * interval '1 second')",
                     {position, std::to_string(published_ago)});
        } else if (status == "FAILED" || retry_count > 0) {
            park(outbox_id, status, retry_count, error, next_attempt_in);
        }
        return outbox_id;
    }
    std::vector<std::string> common_args() const { return {"--pg-url", pg_url(), "--schema", cfg.schema}; }
};

TEST_F(AdminTest, StatsEqualTheTrueCounts) {
    insert_row("PRD", "p1", 1, "PENDING", 120);
    insert_row("PRD", "p1", 2, "PENDING", 60);
    insert_row("PRD", "p2", 1, "PENDING", 10, -1, 2, "nack", 3600); // in backoff: not due
    insert_row("ORD", "o1", 1, "PENDING", 5);
    insert_row("ORD", "o2", 1, "FAILED", 500, -1, 10, "boom");
    insert_row("ORD", "o3", 1, "FAILED", 500, -1, 10, "boom");
    insert_row("PRD", "p3", 1, "FAILED", 500, -1, 10, "boom");
    for (int i = 0; i < 2; ++i) {
        insert_row("USR", "a" + std::to_string(i), 1, "PUBLISHED", 40, 30);
    }
    for (int i = 0; i < 3; ++i) {
        insert_row("USR", "b" + std::to_string(i), 1, "PUBLISHED", 1900, 1800);
    }
    for (int i = 0; i < 4; ++i) {
        insert_row("USR", "c" + std::to_string(i), 1, "PUBLISHED", 200000, 172800);
    }
    db->exec_simple("ANALYZE " + events());

    outbox::admin::Stats s = outbox::admin::stats(*db, cfg);
    EXPECT_EQ(s.pending, 4);
    EXPECT_EQ(s.pending_due, 3);
    EXPECT_EQ(s.failed, 3);
    EXPECT_EQ(s.published_last_minute, 2);
    EXPECT_EQ(s.published_last_hour, 5);
    ASSERT_TRUE(s.oldest_pending_age_s.has_value());
    EXPECT_NEAR(*s.oldest_pending_age_s, 120, 5);
    EXPECT_NEAR(s.lag_s, 120, 5);
    ASSERT_TRUE(s.last_published_age_s.has_value());
    EXPECT_NEAR(*s.last_published_age_s, 30, 5);
    EXPECT_EQ(s.total_estimate, 16); // exact after ANALYZE on a small table
    EXPECT_EQ(s.published_estimate, 9);
    EXPECT_EQ(s.relay_health, "lagging");
    ASSERT_EQ(s.per_type.size(), 2u);
    EXPECT_EQ(s.per_type[0].aggregate_type, "ORD");
    EXPECT_EQ(s.per_type[0].pending, 1);
    EXPECT_EQ(s.per_type[0].failed, 2);
    EXPECT_EQ(s.per_type[1].aggregate_type, "PRD");
    EXPECT_EQ(s.per_type[1].pending, 3);
    EXPECT_EQ(s.per_type[1].failed, 1);

    int rc = 0;
    std::vector<std::string> args{"stats", "--json"};
    auto common = common_args();
    args.insert(args.end(), common.begin(), common.end());
    std::string out = run_cli(args, &rc);
    EXPECT_NE(out.find("\"pending\":4,\"pending_due\":3,\"failed\":3,\"published_last_minute\":2,"
                       "\"published_last_hour\":5,"),
              std::string::npos)
        << out;
    EXPECT_NE(out.find("\"estimates\":[\"total_estimate\",\"published_estimate\"]"), std::string::npos) << out;
    EXPECT_NE(out.find("{\"aggregate_type\":\"ORD\",\"pending\":1,\"failed\":2}"), std::string::npos) << out;
}

TEST_F(AdminTest, RetryFailedMovesExactlyTheSelectedRows) {
    const std::string a = insert_row("PRD", "p1", 1, "FAILED", 100, -1, 10, "boom a");
    const std::string b = insert_row("PRD", "p2", 1, "FAILED", 100, -1, 3, "boom b");
    const std::string c = insert_row("ORD", "o1", 1, "FAILED", 100, -1, 10, "boom c");
    const std::string d = insert_row("PRD", "p3", 1, "PENDING", 100, -1, 1, "", 3600);
    auto row = [&](const std::string &id) {
        outbox::pg::Result r = db->exec("SELECT status, retry_count, error_message, next_attempt_at <= now() FROM " +
                                            table() + " WHERE outbox_id = CAST($1 AS uuid)",
                                        {id});
        return std::string(r.get(0, 0)) + "/" + std::string(r.get(0, 1)) + "/" + std::string(r.get(0, 2)) + "/" +
               std::string(r.get(0, 3));
    };
    // By id.
    EXPECT_EQ(outbox::admin::retry_failed(*db, cfg, "", c, 0), 1);
    EXPECT_EQ(row(c), "PENDING/10/boom c/t");
    EXPECT_EQ(row(a), "FAILED/10/boom a/t");
    // By max-retries (through the CLI): only b has retry_count < 5.
    int rc = 0;
    std::vector<std::string> args{"retry-failed", "--max-retries", "5", "--json"};
    auto common = common_args();
    args.insert(args.end(), common.begin(), common.end());
    EXPECT_EQ(run_cli(args, &rc), "{\"moved\":1}\n");
    EXPECT_EQ(row(b), "PENDING/3/boom b/t");
    EXPECT_EQ(row(a), "FAILED/10/boom a/t");
    // By type: ORD has no FAILED row left; PRD has a.
    EXPECT_EQ(outbox::admin::retry_failed(*db, cfg, "ORD", "", 0), 0);
    EXPECT_EQ(outbox::admin::retry_failed(*db, cfg, "PRD", "", 0), 1);
    EXPECT_EQ(row(a), "PENDING/10/boom a/t");
    EXPECT_EQ(row(d), "PENDING/1//f"); // never touched: still in its backoff
    EXPECT_EQ(scalar_long("SELECT count(*) FROM " + table() + " WHERE status = 'FAILED'"), 0);
    EXPECT_THROW(outbox::admin::retry_failed(*db, cfg, "", "not-a-uuid", 0), outbox::Error);
}

// The documents' own operator statements, run on the outbox (a view in storage version 2): the
// manual retry resets failed events, the cleanup deletes old published ones, an event's content
// cannot change, and deleting events not yet published discards them as version 1's table did.
TEST_F(AdminTest, TheDocumentsRetryAndCleanupStatementsWorkOnTheView) {
    const std::string failed_few = insert_row("PRD", "p1", 1, "FAILED", 100, -1, 3, "boom");
    const std::string failed_many = insert_row("PRD", "p2", 1, "FAILED", 100, -1, 9, "boom");
    const std::string old_published = insert_row("USR", "u1", 1, "PUBLISHED", 90000, 86400 * 40);
    const std::string new_published = insert_row("USR", "u2", 1, "PUBLISHED", 60, 30);
    const std::string pending = insert_row("ORD", "o1", 1, "PENDING", 10);
    auto row = [&](const std::string &id) {
        outbox::pg::Result r =
            db->exec("SELECT status, retry_count, coalesce(error_message, '-'), next_attempt_at <= now()"
                     " FROM " +
                         table() + " WHERE outbox_id = CAST($1 AS uuid)",
                     {id});
        if (r.rows() == 0) {
            return std::string("gone");
        }
        return std::string(r.get(0, 0)) + "/" + std::string(r.get(0, 1)) + "/" + std::string(r.get(0, 2)) + "/" +
               std::string(r.get(0, 3));
    };
    auto count = [&](const std::string &sql) { return std::strtoll(db->exec_simple(sql).cmd_tuples(), nullptr, 10); };
    db->exec_simple("UPDATE " + table() + " SET next_attempt_at = now() + interval '1 hour' WHERE outbox_id = '" +
                    failed_few + "'");
    // The documents' "Retry failed events (reset to pending)".
    EXPECT_EQ(count("UPDATE " + table() +
                    " SET status = 'PENDING', error_message = NULL WHERE status = 'FAILED' AND retry_count < 5"),
              1);
    EXPECT_EQ(row(failed_few), "PENDING/3/-/t"); // due at once
    EXPECT_EQ(row(failed_many), "FAILED/9/boom/t");
    EXPECT_EQ(scalar_long("SELECT count(*) FROM " + outbox::stream::parked_table(cfg) +
                          " WHERE status = 'PENDING' AND error_message IS NULL AND next_attempt_at <= now()"),
              1);
    // The documents' cleanup, in PostgreSQL's words: only the old published event goes.
    EXPECT_EQ(
        count("DELETE FROM " + table() + " WHERE status = 'PUBLISHED' AND published_at < now() - interval '30 days'"),
        1);
    EXPECT_EQ(row(old_published), "gone");
    EXPECT_EQ(scalar_long("SELECT count(*) FROM " + events() + " WHERE outbox_id = '" + old_published + "'"), 0);
    EXPECT_EQ(row(new_published), "PUBLISHED/0/-/t");
    // Refused, with nothing changed: an event's content, a published event's status, a pending
    // event's status, a status that is none.
    for (const std::string &sql :
         {"UPDATE " + table() + " SET payload = '{}' WHERE outbox_id = '" + failed_many + "'",
          "UPDATE " + table() + " SET status = 'PENDING' WHERE outbox_id = '" + new_published + "'",
          "UPDATE " + table() + " SET status = 'FAILED' WHERE outbox_id = '" + pending + "'",
          "UPDATE " + table() + " SET status = 'DONE' WHERE outbox_id = '" + failed_many + "'"}) {
        EXPECT_THROW(db->exec_simple(sql), outbox::Error) << sql;
    }
    EXPECT_EQ(row(failed_many), "FAILED/9/boom/t");
    EXPECT_EQ(row(pending), "PENDING/0/-/t");
    EXPECT_EQ(row(new_published), "PUBLISHED/0/-/t");
    EXPECT_EQ(scalar_long("SELECT count(*) FROM " + table()), 4);
    // As with version 1's table, deleting an event not yet published discards it, parked or not.
    EXPECT_EQ(count("DELETE FROM " + table() + " WHERE outbox_id = '" + pending + "' OR status = 'FAILED'"), 2);
    EXPECT_EQ(row(pending), "gone");
    EXPECT_EQ(row(failed_many), "gone");
    EXPECT_EQ(scalar_long("SELECT count(*) FROM " + outbox::stream::parked_table(cfg)), 1);
    EXPECT_EQ(scalar_long("SELECT count(*) FROM " + events()), 2);
    // A statement that changes nothing is no error.
    EXPECT_EQ(count("UPDATE " + table() + " SET status = status WHERE outbox_id = '" + new_published + "'"), 1);
}

TEST_F(AdminTest, PurgeDropsOnlyPartitionsOfOldPublishedEventsWhileWritesGoOn) {
    // Partitions of 1,000 positions: OLD fills [1000, 4000), published 31 days ago; NEW and the
    // parked KEEP events share [4000, 5000) with the live writes that follow.
    cfg.set("outbox.partition_events", "1000");
    // The partitions migrate made at the default width go (they are empty); the purge makes them
    // again at this width, moving the events out of the default partition.
    db->exec_simple(outbox_test::drop_outbox_partitions_sql(cfg.schema, cfg.table));
    const std::string seq = outbox::stream::position_sequence(cfg);
    const std::string rc = outbox::stream::receipts_table(cfg);
    auto fill = [&](const std::string &type, int n, const char *created_ago) {
        db->exec_simple("INSERT INTO " + events() +
                        " (position, outbox_id, event_type, aggregate_type, aggregate_id, seq, operation, payload,"
                        " created_at) SELECT nextval('" +
                        seq + "'), gen_random_uuid(), '" + type + "Created', '" + type +
                        "', 'a' || i, 1, 'POST', '{}', now() - interval '" + created_ago +
                        "' FROM generate_series(1, " + std::to_string(n) + ") i");
    };
    db->exec_simple("SELECT setval('" + seq + "', 999)");
    fill("OLD", 3000, "40 days");
    // The last old receipt reaches past [3000, 4000) into the next partition.
    db->exec_simple("INSERT INTO " + rc + " VALUES (1000, 3989, now() - interval '31 days')");
    db->exec_simple("INSERT INTO " + rc + " VALUES (3990, 4009, now() - interval '31 days')");
    fill("NEW", 50, "2 days");
    db->exec_simple("INSERT INTO " + rc + " VALUES (4010, 4049, now() - interval '1 day')");
    fill("KEEP", 40, "90 days");
    db->exec_simple("UPDATE " + outbox::stream::relay_table(cfg) + " SET cursor = 4089");
    outbox::pg::Result keep = db->exec("SELECT outbox_id FROM " + events() + " WHERE aggregate_type = 'KEEP'");
    for (int i = 0; i < keep.rows(); ++i) {
        park(std::string(keep.get(i, 0)), i % 2 == 0 ? "PENDING" : "FAILED", 3, "boom");
    }
    std::atomic<bool> done{false};
    std::atomic<int> written{0};
    std::thread writer([&] {
        outbox::pg::Conn w = outbox::pg::Conn::open(pg_url());
        outbox::Event ev;
        ev.set("aggregate_type", "PRD");
        ev.set("operation", "POST");
        ev.set("payload", "{}");
        while (!done || written < 20) {
            ev.set("aggregate_id", "live" + std::to_string(written % 10));
            outbox::store::write(w, cfg, ev);
            ++written;
        }
    });
    std::vector<int64_t> progress;
    int64_t n =
        outbox::admin::purge_published(*db, cfg, 30 * 86400, 500, [&](int64_t so_far) { progress.push_back(so_far); });
    done = true;
    writer.join();
    EXPECT_EQ(n, 3000) << "three whole partitions";
    ASSERT_FALSE(progress.empty());
    EXPECT_EQ(progress.back(), 3000);
    EXPECT_EQ(scalar_long("SELECT count(*) FROM " + table() + " WHERE aggregate_type = 'OLD'"), 0);
    EXPECT_EQ(scalar_long("SELECT count(*) FROM " + table() + " WHERE aggregate_type = 'NEW'"), 50);
    EXPECT_EQ(scalar_long("SELECT count(*) FROM " + table() + " WHERE aggregate_type = 'KEEP'"), 40);
    EXPECT_EQ(scalar_long("SELECT count(*) FROM " + table() + " WHERE aggregate_type = 'PRD'"), written.load());
    // Their receipts went with their partitions; the part of one that reached past them stays.
    EXPECT_EQ(scalar_long("SELECT count(*) FROM " + rc + " WHERE from_position < 4000"), 0);
    EXPECT_EQ(scalar_long("SELECT count(*) FROM " + rc + " WHERE from_position = 4000 AND to_position = 4009"), 1);
    EXPECT_EQ(scalar_long("SELECT count(*) FROM " + table() +
                          " WHERE aggregate_type = 'NEW' AND published_at < now() - interval '30 days'"),
              10)
        << "the events 4000-4009 keep the time they were published";
    EXPECT_EQ(scalar_long("SELECT count(*) FROM " + table() + " WHERE aggregate_type = 'NEW' AND published_at IS NULL"),
              0);
    // Taken out (detached as "_x..." and "_y...") and then dropped: no such name is left.
    for (const char *gone : {"_e00000000001000", "_e00000000002000", "_e00000000003000", "_x00000000001000",
                             "_x00000000002000", "_x00000000003000", "_r00000000001000", "_r00000000002000",
                             "_r00000000003000", "_y00000000001000", "_y00000000002000", "_y00000000003000"}) {
        EXPECT_EQ(scalar_long("SELECT count(*) FROM pg_class WHERE relnamespace = CAST('" + cfg.schema +
                              "' AS regnamespace) AND relname = '" + cfg.table + gone + "'"),
                  0)
            << gone;
    }
    // What a purge stopped between taking a partition out and dropping it leaves: the next purge
    // drops it, and no other table.
    db->exec_simple("CREATE TABLE " + outbox::ident::qualified(cfg.schema, cfg.table + "_x00000000000007") +
                    " (x int)");
    db->exec_simple("CREATE TABLE " + outbox::ident::qualified(cfg.schema, cfg.table + "_y00000000000007") +
                    " (x int)");
    db->exec_simple("CREATE TABLE " + outbox::ident::qualified(cfg.schema, cfg.table + "_x7") + " (x int)");
    db->exec_simple("CREATE TABLE " + outbox::ident::qualified(cfg.schema, cfg.table + "_x0000000000000y") +
                    " (x int)");
    EXPECT_EQ(scalar_long("SELECT count(*) FROM pg_class WHERE relnamespace = CAST('" + cfg.schema +
                          "' AS regnamespace) AND relname = '" + cfg.table + "_e00000000004000'"),
              1);

    // The CLI: NEW was published a day ago, but its partition still holds events above the cursor
    // (the live writes): a partition goes whole or not at all.
    int rc_cli = 0;
    std::vector<std::string> args{"purge", "--published-older-than", "12h", "--batch", "7", "--json"};
    auto common = common_args();
    args.insert(args.end(), common.begin(), common.end());
    EXPECT_EQ(run_cli(args, &rc_cli), "{\"deleted\":0,\"older_than_s\":43200}\n");
    auto tables_named = [&](const std::string &name_end) {
        return scalar_long("SELECT count(*) FROM pg_class WHERE relnamespace = CAST('" + cfg.schema +
                           "' AS regnamespace) AND relname = '" + cfg.table + name_end + "'");
    };
    EXPECT_EQ(tables_named("_x00000000000007"), 0) << "the leftover was dropped";
    EXPECT_EQ(tables_named("_y00000000000007"), 0) << "the receipts' leftover was dropped";
    EXPECT_EQ(tables_named("_x7"), 1) << "a table not named as a leftover stays";
    EXPECT_EQ(tables_named("_x0000000000000y"), 1) << "a table not named as a leftover stays";
    EXPECT_EQ(scalar_long("SELECT count(*) FROM " + table() + " WHERE aggregate_type = 'NEW'"), 50);
    EXPECT_EQ(scalar_long("SELECT count(*) FROM " + table() + " WHERE aggregate_type = 'KEEP'"), 40);
    EXPECT_EQ(scalar_long("SELECT count(*) FROM " + table() + " WHERE aggregate_type = 'PRD'"), written.load());
}

TEST_F(AdminTest, ReplayRepublishesInSeqOrderMarkedAsReplay) {
    std::vector<std::string> ids = write_events(5, 1, "r"); // aggregate PRD:r0, seq 1..5
    write_events(3, 1, "other");
    {
        Collector warmup(cfg.exchange); // a bound queue, so the relay's mandatory publishes route
        outbox::Relay relay(cfg);
        EXPECT_EQ(drain(relay).published, 8);
    }
    park(ids[3], "FAILED", 5, "boom"); // replay republishes events in any state
    const std::string before_sql = "SELECT string_agg(outbox_id::text || status || COALESCE(published_at::text, ''),"
                                   " ',' ORDER BY seq) FROM " +
                                   table() + " WHERE aggregate_id = 'r0'";
    const std::string before(db->exec(before_sql).get(0, 0));

    Collector col(cfg.exchange);
    EXPECT_EQ(outbox::admin::replay(*db, cfg, "PRD", "r0", 0), 5);
    const auto &msgs = col.collect(5);
    ASSERT_EQ(msgs.size(), 5u);
    for (size_t i = 0; i < msgs.size(); ++i) {
        EXPECT_EQ(msgs[i].props.message_id, ids[i]);
        EXPECT_EQ(header_string(msgs[i].props, "outbox-seq"), std::to_string(i + 1));
        EXPECT_EQ(header_string(msgs[i].props, "outbox-replay"), "true");
    }
    EXPECT_EQ(std::string(db->exec(before_sql).get(0, 0)), before);

    // The CLI from --event (the third event): seq 3..5, given a list of brokers whose first is down.
    int rc = 0;
    const ClosedPort dead;
    std::vector<std::string> args{"replay",
                                  "--aggregate",
                                  "PRD:r0",
                                  "--event",
                                  ids[2],
                                  "--amqp-url",
                                  dead.amqp_url("x") + "," + amqp_url(),
                                  "--set",
                                  "amqp.exchange=" + cfg.exchange};
    auto common = common_args();
    args.insert(args.end(), common.begin(), common.end());
    std::string out = run_cli(args, &rc);
    EXPECT_NE(out.find("replayed 3 event(s) of PRD:r0"), std::string::npos) << out;
    const auto &all = col.collect(8);
    ASSERT_EQ(all.size(), 8u);
    for (size_t i = 5; i < 8; ++i) {
        EXPECT_EQ(all[i].props.message_id, ids[i - 3]);
        EXPECT_EQ(header_string(all[i].props, "outbox-replay"), "true");
    }
    EXPECT_EQ(std::string(db->exec(before_sql).get(0, 0)), before);
    // --since after the last event: nothing to replay.
    std::vector<std::string> since{"replay", "--aggregate", "PRD:r0",   "--since", "2999-01-01T00:00:00Z",
                                   "--json", "--amqp-url",  amqp_url(), "--set",   "amqp.exchange=" + cfg.exchange};
    since.insert(since.end(), common.begin(), common.end());
    EXPECT_EQ(run_cli(since, &rc), "{\"published\":0,\"from_seq\":0}\n");
    EXPECT_EQ(outbox::admin::seq_since(*db, cfg, "PRD", "r0", "2000-01-01T00:00:00Z"), 1);
    EXPECT_THROW(outbox::admin::seq_of_event(*db, cfg, "PRD", "other0", ids[0]), outbox::Error);
}

TEST_F(AdminTest, TailPrintsEventsWrittenAfterItStarted) {
    const ClosedPort dead; // a list of brokers whose first is down: tail goes on to the next
    Child tail({OUTBOX_CLI_PATH, "tail", "--count", "3", "--json", "--timeout", "20", "--amqp-url",
                dead.amqp_url("x") + "," + amqp_url(), "--exchange", cfg.exchange});
    ASSERT_TRUE(tail.wait_err("tailing exchange", 10000)) << tail.err();
    std::vector<std::string> ids = write_events(3, 3, "t");
    outbox::Relay relay(cfg);
    EXPECT_EQ(drain(relay).published, 3);
    ASSERT_EQ(tail.wait(15000), 0) << tail.err();
    const std::string out = tail.out();
    for (const auto &id : ids) {
        EXPECT_NE(out.find("\"OUTBOX_ID\":\"" + id + "\""), std::string::npos) << out;
    }
    EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 3);
}

std::vector<std::string> relay_args(const outbox::Config &cfg, const std::string &amqp, int metrics_port) {
    return {OUTBOX_CLI_PATH,
            "relay",
            "--pg-url",
            pg_url(),
            "--amqp-url",
            amqp,
            "--schema",
            cfg.schema,
            "--set",
            "amqp.exchange=" + cfg.exchange,
            "--set",
            "relay.name=" + cfg.relay_name,
            "--set",
            "amqp.connect_timeout_ms=1000",
            "--set",
            "amqp.heartbeat_s=2",
            "--poll-interval-ms",
            "100",
            "--metrics-addr",
            "127.0.0.1:" + std::to_string(metrics_port),
            "--log-level",
            "warn"};
}

TEST_F(AdminTest, MetricsAreValidPrometheusTextAndCountTheRelaysWork) {
    Collector col(cfg.exchange);
    const int port = free_port();
    // A subscriber's parked aggregate, as its consumer loop records one (core/held.hpp).
    db->exec("INSERT INTO " + outbox::ident::qualified(cfg.schema, cfg.inbox_table + "_held") +
             " (consumer, aggregate_type, aggregate_id, state, attempts, first_failed_at)"
             " VALUES ('search-indexer', 'PRD', '7', 'parked', 5, now() - interval '90 seconds')");
    Child relay(relay_args(cfg, amqp_url(), port));
    write_events(20, 5, "m");
    httplib::Client http("127.0.0.1", port);
    http.set_connection_timeout(1);
    std::map<std::string, double> samples;
    const auto end = Clock::now() + std::chrono::seconds(15);
    while (Clock::now() < end) {
        auto res = http.Get("/metrics");
        if (res && res->status == 200) {
            samples = parse_prometheus(res->body);
            if (samples["outbox_events_published_total"] >= 20) {
                EXPECT_NE(res->get_header_value("Content-Type").find("text/plain; version=0.0.4"), std::string::npos);
                break;
            }
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    EXPECT_EQ(samples["outbox_events_published_total"], 20) << relay.err();
    EXPECT_EQ(samples["outbox_events_failed_total"], 0);
    EXPECT_EQ(samples["outbox_pg_up"], 1);
    EXPECT_EQ(samples["outbox_amqp_up"], 1);
    EXPECT_GE(samples["outbox_relay_batch_duration_seconds_count"], 1);
    EXPECT_EQ(samples["outbox_relay_batch_duration_seconds_bucket{le=\"+Inf\"}"],
              samples["outbox_relay_batch_duration_seconds_count"]);
    EXPECT_EQ(samples.count("outbox_lag_seconds"), 1u);
    EXPECT_EQ(samples["outbox_parked_aggregates{subscriber=\"search-indexer\"}"], 1);
    EXPECT_EQ(samples["outbox_retrying_aggregates{subscriber=\"search-indexer\"}"], 0);
    EXPECT_GE(samples["outbox_oldest_parked_age_seconds{subscriber=\"search-indexer\"}"], 89);
    EXPECT_EQ(samples.count("outbox_relay_parked_aggregates"), 1u);
    EXPECT_EQ(samples["outbox_relay_parked_aggregates"], 0);
    EXPECT_EQ(samples.count("outbox_subscriber_lag_seconds{subscriber=\"search-indexer\"}"), 1u);
    EXPECT_EQ(samples.count("outbox_oldest_unpublished_age_seconds"), 1u);
    EXPECT_EQ(col.collect(20).size(), 20u);
    auto health = http.Get("/healthz");
    ASSERT_TRUE(health);
    EXPECT_EQ(health->status, 200);
    EXPECT_EQ(health->body, "ok\n");
    EXPECT_EQ(relay.terminate(), 0) << relay.err();
}

// The gauge outbox_amqp_node{node="host:port"} names the broker address the relay is on: the
// second of a list whose first is dead, and, after the node it was on goes away (a forwarder to
// the broker, closed), the next address of the list. One such sample at a time.
TEST_F(AdminTest, MetricsNameTheBrokerNodeAndFollowTheRelayToTheNextAddress) {
    Collector col(cfg.exchange);
    httplib::Client *http = nullptr;
    // The outbox_amqp_node samples of /metrics once `want` is among them (or the last ones seen).
    auto nodes_when = [&](const std::string &want, int timeout_ms) {
        std::map<std::string, double> nodes;
        const auto end = Clock::now() + std::chrono::milliseconds(timeout_ms);
        while (Clock::now() < end) {
            auto res = http->Get("/metrics");
            if (res && res->status == 200) {
                nodes.clear();
                for (const auto &[k, v] : parse_prometheus(res->body)) {
                    if (k.rfind("outbox_amqp_node", 0) == 0) {
                        nodes[k] = v;
                    }
                }
                if (nodes.count("outbox_amqp_node{node=\"" + want + "\"}") != 0) {
                    break;
                }
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(100));
        }
        return nodes;
    };
    const std::string broker = "127.0.0.1:" + std::to_string(broker_port());
    ASSERT_NE(amqp_url().find("@" + broker + "/"), std::string::npos) << "expected " << amqp_url() << " on " << broker;
    const auto via = [](int port) {
        return std::regex_replace(amqp_url(), std::regex(R"(@([^:/]+):\d+)"), "@127.0.0.1:" + std::to_string(port));
    };

    // A dead first address: the relay is on the second from the start.
    {
        const ClosedPort dead;
        const int port = free_port();
        Child relay(relay_args(cfg, via(dead.port) + "," + amqp_url(), port));
        httplib::Client client("127.0.0.1", port);
        client.set_connection_timeout(1);
        http = &client;
        write_events(5, 5, "n");
        const auto nodes = nodes_when(broker, 15000);
        EXPECT_EQ(nodes, (std::map<std::string, double>{{"outbox_amqp_node{node=\"" + broker + "\"}", 1}}))
            << relay.err();
        EXPECT_EQ(col.collect(5).size(), 5U);
        EXPECT_EQ(relay.terminate(), 0) << relay.err();
    }

    // The first address answers, then goes away: the relay moves to the next one, and says so.
    TcpProxy first(broker_port());
    const std::string first_node = "127.0.0.1:" + std::to_string(first.port());
    const int port = free_port();
    Child relay(relay_args(cfg, via(first.port()) + "," + amqp_url(), port));
    httplib::Client client("127.0.0.1", port);
    client.set_connection_timeout(1);
    http = &client;
    write_events(5, 5, "f");
    auto nodes = nodes_when(first_node, 15000);
    EXPECT_EQ(nodes, (std::map<std::string, double>{{"outbox_amqp_node{node=\"" + first_node + "\"}", 1}}))
        << relay.err();
    EXPECT_EQ(col.collect(10).size(), 10U);
    first.set_open(false);
    nodes = nodes_when(broker, 20000);
    EXPECT_EQ(nodes, (std::map<std::string, double>{{"outbox_amqp_node{node=\"" + broker + "\"}", 1}})) << relay.err();
    write_events(5, 5, "s");
    EXPECT_EQ(col.collect(15).size(), 15U) << "published through the next address";
    EXPECT_EQ(relay.terminate(), 0) << relay.err();
}

TEST_F(AdminTest, HealthzFailsWhileRabbitMqIsUnreachableAndRecovers) {
    TcpProxy proxy(broker_port());
    std::string via_proxy =
        std::regex_replace(amqp_url(), std::regex(R"(@([^:/]+):\d+)"), "@127.0.0.1:" + std::to_string(proxy.port()));
    const int port = free_port();
    Child relay(relay_args(cfg, via_proxy, port));
    httplib::Client http("127.0.0.1", port);
    http.set_connection_timeout(1);
    auto wait_health = [&](int status, int timeout_ms) {
        std::string body;
        const auto end = Clock::now() + std::chrono::milliseconds(timeout_ms);
        while (Clock::now() < end) {
            auto res = http.Get("/healthz");
            if (res && res->status == status) {
                return res->body;
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(100));
        }
        ADD_FAILURE() << "/healthz did not answer " << status << "; relay log:\n" << relay.err();
        return std::string();
    };
    wait_health(200, 10000);
    proxy.set_open(false);
    std::string reason = wait_health(503, 10000);
    EXPECT_NE(reason.find("relay step failing"), std::string::npos) << reason;
    auto m = http.Get("/metrics");
    ASSERT_TRUE(m);
    EXPECT_NE(m->body.find("\noutbox_relay_healthy 0\n"), std::string::npos) << m->body;
    proxy.set_open(true);
    EXPECT_EQ(wait_health(200, 15000), "ok\n");
    EXPECT_EQ(relay.terminate(), 0) << relay.err();
}

} // namespace
