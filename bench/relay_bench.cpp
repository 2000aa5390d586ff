// relay_bench: the outbox relay against a plain librabbitmq-c publisher, and the cost of write.notify.
//
// Scenarios, all in one run, against one PostgreSQL and one RabbitMQ (OUTBOX_PG_URL, OUTBOX_AMQP_URL):
//   B     a plain librabbitmq-c publisher: confirm.select, the same N messages the relay sends (same
//         bodies, properties, routing keys, exchange, queue), persistent and mandatory, at most `window`
//         unconfirmed; timed from the first publish to the last ack.
//   R     the relay (liboutbox, public C API only) draining a backlog of N committed events:
//         outbox_relay_step until a step claims nothing; timed until the step that reported the last marks.
//   R-w1  the same relay with relay.window=1 on a small backlog: what confirm pipelining buys.
//   S     the documents' publishPendingEvents loop: SELECT 100 PENDING ORDER BY created_at, then per event
//         basic.publish (persistent, no confirms) and an autocommit UPDATE; without the documents' sleep(1).
//   S-sleep the same loop as written, with its sleep of 1 s after each poll, measured for a bounded time
//         (5 s in --quick, 10 s otherwise) on a backlog larger than it can drain in that time.
//   C     consumer throughput: the consumer runtime (public C API) handling the same N messages, each in
//         its own transaction with one effect row (BEGIN, effect, COMMIT, ack), once with the dedupe in that
//         transaction (outbox_consumer_begin: BEGIN + dedupe in one round trip) and once without;
//         target dedupe/plain >= 0.8.
//   W     write throughput: `writers` threads, each with its own outbox_db_open connection, one event per
//         transaction (BEGIN, outbox_write, COMMIT), with write.notify=false and then write.notify=true,
//         while a LISTEN connection (standing in for the relay) drains the notifications.
//
// Everything lives in a fresh schema (bench_<rand>), a fresh fanout exchange (bench.<rand>) and one durable
// classic queue bound to it, so every message is routed and persisted; the queue is purged between
// scenarios, and queue, exchange and schema are dropped at the end (--keep leaves them).
//
// Output: a Markdown table on stdout, and the same figures as JSON with --json FILE.
#include <outbox.h>

#include <amqp.h>
#include <amqp_framing.h>
#include <amqp_tcp_socket.h>
#include <libpq-fe.h>

#include <cJSON.h>
#include <fcntl.h>
#include <poll.h>
#include <spawn.h>
#include <sys/wait.h>
#include <sys/resource.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <exception>
#include <fstream>
#include <map>
#include <mutex>
#include <memory>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

extern "C" char **environ;

namespace {

using Clock = std::chrono::steady_clock;

double seconds_between(Clock::time_point a, Clock::time_point b) {
    return std::chrono::duration<double>(b - a).count();
}

[[noreturn]] void die(const std::string &msg) {
    throw std::runtime_error(msg);
}

std::atomic<bool> g_interrupted{false};
extern "C" void on_signal(int) {
    g_interrupted.store(true);
}
void check_interrupt() {
    if (g_interrupted.load()) {
        die("interrupted");
    }
}

std::string env_or(const char *name, const char *fallback) {
    const char *v = std::getenv(name);
    return v != nullptr && *v != '\0' ? std::string(v) : std::string(fallback);
}

long peak_rss_kib() {
    rusage ru{};
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_maxrss;
}

// CPU time of this process (all threads), user + system.
double cpu_seconds() {
    rusage ru{};
    getrusage(RUSAGE_SELF, &ru);
    return static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
           static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

std::string fixed(double v, int decimals) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
    return buf;
}

std::string json_str(const std::string &s) {
    std::string out = "\"";
    for (char c : s) {
        if (c == '"' || c == '\\') {
            out.push_back('\\');
            out.push_back(c);
        } else if (static_cast<unsigned char>(c) < 0x20) {
            char buf[8];
            std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(c));
            out += buf;
        } else {
            out.push_back(c);
        }
    }
    return out + "\"";
}

// ---------------------------------------------------------------------------------------------- options

struct Options {
    long events = 100000;
    int payload_bytes = 1024;
    int window = 512;
    int batch_size = 500;
    std::string queue_type = "classic"; // the bench queue: classic, or quorum (replicated on a cluster)
    int writers = 4;
    long writes = 20000;
    int w_slices = 10;     // W: each mode's writes in this many slices, interleaved against drift
    int w_payload_bytes = 256; // W: the event payload of a one-row business transaction
    int per_aggregate = 1; // events per aggregate in the relay backlog (seq 1..k)
    long seed_events = -1; // S backlog; default events / 20
    long w1_events = -1;   // R-w1 backlog; default events / 100
    long consume_events = -1; // C: messages per consumer; default events / 20
    std::vector<long> drain_sizes{10000, 100000, 1000000}; // D: relay drains of these backlogs
    long sweep_events = 10000;                             // P: backlog per sweep point
    std::vector<long> sweep_batches{100, 250, 500, 1000, 2000};
    std::vector<long> sweep_windows{16, 64, 256, 512, 1024};
    long scale_events = 50000;           // X: backlog drained by 1, 2 and 4 relay processes
    int scale_per_aggregate = 10;        // X: events per aggregate (order is checked per aggregate)
    std::vector<long> scale_relays{1, 2, 4};
    double latency_seconds = 8;          // L: offered load held this long per point
    double latency_max_seconds = 6;      // L: unpaced writes to find the maximum rate
    std::vector<double> latency_loads{0.25, 0.5, 0.8};
    bool latency_poll_diag = true;       // L: also the relay with --poll-interval-ms 5 at 50%
    double health_minutes = 2;           // H: steady writes + relay + consumer + purge (0: skip)
    double health_sample_s = 5;
    double health_purge_s = 10;
    int health_age_s = 30;               // H: purge PUBLISHED events / inbox rows older than this
    long health_aggregates = 10000;      // H: writes cycle over this many aggregates
    std::string outbox_cli;              // the `outbox` command (default: next to this binary's build tree)
    std::string bindings_python_json;    // K: python/bench_write.py --json output of this run
    std::string bindings_node_json;      // K: node/bench/write.js --json output of this run
    bool quick = false;
    bool keep = false;
    bool enforce_target = false;
    std::string only = "B,D,P,R-w1,S,X,L,W,C,K,H";
    std::string json_file;
    std::string md_file;
    std::string steps_csv; // per-step relay stats, for looking into a slow relay
};

void usage(FILE *to) {
    std::fprintf(to, "usage: relay_bench [options]\n"
                     "scenarios (--only, comma-separated; default all of B,D,P,R-w1,S,X,L,W,C,K,H):\n"
                     "  B  plain librabbitmq-c publisher (the baseline of D, P, X)\n"
                     "  D  relay drain of each --drain-sizes backlog (child process: peak RSS)\n"
                     "  P  relay drain vs relay.batch_size and vs relay.window (--sweep-*)\n"
                     "  R-w1  relay with relay.window=1;  S  the documents' publisher loop\n"
                     "  X  scale-out: 1, 2, 4 `outbox relay` daemons on one table, per-aggregate order check\n"
                     "  L  end-to-end latency at 25/50/80%% of the measured maximum rate, write.notify off/on\n"
                     "  W  write overhead: business row alone vs plus outbox_write (notify off/on)\n"
                     "  C  consumer with dedupe vs without;  K  bindings (Python, Node) vs C, from --bindings-*\n"
                     "  H  table health: steady load with relay, consumer and purges (--health-minutes)\n"
                     "  R-nojit, R-pinned  diagnostics (only when named)\n"
                     "options:\n"
                     "  --events N          baseline B message count (default 100000)\n"
                     "  --drain-sizes LIST  D backlogs (default 10000,100000,1000000)\n"
                     "  --payload-bytes N   size of each event's JSON payload in B, D, P, X, S (default 1024)\n"
                     "  --window N          publisher-confirm window, relay and baseline alike (default 512)\n"
                     "  --batch-size N      relay.batch_size (default 500)\n"
                     "  --queue-type T      the bench queue: classic (default) or quorum (bench/run --cluster)\n"
                     "  --per-aggregate K   events per aggregate in the D backlog, seq 1..K (default 1)\n"
                     "  --sweep-events N    P backlog per point (default 10000)\n"
                     "  --sweep-batches LIST, --sweep-windows LIST   P points (default 100,250,500,1000,2000 and\n"
                     "                      16,64,256,512,1024)\n"
                     "  --scale-events N    X backlog (default 50000); --scale-per-aggregate K (default 10)\n"
                     "  --scale-relays LIST X relay counts (default 1,2,4)\n"
                     "  --latency-seconds S L: seconds per load point (default 8)\n"
                     "  --health-minutes M  H: length of the steady-state run (default 2; 30 for the real check)\n"
                     "  --health-age-s S    H: purge published events and inbox rows older than S s (default 30)\n"
                     "  --seed-events N     backlog of the seed-style loop (default events/20)\n"
                     "  --w1-events N       backlog of the relay with relay.window=1 (default events/100)\n"
                     "  --writers N         concurrent writer threads in W, L, H (default 4)\n"
                     "  --writes N          transactions per write mode, over all writers (default 20000)\n"
                     "  --w-slices N        split each write mode into N slices, interleaved (default 10; --quick 4)\n"
                     "  --w-payload-bytes N W: event payload size (default 256)\n"
                     "  --consume-events N  C: messages each consumer handles (default events/20)\n"
                     "  --outbox-cli PATH   the outbox command for X, L, H (default ../cli/outbox from this binary)\n"
                     "  --bindings-python FILE, --bindings-node FILE  K: JSON written by python/bench_write.py\n"
                     "                      and node/bench/write.js in this run (bench/run passes them)\n"
                     "  --quick             small sizes, for checking the harness (well under 2 minutes)\n"
                     "  --only LIST         scenarios to run\n"
                     "  --json FILE         write the figures as JSON to FILE\n"
                     "  --md FILE           write the Markdown report to FILE\n"
                     "  --steps-csv FILE    write every relay step's outbox_relay_stats to FILE\n"
                     "  --keep              keep the schema, exchange and queue afterwards\n"
                     "  --enforce-target    exit 3 when a target is missed\n"
                     "environment: OUTBOX_PG_URL, OUTBOX_AMQP_URL (default: the scripts/services.sh endpoints;\n"
                     "  a list of brokers in OUTBOX_AMQP_URL: the relay gets the list, the baseline its first\n"
                     "  address, the node the relay connects to first)\n");
}

long parse_long(const std::string &opt, const char *v, long lo, long hi) {
    char *end = nullptr;
    errno = 0;
    long n = std::strtol(v, &end, 10);
    if (errno != 0 || end == v || *end != '\0' || n < lo || n > hi) {
        die(opt + ": expected an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got '" + v + "'");
    }
    return n;
}

double parse_double(const std::string &opt, const char *v, double lo, double hi) {
    char *end = nullptr;
    errno = 0;
    double d = std::strtod(v, &end);
    if (errno != 0 || end == v || *end != '\0' || !(d >= lo && d <= hi)) {
        die(opt + ": expected a number in [" + fixed(lo, 1) + ", " + fixed(hi, 1) + "], got '" + v + "'");
    }
    return d;
}

std::vector<long> parse_list(const std::string &opt, const char *v, long lo, long hi) {
    std::vector<long> out;
    std::stringstream ss(v);
    std::string item;
    while (std::getline(ss, item, ',')) {
        out.push_back(parse_long(opt, item.c_str(), lo, hi));
    }
    if (out.empty()) {
        die(opt + ": expected a comma-separated list");
    }
    return out;
}

Options parse_options(int argc, char **argv) {
    Options o;
    bool events_set = false, writes_set = false, slices_set = false, drains_set = false, sweep_set = false,
         batches_set = false, windows_set = false, scale_set = false, lat_set = false, health_set = false;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        auto value = [&]() -> const char * {
            if (i + 1 >= argc) {
                die(a + " needs a value");
            }
            return argv[++i];
        };
        if (a == "--events") {
            o.events = parse_long(a, value(), 1, 100000000);
            events_set = true;
        } else if (a == "--drain-sizes") {
            o.drain_sizes = parse_list(a, value(), 1, 100000000);
            drains_set = true;
        } else if (a == "--sweep-events") {
            o.sweep_events = parse_long(a, value(), 1, 100000000);
            sweep_set = true;
        } else if (a == "--sweep-batches") {
            o.sweep_batches = parse_list(a, value(), 1, 100000);
            batches_set = true;
        } else if (a == "--sweep-windows") {
            o.sweep_windows = parse_list(a, value(), 1, 65535);
            windows_set = true;
        } else if (a == "--scale-events") {
            o.scale_events = parse_long(a, value(), 1, 100000000);
            scale_set = true;
        } else if (a == "--scale-per-aggregate") {
            o.scale_per_aggregate = static_cast<int>(parse_long(a, value(), 1, 1000000));
        } else if (a == "--scale-relays") {
            o.scale_relays = parse_list(a, value(), 1, 64);
        } else if (a == "--latency-seconds") {
            o.latency_seconds = parse_double(a, value(), 0.5, 3600);
            lat_set = true;
        } else if (a == "--health-minutes") {
            o.health_minutes = parse_double(a, value(), 0, 24 * 60);
            health_set = true;
        } else if (a == "--health-age-s") {
            o.health_age_s = static_cast<int>(parse_long(a, value(), 1, 86400));
        } else if (a == "--payload-bytes") {
            o.payload_bytes = static_cast<int>(parse_long(a, value(), 64, 1 << 20));
        } else if (a == "--w-payload-bytes") {
            o.w_payload_bytes = static_cast<int>(parse_long(a, value(), 64, 1 << 20));
        } else if (a == "--queue-type") {
            o.queue_type = value();
            if (o.queue_type != "classic" && o.queue_type != "quorum") {
                die("--queue-type: expected classic or quorum, got '" + o.queue_type + "'");
            }
        } else if (a == "--window") {
            o.window = static_cast<int>(parse_long(a, value(), 1, 65535));
        } else if (a == "--batch-size") {
            o.batch_size = static_cast<int>(parse_long(a, value(), 1, 100000));
        } else if (a == "--per-aggregate") {
            o.per_aggregate = static_cast<int>(parse_long(a, value(), 1, 1000000));
        } else if (a == "--seed-events") {
            o.seed_events = parse_long(a, value(), 1, 100000000);
        } else if (a == "--consume-events") {
            o.consume_events = parse_long(a, value(), 1, 100000000);
        } else if (a == "--w1-events") {
            o.w1_events = parse_long(a, value(), 1, 100000000);
        } else if (a == "--writers") {
            o.writers = static_cast<int>(parse_long(a, value(), 1, 256));
        } else if (a == "--writes") {
            o.writes = parse_long(a, value(), 1, 100000000);
            writes_set = true;
        } else if (a == "--w-slices") {
            o.w_slices = static_cast<int>(parse_long(a, value(), 1, 1000));
            slices_set = true;
        } else if (a == "--outbox-cli") {
            o.outbox_cli = value();
        } else if (a == "--bindings-python") {
            o.bindings_python_json = value();
        } else if (a == "--bindings-node") {
            o.bindings_node_json = value();
        } else if (a == "--quick") {
            o.quick = true;
        } else if (a == "--only") {
            o.only = value();
        } else if (a == "--json") {
            o.json_file = value();
        } else if (a == "--md") {
            o.md_file = value();
        } else if (a == "--steps-csv") {
            o.steps_csv = value();
        } else if (a == "--keep") {
            o.keep = true;
        } else if (a == "--enforce-target") {
            o.enforce_target = true;
        } else if (a == "-h" || a == "--help") {
            usage(stdout);
            std::exit(0);
        } else {
            usage(stderr);
            die("unknown option " + a);
        }
    }
    if (o.quick) {
        if (!events_set) {
            o.events = 5000;
        }
        if (!drains_set) {
            o.drain_sizes = {1000, 5000};
        }
        if (!sweep_set) {
            o.sweep_events = 2000;
        }
        if (!batches_set) {
            o.sweep_batches = {100, 500};
        }
        if (!windows_set) {
            o.sweep_windows = {64, 512};
        }
        if (!scale_set) {
            o.scale_events = 4000;
        }
        if (!lat_set) {
            o.latency_seconds = 1.5;
        }
        o.latency_max_seconds = 2;
        o.latency_loads = {0.5};
        o.latency_poll_diag = false;
        if (!health_set) {
            o.health_minutes = 0.15;
        }
        o.health_sample_s = 1;
        o.health_purge_s = 2;
        o.health_age_s = 3;
        if (!writes_set) {
            o.writes = 800;
        }
        if (!slices_set) {
            o.w_slices = 4;
        }
    }
    {
        std::stringstream ss(o.only);
        std::string item;
        const std::string known = ",B,D,P,R-w1,S,X,L,W,C,K,H,R-nojit,R-pinned,";
        while (std::getline(ss, item, ',')) {
            if (known.find("," + item + ",") == std::string::npos) {
                die("--only: unknown scenario '" + item + "' (known: B,D,P,R-w1,S,X,L,W,C,K,H,R-nojit,R-pinned)");
            }
        }
    }
    if (o.consume_events < 0) {
        o.consume_events = std::max(200L, o.events / 20);
    }
    if (o.seed_events < 0) {
        o.seed_events = std::max(100L, o.events / 20);
    }
    if (o.w1_events < 0) {
        o.w1_events = std::max(100L, o.events / 100);
    }
    return o;
}

bool wanted(const Options &o, const std::string &scenario) {
    std::stringstream ss(o.only);
    std::string item;
    while (std::getline(ss, item, ',')) {
        if (item == scenario) {
            return true;
        }
    }
    return false;
}

// ---------------------------------------------------------------------------------------------- PostgreSQL

class PgResult {
  public:
    explicit PgResult(PGresult *r) : r_(r) {}
    ~PgResult() { PQclear(r_); }
    PgResult(const PgResult &) = delete;
    PgResult &operator=(const PgResult &) = delete;
    [[nodiscard]] int rows() const { return PQntuples(r_); }
    [[nodiscard]] std::string get(int row, int col) const { return PQgetvalue(r_, row, col); }
    [[nodiscard]] long long get_ll(int row, int col) const { return std::atoll(PQgetvalue(r_, row, col)); }
    [[nodiscard]] PGresult *raw() const { return r_; }

  private:
    PGresult *r_;
};

class Pg {
  public:
    explicit Pg(const std::string &url) : c_(PQconnectdb(url.c_str())) {
        if (PQstatus(c_) != CONNECTION_OK) {
            std::string msg = PQerrorMessage(c_);
            PQfinish(c_);
            die("PostgreSQL: cannot connect: " + msg);
        }
    }
    ~Pg() { PQfinish(c_); }
    Pg(const Pg &) = delete;
    Pg &operator=(const Pg &) = delete;

    PGconn *raw() { return c_; }

    void exec(const std::string &sql) { check(PQexec(c_, sql.c_str()), sql); }
    std::unique_ptr<PgResult> query(const std::string &sql, const std::vector<std::string> &params = {}) {
        std::vector<const char *> values;
        values.reserve(params.size());
        for (const auto &p : params) {
            values.push_back(p.c_str());
        }
        return check(
            PQexecParams(c_, sql.c_str(), static_cast<int>(values.size()), nullptr, values.data(), nullptr, nullptr, 0),
            sql);
    }
    void prepare(const char *name, const std::string &sql, int nparams) {
        check(PQprepare(c_, name, sql.c_str(), nparams, nullptr), sql);
    }
    std::unique_ptr<PgResult> exec_prepared(const char *name, const std::vector<const char *> &values) {
        return check(PQexecPrepared(c_, name, static_cast<int>(values.size()), values.data(), nullptr, nullptr, 0),
                     name);
    }

    // COPY ... FROM STDIN; `fill` appends text-format rows to its buffer and returns false when done.
    template <class F> void copy_in(const std::string &sql, F &&fill) {
        check(PQexec(c_, sql.c_str()), sql, PGRES_COPY_IN);
        std::string buf;
        bool more = true;
        while (more) {
            buf.clear();
            while (more && buf.size() < (1U << 20)) {
                more = fill(buf);
            }
            if (!buf.empty() && PQputCopyData(c_, buf.data(), static_cast<int>(buf.size())) != 1) {
                die(std::string("COPY: ") + PQerrorMessage(c_));
            }
        }
        if (PQputCopyEnd(c_, nullptr) != 1) {
            die(std::string("COPY end: ") + PQerrorMessage(c_));
        }
        check(PQgetResult(c_), sql);
        while (PGresult *r = PQgetResult(c_)) {
            PQclear(r);
        }
    }

  private:
    std::unique_ptr<PgResult> check(PGresult *r, const std::string &what, ExecStatusType expect = PGRES_COMMAND_OK) {
        auto res = std::make_unique<PgResult>(r);
        ExecStatusType st = PQresultStatus(r);
        if (st != expect && st != PGRES_TUPLES_OK && st != PGRES_COMMAND_OK) {
            die("PostgreSQL: " + std::string(PQerrorMessage(c_)) + " (in: " + what.substr(0, 200) + ")");
        }
        return res;
    }
    PGconn *c_;
};

// ---------------------------------------------------------------------------------------------- RabbitMQ

constexpr amqp_channel_t kChannel = 1;

amqp_bytes_t bytes_of(const std::string &s) {
    amqp_bytes_t b;
    b.len = s.size();
    b.bytes = const_cast<char *>(s.data());
    return b;
}

std::string str_of(amqp_bytes_t b) {
    return std::string(static_cast<const char *>(b.bytes), b.len);
}

// One connection, one channel, plain librabbitmq-c calls: what a service without this library would write.
class Amqp {
  public:
    // A list of brokers (a cluster): the first address, the one the relay tries first.
    Amqp(const std::string &urls, int heartbeat_s) {
        const std::string url = urls.substr(0, urls.find(','));
        std::vector<char> buf(url.begin(), url.end());
        buf.push_back('\0');
        amqp_connection_info info{};
        amqp_default_connection_info(&info);
        if (amqp_parse_url(buf.data(), &info) != AMQP_STATUS_OK) {
            die("RabbitMQ: cannot parse the URL in OUTBOX_AMQP_URL");
        }
        c_ = amqp_new_connection();
        amqp_socket_t *sock = amqp_tcp_socket_new(c_);
        if (sock == nullptr) {
            die("RabbitMQ: cannot create a socket");
        }
        timeval tv{5, 0};
        int rc = amqp_socket_open_noblock(sock, info.host, info.port, &tv);
        if (rc != AMQP_STATUS_OK) {
            die(std::string("RabbitMQ: cannot connect: ") + amqp_error_string2(rc));
        }
        check(amqp_login(c_, info.vhost, 0, AMQP_DEFAULT_FRAME_SIZE, heartbeat_s, AMQP_SASL_METHOD_PLAIN, info.user,
                         info.password),
              "login");
        amqp_channel_open(c_, kChannel);
        check(amqp_get_rpc_reply(c_), "channel.open");
    }
    ~Amqp() {
        if (c_ != nullptr) {
            amqp_channel_close(c_, kChannel, AMQP_REPLY_SUCCESS);
            amqp_connection_close(c_, AMQP_REPLY_SUCCESS);
            amqp_destroy_connection(c_);
        }
    }
    Amqp(const Amqp &) = delete;
    Amqp &operator=(const Amqp &) = delete;

    amqp_connection_state_t raw() { return c_; }

    void check(amqp_rpc_reply_t r, const std::string &what) {
        switch (r.reply_type) {
        case AMQP_RESPONSE_NORMAL:
            return;
        case AMQP_RESPONSE_NONE:
            die("RabbitMQ " + what + ": missing reply");
        case AMQP_RESPONSE_LIBRARY_EXCEPTION:
            die("RabbitMQ " + what + ": " + amqp_error_string2(r.library_error));
        case AMQP_RESPONSE_SERVER_EXCEPTION:
            if (r.reply.id == AMQP_CHANNEL_CLOSE_METHOD) {
                auto *m = static_cast<amqp_channel_close_t *>(r.reply.decoded);
                die("RabbitMQ " + what + ": channel closed: " + str_of(m->reply_text));
            }
            if (r.reply.id == AMQP_CONNECTION_CLOSE_METHOD) {
                auto *m = static_cast<amqp_connection_close_t *>(r.reply.decoded);
                die("RabbitMQ " + what + ": connection closed: " + str_of(m->reply_text));
            }
            die("RabbitMQ " + what + ": server exception");
        }
    }

    void declare_exchange(const std::string &name) {
        amqp_exchange_declare(c_, kChannel, bytes_of(name), amqp_cstring_bytes("fanout"), 0, 1, 0, 0, amqp_empty_table);
        check(amqp_get_rpc_reply(c_), "exchange.declare " + name);
    }
    void declare_queue(const std::string &name, const std::string &type) {
        amqp_table_entry_t arg{};
        arg.key = amqp_cstring_bytes("x-queue-type");
        arg.value.kind = AMQP_FIELD_KIND_UTF8;
        arg.value.value.bytes = bytes_of(type);
        amqp_table_t args{1, &arg};
        amqp_queue_declare(c_, kChannel, bytes_of(name), 0, 1, 0, 0, args);
        check(amqp_get_rpc_reply(c_), "queue.declare " + name);
    }
    void bind(const std::string &queue, const std::string &exchange) {
        amqp_queue_bind(c_, kChannel, bytes_of(queue), bytes_of(exchange), amqp_empty_bytes, amqp_empty_table);
        check(amqp_get_rpc_reply(c_), "queue.bind");
    }
    void unbind(const std::string &queue, const std::string &exchange) {
        amqp_queue_unbind(c_, kChannel, bytes_of(queue), bytes_of(exchange), amqp_empty_bytes, amqp_empty_table);
        check(amqp_get_rpc_reply(c_), "queue.unbind");
    }
    uint32_t count(const std::string &queue) {
        auto *ok = amqp_queue_declare(c_, kChannel, bytes_of(queue), 1, 0, 0, 0, amqp_empty_table);
        check(amqp_get_rpc_reply(c_), "queue.declare passive " + queue);
        return ok->message_count;
    }
    uint32_t purge(const std::string &queue) {
        auto *ok = amqp_queue_purge(c_, kChannel, bytes_of(queue));
        check(amqp_get_rpc_reply(c_), "queue.purge " + queue);
        return ok->message_count;
    }
    void delete_queue(const std::string &queue) {
        amqp_queue_delete(c_, kChannel, bytes_of(queue), 0, 0);
        check(amqp_get_rpc_reply(c_), "queue.delete " + queue);
    }
    void delete_exchange(const std::string &exchange) {
        amqp_exchange_delete(c_, kChannel, bytes_of(exchange), 0);
        check(amqp_get_rpc_reply(c_), "exchange.delete " + exchange);
    }
    void confirm_select() {
        amqp_confirm_select(c_, kChannel);
        check(amqp_get_rpc_reply(c_), "confirm.select");
    }

    struct Got {
        bool found = false;
        std::string body, message_id, type, app_id, content_type, routing_key;
        int delivery_mode = 0;
        int64_t timestamp = 0;
        int headers = 0;
    };
    // basic.get with no_ack: one message off the queue, for checking what was published.
    Got get(const std::string &queue) {
        Got g;
        amqp_rpc_reply_t r = amqp_basic_get(c_, kChannel, bytes_of(queue), 1);
        check(r, "basic.get");
        if (r.reply.id != AMQP_BASIC_GET_OK_METHOD) {
            return g;
        }
        g.routing_key = str_of(static_cast<amqp_basic_get_ok_t *>(r.reply.decoded)->routing_key);
        amqp_message_t msg{};
        check(amqp_read_message(c_, kChannel, &msg, 0), "basic.get content");
        g.found = true;
        g.body = str_of(msg.body);
        const amqp_basic_properties_t &p = msg.properties;
        if ((p._flags & AMQP_BASIC_MESSAGE_ID_FLAG) != 0) {
            g.message_id = str_of(p.message_id);
        }
        if ((p._flags & AMQP_BASIC_TYPE_FLAG) != 0) {
            g.type = str_of(p.type);
        }
        if ((p._flags & AMQP_BASIC_APP_ID_FLAG) != 0) {
            g.app_id = str_of(p.app_id);
        }
        if ((p._flags & AMQP_BASIC_CONTENT_TYPE_FLAG) != 0) {
            g.content_type = str_of(p.content_type);
        }
        if ((p._flags & AMQP_BASIC_DELIVERY_MODE_FLAG) != 0) {
            g.delivery_mode = p.delivery_mode;
        }
        if ((p._flags & AMQP_BASIC_TIMESTAMP_FLAG) != 0) {
            g.timestamp = static_cast<int64_t>(p.timestamp);
        }
        if ((p._flags & AMQP_BASIC_HEADERS_FLAG) != 0) {
            // The publisher's headers; a quorum queue adds its own x-delivery-count.
            for (int k = 0; k < p.headers.num_entries; ++k) {
                const amqp_bytes_t &key = p.headers.entries[k].key;
                const bool broker = key.len >= 2 && std::memcmp(key.bytes, "x-", 2) == 0;
                g.headers += broker ? 0 : 1;
            }
        }
        amqp_destroy_message(&msg);
        return g;
    }

    // basic.consume with no_ack: the broker pushes everything; next() reads one delivery.
    void consume(const std::string &queue) {
        amqp_basic_consume(c_, kChannel, bytes_of(queue), amqp_empty_bytes, 0, 1, 0, amqp_empty_table);
        check(amqp_get_rpc_reply(c_), "basic.consume " + queue);
    }
    struct Delivery {
        std::string aggregate_id, message_id;
        int64_t seq = -1;
    };
    // False on timeout.
    bool next(Delivery &d, int timeout_ms) {
        amqp_maybe_release_buffers(c_);
        amqp_envelope_t env{};
        timeval tv{timeout_ms / 1000, (timeout_ms % 1000) * 1000};
        amqp_rpc_reply_t r = amqp_consume_message(c_, &env, &tv, 0);
        if (r.reply_type == AMQP_RESPONSE_LIBRARY_EXCEPTION && r.library_error == AMQP_STATUS_TIMEOUT) {
            return false;
        }
        check(r, "consume");
        const amqp_basic_properties_t &p = env.message.properties;
        d.aggregate_id.clear();
        d.message_id.clear();
        d.seq = -1;
        if ((p._flags & AMQP_BASIC_MESSAGE_ID_FLAG) != 0) {
            d.message_id = str_of(p.message_id);
        }
        if ((p._flags & AMQP_BASIC_HEADERS_FLAG) != 0) {
            for (int k = 0; k < p.headers.num_entries; ++k) {
                const amqp_table_entry_t &e = p.headers.entries[k];
                const std::string key = str_of(e.key);
                if (key == "outbox-aggregate-id" && e.value.kind == AMQP_FIELD_KIND_UTF8) {
                    d.aggregate_id = str_of(e.value.value.bytes);
                } else if (key == "outbox-seq") {
                    switch (e.value.kind) {
                    case AMQP_FIELD_KIND_I64:
                        d.seq = e.value.value.i64;
                        break;
                    case AMQP_FIELD_KIND_U64:
                        d.seq = static_cast<int64_t>(e.value.value.u64);
                        break;
                    case AMQP_FIELD_KIND_I32:
                        d.seq = e.value.value.i32;
                        break;
                    case AMQP_FIELD_KIND_U32:
                        d.seq = e.value.value.u32;
                        break;
                    default:
                        break;
                    }
                }
            }
        }
        amqp_destroy_envelope(&env);
        return true;
    }

  private:
    amqp_connection_state_t c_ = nullptr;
};

// ---------------------------------------------------------------------------------------------- events

// The events of one scenario, generated from their index: the backlog rows written to PostgreSQL and
// the messages the baseline publishes are the same bytes the relay sends (checked with basic.get).
// Every body has the same length: fixed-width ids and a payload padded to exactly payload_bytes.
struct Generator {
    uint32_t run = 0;
    uint16_t code = 0; // scenario code inside the uuid
    char prefix = 'r'; // aggregate id prefix
    long count = 0;
    long aggregates = 1;
    int payload_bytes = 1024;
    int64_t base_us = 0; // created_at of event 0, microseconds since the epoch

    // Per-aggregate order: aggregate = i % aggregates, seq = i / aggregates + 1 (events of one aggregate
    // are spread through the backlog, as updates of one record are spread over time).
    [[nodiscard]] long aggregate_of(long i) const { return i % aggregates; }
    [[nodiscard]] long seq_of(long i) const { return i / aggregates + 1; }

    void id(std::string &out, long i) const {
        char buf[48];
        std::snprintf(buf, sizeof buf, "%08x-%04x-7000-8000-%012lx", run, code, static_cast<unsigned long>(i));
        out.assign(buf);
    }
    void aggregate_id(std::string &out, long i) const {
        char buf[32];
        std::snprintf(buf, sizeof buf, "%c%09ld", prefix, aggregate_of(i));
        out.assign(buf);
    }
    [[nodiscard]] const char *operation(long i) const { return seq_of(i) == 1 ? "POST" : "PUT"; }
    [[nodiscard]] const char *event_type(long i) const { return seq_of(i) == 1 ? "ProductCreated" : "ProductUpdated"; }
    [[nodiscard]] const char *routing_key(long i) const { return seq_of(i) == 1 ? "prd.post" : "prd.put"; }
    static const char *aggregate_type() { return "PRD"; }
    static const char *metadata() { return "{\"source\":\"relay_bench\"}"; }
    static const char *user() { return "bench"; }

    void payload(std::string &out, long i) const {
        char buf[160];
        std::snprintf(buf, sizeof buf,
                      "{\"PRD_ID\":\"%c%09ld\",\"XPRD01\":\"Widget %09ld\",\"XPRD02\":\"%09ld\",\"pad\":\"", prefix,
                      aggregate_of(i), i, seq_of(i));
        out.assign(buf);
        const long pad = static_cast<long>(payload_bytes) - static_cast<long>(out.size()) - 2;
        if (pad > 0) {
            out.append(static_cast<size_t>(pad), 'x');
        }
        out += "\"}";
    }
    [[nodiscard]] int64_t created_us(long i) const { return base_us + i; }
    [[nodiscard]] int64_t created_epoch_s(long i) const { return created_us(i) / 1000000; }
    // CREATED_AT of the envelope: YYYYMMDDHHMMSS, UTC.
    void created_compact(std::string &out, long i) const {
        const time_t t = static_cast<time_t>(created_epoch_s(i));
        tm u{};
        gmtime_r(&t, &u);
        char buf[32];
        std::snprintf(buf, sizeof buf, "%04d%02d%02d%02d%02d%02d", u.tm_year + 1900, u.tm_mon + 1, u.tm_mday, u.tm_hour,
                      u.tm_min, u.tm_sec);
        out.assign(buf);
    }
    // timestamptz in COPY text format.
    void created_sql(std::string &out, long i) const {
        const int64_t us = created_us(i);
        const time_t t = static_cast<time_t>(us / 1000000);
        tm u{};
        gmtime_r(&t, &u);
        char buf[48];
        std::snprintf(buf, sizeof buf, "%04d-%02d-%02d %02d:%02d:%02d.%06ld+00", u.tm_year + 1900, u.tm_mon + 1,
                      u.tm_mday, u.tm_hour, u.tm_min, u.tm_sec, static_cast<long>(us % 1000000));
        out.assign(buf);
    }
    // The index encoded in a message id this generator made, or -1.
    [[nodiscard]] long index_of(const std::string &message_id) const {
        if (message_id.size() != 36) {
            return -1;
        }
        return std::strtol(message_id.c_str() + 24, nullptr, 16);
    }
};

// The envelope of DESIGN.md ("the message on the wire"), built as the relay builds it.
void envelope(std::string &out, const std::string &id, const char *event_type, const std::string &aggregate_id,
              const char *aggregate_type, const char *operation, const std::string &payload, const char *metadata,
              const char *user, const std::string &created_at) {
    out.clear();
    out += "{\"OUTBOX_ID\":\"";
    out += id;
    out += "\",\"EVENT_TYPE\":\"";
    out += event_type;
    out += "\",\"AGGREGATE_ID\":\"";
    out += aggregate_id;
    out += "\",\"AGGREGATE_TYPE\":\"";
    out += aggregate_type;
    out += "\",\"OPERATION\":\"";
    out += operation;
    out += "\",\"PAYLOAD\":";
    out += payload;
    out += ",\"METADATA\":";
    out += metadata;
    out += ",\"USER\":\"";
    out += user;
    out += "\",\"CREATED_AT\":\"";
    out += created_at;
    out += "\"}";
}

// One message of a generator, with reusable buffers.
struct Message {
    std::string id, aggregate_id, payload, created, body;
    void build(const Generator &g, long i) {
        g.id(id, i);
        g.aggregate_id(aggregate_id, i);
        g.payload(payload, i);
        g.created_compact(created, i);
        envelope(body, id, g.event_type(i), aggregate_id, Generator::aggregate_type(), g.operation(i), payload,
                 Generator::metadata(), Generator::user(), created);
    }
};

// Writes the generator's events as committed PENDING rows (COPY), plus their aggregate counter rows.
void load_backlog(Pg &pg, const std::string &table, const std::string &aggregates_table, const Generator &g) {
    std::string id, agg, payload, created;
    long i = 0;
    pg.exec("BEGIN");
    pg.copy_in("COPY " + table +
                   " (outbox_id, event_type, aggregate_type, aggregate_id, seq, operation, payload, metadata, actor,"
                   " created_at, next_attempt_at) FROM STDIN",
               [&](std::string &buf) {
                   if (i >= g.count) {
                       return false;
                   }
                   g.id(id, i);
                   g.aggregate_id(agg, i);
                   g.payload(payload, i);
                   g.created_sql(created, i);
                   buf += id;
                   buf += '\t';
                   buf += g.event_type(i);
                   buf += '\t';
                   buf += Generator::aggregate_type();
                   buf += '\t';
                   buf += agg;
                   buf += '\t';
                   buf += std::to_string(g.seq_of(i));
                   buf += '\t';
                   buf += g.operation(i);
                   buf += '\t';
                   buf += payload;
                   buf += '\t';
                   buf += Generator::metadata();
                   buf += '\t';
                   buf += Generator::user();
                   buf += '\t';
                   buf += created;
                   buf += '\t';
                   buf += created;
                   buf += '\n';
                   ++i;
                   return i < g.count;
               });
    pg.exec("INSERT INTO " + aggregates_table +
            " (aggregate_type, aggregate_id, last_seq) SELECT aggregate_type, aggregate_id, max(seq) FROM " + table +
            " WHERE aggregate_id LIKE '" + std::string(1, g.prefix) +
            "%' GROUP BY 1, 2 ON CONFLICT (aggregate_type, aggregate_id) DO UPDATE SET last_seq ="
            " greatest(EXCLUDED.last_seq, " +
            aggregates_table + ".last_seq)");
    pg.exec("COMMIT");
    // As a backlog that built up over time would be: hint bits set, statistics known, nothing left
    // for a checkpoint to write in the middle of the measurement.
    pg.exec("VACUUM ANALYZE " + table);
    pg.exec("CHECKPOINT");
}

// ---------------------------------------------------------------------------------------------- results

struct Row {
    std::string key;  // B, R, R-w1, S, W-off, W-on
    std::string what; // description
    long events = 0;
    double seconds = 0;
    std::string ratio; // e.g. "R/B = 0.91"
    double ratio_value = -1;
    std::string target;       // e.g. "≥ 0.85: PASS"
    std::string extra_json;   // scenario-specific figures, a JSON object body without braces
    double client_cpu_s = -1; // CPU time of the bench process during the timed part
    long peak_rss_kib = -1;   // peak RSS of the relay process(es) of this row, when measured
    [[nodiscard]] double rate() const { return seconds > 0 ? static_cast<double>(events) / seconds : 0; }
};

// One line of the report's target table: a figure, the baseline it is compared with (measured in the
// same run), their ratio and the target it is held to.
struct Figure {
    std::string section;  // "1 relay drain", ...
    std::string name;     // what is measured
    std::string value;    // the figure with its unit
    std::string baseline; // the same-run baseline with its figure, or ""
    double ratio = -1;    // figure / baseline (or as the target defines it); -1: none
    std::string target;   // e.g. "≥ 0.85"; "" when only reported
    std::string verdict;  // PASS, MISS or "" (no target)
};

struct Run {
    std::string schema, exchange, queue, channel;
    std::string pg_url, amqp_url;
    std::string outbox_cli; // the `outbox` command, for relay daemons
    std::string log_prefix; // relay daemon logs go to <log_prefix><name>.log
    std::vector<Row> rows;
    std::vector<Figure> figures;
    std::map<std::string, std::string> series; // name -> JSON value, for the plots
    std::vector<std::string> notes;
    std::vector<std::string> failures; // verification failures: the figures are not to be trusted
    int body_bytes = 0;
    double max_rate = -1; // L: the measured maximum end-to-end rate (events/s), reused by H
    std::vector<std::pair<std::string, double>> phases; // scenario -> wall seconds, setup included
};

void progress(const std::string &msg);

// Records a figure and prints it at once, so a long run shows its results as it goes.
void add_figure(Run &run, Figure f) {
    std::string line = "[" + f.section + "] " + f.name + ": " + f.value;
    if (!f.baseline.empty()) {
        line += " vs " + f.baseline;
    }
    if (f.ratio >= 0) {
        line += ", ratio " + fixed(f.ratio, f.ratio < 10 ? 2 : 1);
    }
    if (!f.target.empty()) {
        line += " (target " + f.target + (f.verdict.empty() ? "" : ": " + f.verdict) + ")";
    }
    progress(line);
    run.figures.push_back(std::move(f));
}

const char *verdict(bool pass) {
    return pass ? "PASS" : "MISS";
}

std::string rate_str(double r) {
    return fixed(r, 0) + " events/s";
}

double percentile(std::vector<double> v, double p) {
    if (v.empty()) {
        return 0;
    }
    std::sort(v.begin(), v.end());
    const double pos = p / 100.0 * static_cast<double>(v.size() - 1);
    const auto lo = static_cast<size_t>(pos);
    const size_t hi = std::min(lo + 1, v.size() - 1);
    return v[lo] + (v[hi] - v[lo]) * (pos - static_cast<double>(lo));
}

double median(std::vector<double> v) {
    return percentile(std::move(v), 50);
}

std::string json_list(const std::vector<double> &v, int decimals) {
    std::string out = "[";
    for (size_t k = 0; k < v.size(); ++k) {
        out += (k > 0 ? ", " : "") + fixed(v[k], decimals);
    }
    return out + "]";
}

// ---------------------------------------------------------------------------------------------- processes

// A child process: the relay as its own process, so its peak RSS is its own (wait4's ru_maxrss).
struct Proc {
    pid_t pid = -1;
    int out = -1; // read end of its stdout (or stderr) pipe, or -1
};

// Starts argv[0] with the environment of this process. stdout: a pipe when pipe_fd == 1, else
// /dev/null; stderr: a pipe when pipe_fd == 2, else appended to err_file (inherited when empty).
Proc spawn_proc(const std::vector<std::string> &args, int pipe_fd, const std::string &err_file) {
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    int p[2] = {-1, -1};
    if (pipe_fd == 1 || pipe_fd == 2) {
        if (pipe2(p, O_CLOEXEC) != 0) {
            die(std::string("pipe: ") + std::strerror(errno));
        }
        posix_spawn_file_actions_adddup2(&fa, p[1], pipe_fd);
    }
    if (pipe_fd != 1) {
        posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    }
    if (pipe_fd != 2 && !err_file.empty()) {
        posix_spawn_file_actions_addopen(&fa, 2, err_file.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    }
    std::vector<char *> argv;
    for (const auto &a : args) {
        argv.push_back(const_cast<char *>(a.c_str()));
    }
    argv.push_back(nullptr);
    Proc pr;
    const int rc = posix_spawn(&pr.pid, args[0].c_str(), &fa, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&fa);
    if (p[1] >= 0) {
        close(p[1]);
    }
    if (rc != 0) {
        if (p[0] >= 0) {
            close(p[0]);
        }
        die("cannot start " + args[0] + ": " + std::strerror(rc));
    }
    pr.out = p[0];
    return pr;
}

std::string read_all(int fd) {
    std::string out;
    char buf[4096];
    while (true) {
        const ssize_t n = read(fd, buf, sizeof buf);
        if (n > 0) {
            out.append(buf, static_cast<size_t>(n));
        } else if (n == 0 || errno != EINTR) {
            break;
        }
    }
    return out;
}

struct ProcExit {
    int status = -1;   // exit code, or 128 + signal
    long maxrss_kib = 0;
};

ProcExit reap(Proc &p) {
    ProcExit e;
    if (p.pid <= 0) {
        return e;
    }
    int st = 0;
    rusage ru{};
    while (wait4(p.pid, &st, 0, &ru) < 0 && errno == EINTR) {
    }
    e.status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
    e.maxrss_kib = ru.ru_maxrss;
    if (p.out >= 0) {
        close(p.out);
        p.out = -1;
    }
    p.pid = -1;
    return e;
}

// `outbox relay` daemons of this run (X, L, H). Stopped with SIGTERM (the relay finishes its batch).
struct Daemon {
    std::string name;
    Proc proc;
    std::string log;
    std::thread reader;              // X: reads its log lines from a pipe
    std::atomic<long> published{0};  // X: sum of "published N" over its batch log lines
    std::atomic<int64_t> last_ns{0}; // X: steady-clock time of the last such line
    std::string tail;                // X: its last log lines, for error messages
};

std::vector<std::string> relay_daemon_args(const Run &run, const std::string &name,
                                           const std::vector<std::string> &extra) {
    std::vector<std::string> a = {run.outbox_cli,
                                  "relay",
                                  "--schema",
                                  run.schema,
                                  "--set",
                                  "amqp.exchange=" + run.exchange,
                                  "--set",
                                  "relay.notify_channel=" + run.channel,
                                  "--set",
                                  "relay.name=" + name};
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
}

// Relay daemon log files of this run: removed at the end unless --keep or a check failed.
std::vector<std::string> g_daemon_logs;

// Starts a relay daemon whose log (warnings and errors) goes to a file.
std::unique_ptr<Daemon> start_daemon(const Run &run, const std::string &name, const std::vector<std::string> &extra) {
    auto d = std::make_unique<Daemon>();
    d->name = name;
    d->log = run.log_prefix + name + ".log";
    g_daemon_logs.push_back(d->log);
    std::vector<std::string> args = relay_daemon_args(run, name, extra);
    args.emplace_back("--log-level");
    args.emplace_back("warn");
    d->proc = spawn_proc(args, 0, d->log);
    return d;
}

// Starts a relay daemon logging every batch at info level into a pipe that a thread reads, summing
// what it published: drain timing without querying the table while it drains.
std::unique_ptr<Daemon> start_counting_daemon(const Run &run, const std::string &name,
                                              const std::vector<std::string> &extra) {
    auto d = std::make_unique<Daemon>();
    d->name = name;
    std::vector<std::string> args = relay_daemon_args(run, name, extra);
    args.emplace_back("--log-level");
    args.emplace_back("info");
    d->proc = spawn_proc(args, 2, "");
    Daemon *dp = d.get();
    d->reader = std::thread([dp] {
        std::string buf;
        char chunk[8192];
        while (true) {
            const ssize_t n = read(dp->proc.out, chunk, sizeof chunk);
            if (n <= 0) {
                if (n < 0 && errno == EINTR) {
                    continue;
                }
                break;
            }
            buf.append(chunk, static_cast<size_t>(n));
            size_t nl;
            while ((nl = buf.find('\n')) != std::string::npos) {
                const std::string line = buf.substr(0, nl);
                buf.erase(0, nl + 1);
                const size_t at = line.find(", published ");
                if (line.find("batch: claimed") != std::string::npos && at != std::string::npos) {
                    dp->published.fetch_add(std::atol(line.c_str() + at + 12));
                    dp->last_ns.store(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                          Clock::now().time_since_epoch())
                                          .count());
                } else {
                    dp->tail += line + "\n";
                    if (dp->tail.size() > 4000) {
                        dp->tail.erase(0, dp->tail.size() - 4000);
                    }
                }
            }
        }
    });
    return d;
}

ProcExit stop_daemon(Daemon &d) {
    if (d.proc.pid > 0) {
        kill(d.proc.pid, SIGTERM);
    }
    // Reap first: the pipe's EOF comes when the process is gone.
    int fd = d.proc.out;
    d.proc.out = -1; // the reader thread owns the pipe until it has seen EOF
    ProcExit e = reap(d.proc);
    if (d.reader.joinable()) {
        d.reader.join();
    }
    if (fd >= 0) {
        close(fd);
    }
    return e;
}

// True while the process runs (a zombie is not reaped here: reap() still gets its status).
bool daemon_alive(const Daemon &d) {
    if (d.proc.pid <= 0) {
        return false;
    }
    siginfo_t info{};
    return waitid(P_PID, static_cast<id_t>(d.proc.pid), &info, WEXITED | WNOHANG | WNOWAIT) == 0 && info.si_pid == 0;
}

std::string file_tail(const std::string &path) {
    std::ifstream f(path);
    std::string all((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    return all.size() > 2000 ? all.substr(all.size() - 2000) : all;
}

void require_alive(const Daemon &d) {
    if (!daemon_alive(d)) {
        die(d.name + " (outbox relay) exited; the end of its log " + d.log + ":\n" + file_tail(d.log));
    }
}

Row *find_row(Run &run, const std::string &key) {
    for (auto &r : run.rows) {
        if (r.key == key) {
            return &r;
        }
    }
    return nullptr;
}

void expect(Run &run, bool ok, const std::string &what) {
    if (!ok) {
        std::fprintf(stderr, "bench: CHECK FAILED: %s\n", what.c_str());
        run.failures.push_back(what);
    }
}

void progress(const std::string &msg) {
    std::fprintf(stderr, "bench: %s\n", msg.c_str());
    std::fflush(stderr);
}

// Checks one message taken off the queue against the generator's bytes.
void check_sample(Run &run, Amqp &admin, const Generator &g, const std::string &who) {
    Amqp::Got got = admin.get(run.queue);
    expect(run, got.found, who + ": a message is in the queue");
    if (!got.found) {
        return;
    }
    const long i = g.index_of(got.message_id);
    expect(run, i >= 0 && i < g.count, who + ": message_id " + got.message_id + " is one of the generated events");
    if (i < 0 || i >= g.count) {
        return;
    }
    Message m;
    m.build(g, i);
    expect(run, got.body == m.body,
           who + ": body is the generated envelope byte for byte (" + std::to_string(got.body.size()) + " vs " +
               std::to_string(m.body.size()) + " bytes)");
    expect(run,
           got.type == g.event_type(i) && got.app_id == "outbox" && got.content_type == "application/json" &&
               got.delivery_mode == 2 && got.timestamp == g.created_epoch_s(i) && got.headers == 3 &&
               got.routing_key == g.routing_key(i),
           who + ": properties and routing key as the relay sets them (type " + got.type + ", app_id " + got.app_id +
               ", content_type " + got.content_type + ", delivery_mode " + std::to_string(got.delivery_mode) +
               ", timestamp " + std::to_string(got.timestamp) + ", " + std::to_string(got.headers) +
               " header(s), routing key " + got.routing_key + ")");
    run.body_bytes = static_cast<int>(got.body.size());
}

// ---------------------------------------------------------------------------------------------- B

struct ConfirmTracker {
    std::vector<uint8_t> done;
    uint64_t low = 1; // lowest tag not yet confirmed
    uint64_t confirmed = 0;
    uint64_t nacked = 0;
    explicit ConfirmTracker(size_t n) : done(n + 2, 0) {}
    void settle(uint64_t tag, bool multiple, bool ack) {
        auto one = [&](uint64_t t) {
            if (t < done.size() && done[t] == 0) {
                done[t] = 1;
                ++confirmed;
                if (!ack) {
                    ++nacked;
                }
            }
        };
        if (multiple) {
            for (uint64_t t = low; t <= tag; ++t) {
                one(t);
            }
        } else {
            one(tag);
        }
        while (low < done.size() && done[low] != 0) {
            ++low;
        }
    }
};

// Reads one frame (tv {0,0}: only if one is there); handles confirms, returns and closes.
// Returns false on timeout.
struct FrameReader {
    Amqp &mq;
    ConfirmTracker &confirms;
    uint64_t returned = 0;
    uint64_t skip_body = 0; // bytes of returned content still to skip
    bool skip_header = false;

    bool read(timeval *tv) {
        amqp_frame_t f{};
        const int st = amqp_simple_wait_frame_noblock(mq.raw(), &f, tv);
        if (st == AMQP_STATUS_TIMEOUT) {
            return false;
        }
        if (st != AMQP_STATUS_OK) {
            die(std::string("RabbitMQ: waiting for confirms: ") + amqp_error_string2(st));
        }
        if (f.frame_type == AMQP_FRAME_METHOD) {
            switch (f.payload.method.id) {
            case AMQP_BASIC_ACK_METHOD: {
                auto *a = static_cast<amqp_basic_ack_t *>(f.payload.method.decoded);
                confirms.settle(a->delivery_tag, a->multiple != 0, true);
                break;
            }
            case AMQP_BASIC_NACK_METHOD: {
                auto *n = static_cast<amqp_basic_nack_t *>(f.payload.method.decoded);
                confirms.settle(n->delivery_tag, n->multiple != 0, false);
                break;
            }
            case AMQP_BASIC_RETURN_METHOD:
                ++returned;
                skip_header = true;
                break;
            case AMQP_CHANNEL_CLOSE_METHOD: {
                auto *m = static_cast<amqp_channel_close_t *>(f.payload.method.decoded);
                die("RabbitMQ closed the channel: " + str_of(m->reply_text));
            }
            case AMQP_CONNECTION_CLOSE_METHOD: {
                auto *m = static_cast<amqp_connection_close_t *>(f.payload.method.decoded);
                die("RabbitMQ closed the connection: " + str_of(m->reply_text));
            }
            default:
                break;
            }
        } else if (f.frame_type == AMQP_FRAME_HEADER && skip_header) {
            skip_header = false;
            skip_body = f.payload.properties.body_size;
        } else if (f.frame_type == AMQP_FRAME_BODY && skip_body > 0) {
            skip_body -= std::min<uint64_t>(skip_body, f.payload.body_fragment.len);
        }
        amqp_maybe_release_buffers(mq.raw());
        return true;
    }
};

Row run_baseline(Run &run, const Options &o, const Generator &g) {
    progress("B: plain librabbitmq-c publisher, " + std::to_string(g.count) + " messages, window " +
             std::to_string(o.window));
    Amqp mq(run.amqp_url, 30);
    mq.confirm_select();
    ConfirmTracker confirms(static_cast<size_t>(g.count));
    FrameReader reader{mq, confirms};
    Message m;
    amqp_table_entry_t headers[3];
    headers[0].key = amqp_cstring_bytes("outbox-aggregate-type");
    headers[0].value.kind = AMQP_FIELD_KIND_UTF8;
    headers[1].key = amqp_cstring_bytes("outbox-aggregate-id");
    headers[1].value.kind = AMQP_FIELD_KIND_UTF8;
    headers[2].key = amqp_cstring_bytes("outbox-seq");
    headers[2].value.kind = AMQP_FIELD_KIND_I64;
    const std::string exchange = run.exchange;
    const auto window = static_cast<uint64_t>(o.window);
    const auto total = static_cast<uint64_t>(g.count);
    uint64_t published = 0;
    timeval zero{0, 0};

    const double cpu0 = cpu_seconds();
    const auto t0 = Clock::now();
    while (confirms.confirmed < total) {
        while (published < total && published - confirms.confirmed < window) {
            const long i = static_cast<long>(published);
            m.build(g, i);
            amqp_basic_properties_t p{};
            p._flags = AMQP_BASIC_CONTENT_TYPE_FLAG | AMQP_BASIC_DELIVERY_MODE_FLAG | AMQP_BASIC_MESSAGE_ID_FLAG |
                       AMQP_BASIC_TYPE_FLAG | AMQP_BASIC_TIMESTAMP_FLAG | AMQP_BASIC_APP_ID_FLAG |
                       AMQP_BASIC_HEADERS_FLAG;
            p.content_type = amqp_cstring_bytes("application/json");
            p.delivery_mode = 2;
            p.message_id = bytes_of(m.id);
            p.type = amqp_cstring_bytes(g.event_type(i));
            p.timestamp = static_cast<uint64_t>(g.created_epoch_s(i));
            p.app_id = amqp_cstring_bytes("outbox");
            headers[0].value.value.bytes = amqp_cstring_bytes(Generator::aggregate_type());
            headers[1].value.value.bytes = bytes_of(m.aggregate_id);
            headers[2].value.value.i64 = g.seq_of(i);
            p.headers.num_entries = 3;
            p.headers.entries = headers;
            const int rc = amqp_basic_publish(mq.raw(), kChannel, bytes_of(exchange),
                                              amqp_cstring_bytes(g.routing_key(i)), 1, 0, &p, bytes_of(m.body));
            if (rc != AMQP_STATUS_OK) {
                die(std::string("RabbitMQ: publish: ") + amqp_error_string2(rc));
            }
            ++published;
            // Take in whatever confirms have already arrived, without blocking.
            zero = {0, 0};
            while (reader.read(&zero)) {
                zero = {0, 0};
            }
        }
        if (confirms.confirmed >= total) {
            break;
        }
        // Window full (or everything sent): block for the next frame.
        timeval tv{15, 0};
        if (!reader.read(&tv)) {
            die("B: no confirm within 15 s");
        }
        check_interrupt();
    }
    const double secs = seconds_between(t0, Clock::now());

    Row r;
    r.client_cpu_s = cpu_seconds() - cpu0;
    r.key = "B";
    r.what = "plain librabbitmq-c publisher (confirms, window " + std::to_string(o.window) + ")";
    r.events = g.count;
    r.seconds = secs;
    r.extra_json =
        "\"nacked\": " + std::to_string(confirms.nacked) + ", \"returned\": " + std::to_string(reader.returned);
    expect(run, confirms.nacked == 0 && reader.returned == 0, "B: no nacks and no returns");
    return r;
}

// ---------------------------------------------------------------------------------------------- R

outbox_config *relay_config(const Run &run, int batch_size, int window, const std::string &pg_url) {
    outbox_config *cfg = nullptr;
    if (outbox_config_new(&cfg) != OUTBOX_OK) {
        die(std::string("outbox_config_new: ") + outbox_last_error());
    }
    const std::string batch = std::to_string(batch_size);
    const std::string win = std::to_string(window);
    const std::pair<const char *, const char *> settings[] = {
        {"pg.url", pg_url.c_str()},
        {"amqp.url", run.amqp_url.c_str()},
        {"outbox.schema", run.schema.c_str()},
        {"amqp.exchange", run.exchange.c_str()},
        {"relay.batch_size", batch.c_str()},
        {"relay.window", win.c_str()},
        {"relay.listen", "false"},
        {"relay.notify_channel", run.channel.c_str()},
        {"relay.name", "relay_bench"},
    };
    for (const auto &[k, v] : settings) {
        if (outbox_config_set(cfg, k, v) != OUTBOX_OK) {
            std::string msg = outbox_last_error();
            outbox_config_free(cfg);
            die(std::string("outbox_config_set ") + k + ": " + msg);
        }
    }
    return cfg;
}

// The same connection string with libpq "options" (session settings such as "-c jit=off") added.
std::string with_options(const std::string &url, const std::string &options) {
    if (url.rfind("postgresql://", 0) == 0 || url.rfind("postgres://", 0) == 0) {
        std::string enc;
        for (char c : options) {
            if (c == ' ') {
                enc += "%20";
            } else if (c == '=') {
                enc += "%3D";
            } else {
                enc.push_back(c);
            }
        }
        return url + (url.find('?') == std::string::npos ? "?" : "&") + "options=" + enc;
    }
    return url + " options='" + options + "'";
}

// What a drain did: the sums of outbox_relay_stats over its steps, and its timing.
struct DrainStats {
    int64_t steps = 0, claimed = 0, published = 0, failed = 0, held_back = 0, unconfirmed = 0;
    int64_t claim_us = 0, publish_us = 0, mark_us = 0, total_us = 0, first_step_us = 0, max_step_us = 0;
    double seconds = 0, cpu_s = 0;
    long peak_rss_kib = -1;

    [[nodiscard]] std::string line() const {
        std::ostringstream x;
        x << steps << ' ' << claimed << ' ' << published << ' ' << failed << ' ' << held_back << ' ' << unconfirmed
          << ' ' << claim_us << ' ' << publish_us << ' ' << mark_us << ' ' << total_us << ' ' << first_step_us << ' '
          << max_step_us << ' ' << fixed(seconds, 6) << ' ' << fixed(cpu_s, 6);
        return x.str();
    }
    bool parse(const std::string &s) {
        std::istringstream x(s);
        x >> steps >> claimed >> published >> failed >> held_back >> unconfirmed >> claim_us >> publish_us >>
            mark_us >> total_us >> first_step_us >> max_step_us >> seconds >> cpu_s;
        return !x.fail();
    }
};

// The relay drain itself (public C API: outbox_relay_new, outbox_relay_step until a step claims
// nothing), timed from the first step (which also connects) to the end of the step that marked the
// last event. Runs in the child process that `relay_bench --child-drain` starts.
DrainStats drain(const Run &run, int batch, int window, const std::string &pg_url, long expected,
                 const std::string &key, const std::string &steps_csv) {
    outbox_config *cfg = relay_config(run, batch, window, pg_url);
    outbox_relay *relay = nullptr;
    outbox_status rc = outbox_relay_new(&relay, cfg);
    outbox_config_free(cfg);
    if (rc != OUTBOX_OK) {
        die(std::string("outbox_relay_new: ") + outbox_last_error());
    }
    struct Free {
        outbox_relay *r;
        ~Free() { outbox_relay_free(r); }
    } free_relay{relay};
    DrainStats d;
    std::ofstream csv;
    if (!steps_csv.empty() && steps_csv != "-") {
        csv.open(steps_csv, std::ios::app);
        csv << "scenario,step,claimed,published,held_back,claim_us,publish_us,mark_us,total_us\n";
    }
    const double cpu0 = cpu_seconds();
    const auto t0 = Clock::now();
    auto t_last = t0;
    while (true) {
        outbox_relay_stats st;
        outbox_relay_stats_init(&st);
        rc = outbox_relay_step(relay, &st);
        if (rc != OUTBOX_OK) {
            die(key + ": outbox_relay_step: " + outbox_status_name(rc) + ": " + outbox_last_error());
        }
        // Under a backlog a batch's marks commit in the background and are counted by a later
        // step; the step that claims nothing collects the last of them.
        d.published += st.published;
        d.failed += st.failed;
        d.mark_us += st.mark_us;
        if (st.published > 0 || st.failed > 0) {
            t_last = Clock::now();
        }
        if (st.claimed == 0) {
            break;
        }
        if (csv.is_open()) {
            csv << key << ',' << d.steps << ',' << st.claimed << ',' << st.published << ',' << st.held_back << ','
                << st.claim_us << ',' << st.publish_us << ',' << st.mark_us << ',' << st.total_us << '\n';
        }
        if (d.steps == 0) {
            d.first_step_us = st.total_us;
        }
        ++d.steps;
        d.claimed += st.claimed;
        d.held_back += st.held_back;
        d.unconfirmed += st.unconfirmed;
        d.claim_us += st.claim_us;
        d.publish_us += st.publish_us;
        d.total_us += st.total_us;
        d.max_step_us = std::max<int64_t>(d.max_step_us, st.total_us);
        check_interrupt();
        if (d.steps > 10 * expected + 100) {
            die(key + ": the relay does not finish");
        }
    }
    d.seconds = seconds_between(t0, t_last);
    d.cpu_s = cpu_seconds() - cpu0;
    return d;
}

// `relay_bench --child-drain SCHEMA EXCHANGE CHANNEL BATCH WINDOW EXPECTED KEY STEPS_CSV PG_OPTIONS`:
// one drain, its DrainStats on stdout. The URLs come from the environment (never on a command line,
// where any user could read the password); PG_OPTIONS are libpq session options, "-" for none.
int child_drain(int argc, char **argv) {
    if (argc != 11) {
        std::fprintf(stderr, "relay_bench --child-drain: expected 9 arguments\n");
        return 2;
    }
    try {
        Run run;
        run.schema = argv[2];
        run.exchange = argv[3];
        run.channel = argv[4];
        run.amqp_url = env_or("OUTBOX_AMQP_URL", "amqp://outbox:outbox@127.0.0.1:56729/%2f");
        const int batch = static_cast<int>(parse_long("batch", argv[5], 1, 100000));
        const int window = static_cast<int>(parse_long("window", argv[6], 1, 65535));
        const long expected = parse_long("expected", argv[7], 0, 100000000);
        const std::string pg_url = env_or("OUTBOX_PG_URL", "postgresql://outbox:outbox@127.0.0.1:54329/outbox");
        const std::string opts = argv[10];
        DrainStats d =
            drain(run, batch, window, opts == "-" ? pg_url : with_options(pg_url, opts), expected, argv[8], argv[9]);
        std::printf("%s\n", d.line().c_str());
        return 0;
    } catch (const std::exception &e) {
        std::fprintf(stderr, "relay_bench --child-drain: %s\n", e.what());
        return 1;
    }
}

// The drain in a child process of its own (this binary again): the relay's peak RSS is then the
// child's, not this harness's with its buffers and threads.
DrainStats drain_in_child(const Run &run, int batch, int window, const std::string &pg_options, long expected,
                          const std::string &key, const std::string &steps_csv) {
    const std::vector<std::string> args = {"/proc/self/exe",
                                           "--child-drain",
                                           run.schema,
                                           run.exchange,
                                           run.channel,
                                           std::to_string(batch),
                                           std::to_string(window),
                                           std::to_string(expected),
                                           key,
                                           steps_csv.empty() ? "-" : steps_csv,
                                           pg_options.empty() ? "-" : pg_options};
    Proc p = spawn_proc(args, 1, "");
    const std::string out = read_all(p.out);
    ProcExit e = reap(p);
    DrainStats d;
    if (e.status != 0 || !d.parse(out)) {
        die(key + ": the relay process failed (exit " + std::to_string(e.status) + ")");
    }
    d.peak_rss_kib = e.maxrss_kib;
    return d;
}

Row run_relay(Run &run, const Options &o, const Generator &g, Pg &pg, int batch, int window, const std::string &key,
              const std::string &pg_options = "") {
    progress(key + ": relay draining a backlog of " + std::to_string(g.count) + " events (batch " +
             std::to_string(batch) + ", window " + std::to_string(window) + ")");
    const DrainStats d = drain_in_child(run, batch, window, pg_options, g.count, key, o.steps_csv);

    Row r;
    r.client_cpu_s = d.cpu_s;
    r.peak_rss_kib = d.peak_rss_kib;
    r.key = key;
    r.what = "outbox relay draining a backlog (batch " + std::to_string(batch) + ", window " + std::to_string(window) +
             ", " + std::to_string(g.count / std::max(1L, g.aggregates)) + " event(s)/aggregate)";
    r.events = d.published;
    r.seconds = d.seconds;
    auto per_event = [&](int64_t us) {
        return fixed(d.published > 0 ? static_cast<double>(us) / static_cast<double>(d.published) : 0, 2);
    };
    std::ostringstream x;
    x << "\"steps\": " << d.steps << ", \"claimed\": " << d.claimed << ", \"published\": " << d.published
      << ", \"failed\": " << d.failed << ", \"held_back\": " << d.held_back << ", \"unconfirmed\": " << d.unconfirmed
      << ", \"claim_us\": " << d.claim_us << ", \"publish_us\": " << d.publish_us << ", \"mark_us\": " << d.mark_us
      << ", \"step_total_us\": " << d.total_us << ", \"first_step_us\": " << d.first_step_us
      << ", \"max_step_us\": " << d.max_step_us << ", \"claim_us_per_event\": " << per_event(d.claim_us)
      << ", \"publish_us_per_event\": " << per_event(d.publish_us)
      << ", \"mark_us_per_event\": " << per_event(d.mark_us) << ", \"backlog\": " << g.count;
    r.extra_json = x.str();
    if (key.rfind("R-", 0) == 0 && key != "R-w1" && key.find('@') == std::string::npos) {
        const double tot = static_cast<double>(std::max<int64_t>(1, d.claim_us + d.publish_us + d.mark_us));
        run.notes.push_back(key + " phases (outbox_relay_stats, summed over " + std::to_string(d.steps) +
                            " steps): claim " + fixed(static_cast<double>(d.claim_us) / 1e6, 2) + " s (" +
                            fixed(100.0 * static_cast<double>(d.claim_us) / tot, 0) + "%, " + per_event(d.claim_us) +
                            " us/event), publish+confirm " + fixed(static_cast<double>(d.publish_us) / 1e6, 2) +
                            " s (" + fixed(100.0 * static_cast<double>(d.publish_us) / tot, 0) + "%, " +
                            per_event(d.publish_us) + " us/event), mark+commit " +
                            fixed(static_cast<double>(d.mark_us) / 1e6, 2) + " s (" +
                            fixed(100.0 * static_cast<double>(d.mark_us) / tot, 0) + "%, " + per_event(d.mark_us) +
                            " us/event); first step (connects to both servers) " +
                            fixed(static_cast<double>(d.first_step_us) / 1e3, 1) + " ms, slowest step " +
                            fixed(static_cast<double>(d.max_step_us) / 1e3, 1) + " ms; relay process peak RSS " +
                            fixed(static_cast<double>(d.peak_rss_kib) / 1024.0, 1) + " MiB");
    }

    expect(run, d.published == g.count && d.failed == 0 && d.unconfirmed == 0,
           key + ": every event confirmed and marked (" + std::to_string(d.published) + "/" +
               std::to_string(g.count) + ")");
    auto res = pg.query("SELECT count(*) FILTER (WHERE status = 'PUBLISHED'), count(*) FROM " +
                            ("\"" + run.schema + "\".outbox") + " WHERE aggregate_id LIKE $1",
                        {std::string(1, g.prefix) + "%"});
    expect(run, res->get_ll(0, 0) == g.count && res->get_ll(0, 1) == g.count,
           key + ": all " + std::to_string(g.count) + " rows are PUBLISHED (" + res->get(0, 0) + " of " +
               res->get(0, 1) + ")");
    return r;
}

// ---------------------------------------------------------------------------------------------- S

// The documents' loop. With sleep_s > 0 it sleeps that long after each poll, as written, and stops
// after limit_s seconds (the backlog is larger than it can drain by then); its rate is what it did.
struct SeedLoop {
    std::string key = "S";
    double sleep_s = 0;
    double limit_s = 0;
};

Row run_seed_style(Run &run, const Generator &g, Pg &pg, const SeedLoop &loop = {}) {
    progress(loop.key + ": seed-style loop (publish + UPDATE per event, no confirms" +
             (loop.sleep_s > 0 ? ", sleep " + fixed(loop.sleep_s, 1) + " s per poll, for " + fixed(loop.limit_s, 0) + " s"
                               : std::string()) +
             "), " + std::to_string(g.count) + " events");
    Amqp mq(run.amqp_url, 30);
    const std::string t = "\"" + run.schema + "\".outbox";
    const std::string select_name = "seed_select " + loop.key;
    const std::string update_name = "seed_update " + loop.key;
    // The documents: SELECT * FROM OUTBOX WHERE STATUS = 'PENDING' ORDER BY CREATED_AT ASC LIMIT 100, then
    // per event publish and UPDATE ... SET STATUS = 'PUBLISHED', PUBLISHED_AT = ... WHERE OUTBOX_ID = ?.
    pg.prepare(select_name.c_str(),
               "SELECT outbox_id, event_type, aggregate_type, aggregate_id, operation, payload, metadata, actor,"
               " to_char(created_at AT TIME ZONE 'UTC', 'YYYYMMDDHH24MISS'), seq, retry_count, status FROM " +
                   t + " WHERE status = 'PENDING' ORDER BY created_at ASC LIMIT 100",
               0);
    pg.prepare(update_name.c_str(), "UPDATE " + t + " SET status = 'PUBLISHED', published_at = now() WHERE outbox_id = $1",
               1);
    std::string body;
    const std::string exchange = run.exchange;
    long done = 0;
    long polls = 0;
    const double cpu0 = cpu_seconds();
    const auto t0 = Clock::now();
    while (true) {
        if (loop.limit_s > 0 && seconds_between(t0, Clock::now()) >= loop.limit_s) {
            break;
        }
        auto rows = pg.exec_prepared(select_name.c_str(), {});
        ++polls;
        if (rows->rows() == 0) {
            break;
        }
        for (int k = 0; k < rows->rows(); ++k) {
            const std::string id = rows->get(k, 0);
            const std::string et = rows->get(k, 1);
            const std::string at = rows->get(k, 2);
            envelope(body, id, et.c_str(), rows->get(k, 3), at.c_str(), rows->get(k, 4).c_str(), rows->get(k, 5),
                     PQgetvalue(rows->raw(), k, 6), PQgetvalue(rows->raw(), k, 7), rows->get(k, 8));
            amqp_basic_properties_t p{};
            p._flags = AMQP_BASIC_CONTENT_TYPE_FLAG | AMQP_BASIC_DELIVERY_MODE_FLAG;
            p.content_type = amqp_cstring_bytes("application/json");
            p.delivery_mode = 2;
            std::string rk = at + "." + rows->get(k, 4);
            std::transform(rk.begin(), rk.end(), rk.begin(),
                           [](char c) { return static_cast<char>(c >= 'A' && c <= 'Z' ? c + 32 : c); });
            const int rc =
                amqp_basic_publish(mq.raw(), kChannel, bytes_of(exchange), bytes_of(rk), 0, 0, &p, bytes_of(body));
            if (rc != AMQP_STATUS_OK) {
                die(std::string("S: publish: ") + amqp_error_string2(rc));
            }
            pg.exec_prepared(update_name.c_str(), {PQgetvalue(rows->raw(), k, 0)});
            ++done;
        }
        check_interrupt();
        if (loop.sleep_s > 0) {
            std::this_thread::sleep_for(std::chrono::duration<double>(loop.sleep_s));
        }
    }
    const double secs = seconds_between(t0, Clock::now());
    const double cpu = cpu_seconds() - cpu0;
    // No confirms: nothing says the broker has them yet. Give it a moment before checking.
    Amqp admin(run.amqp_url, 0);
    uint32_t n = 0;
    for (int k = 0; k < 100 && (n = admin.count(run.queue)) < static_cast<uint32_t>(done); ++k) {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    if (loop.limit_s > 0) {
        expect(run, done > 0 && done < g.count,
               loop.key + ": published part of a backlog larger than the time allows (" + std::to_string(done) +
                   " of " + std::to_string(g.count) + ")");
    } else {
        expect(run, done == g.count, loop.key + ": published and marked every event (" + std::to_string(done) + ")");
    }
    expect(run, n == static_cast<uint32_t>(done),
           loop.key + ": the queue holds " + std::to_string(done) + " messages (" + std::to_string(n) + ")");
    Row r;
    r.key = loop.key;
    r.what = loop.sleep_s > 0 ? "seed-style loop as written: SELECT 100, publish + UPDATE per event, sleep 1 s per poll"
                              : "seed-style loop: SELECT 100, publish + UPDATE per event, no confirms, no sleep";
    r.events = done;
    r.seconds = secs;
    r.extra_json = "\"polls\": " + std::to_string(polls);
    r.client_cpu_s = cpu;
    return r;
}

// ---------------------------------------------------------------------------------------------- W

// Write modes of W: the business transaction alone, and with outbox_write (write.notify off, on).
enum class WMode { biz = 0, off = 1, on = 2 };
const char *wmode_key(WMode m) {
    return m == WMode::biz ? "W-biz" : (m == WMode::off ? "W-off" : "W-on");
}

struct WSlice {
    long txns = 0;
    double seconds = 0, cpu_s = 0;
    std::vector<double> latency_ms; // per transaction, BEGIN sent to COMMIT returned
};

// One slice of a write mode: `writes` transactions over o.writers threads, each with its own
// connection (outbox_db_open). A transaction is one business row (INSERT INTO bench_orders), plus,
// unless mode is biz, one outbox_write whose payload is that row as JSON.
WSlice run_writes(Run &run, const Options &o, WMode mode, int slice, long writes) {
    const bool notify = mode == WMode::on;
    const std::string key = wmode_key(mode);
    // A LISTEN connection standing in for the relay, draining notifications as they come.
    std::atomic<bool> stop_listener{false};
    std::atomic<long> notifications{0};
    std::string listener_error;
    Pg listener(run.pg_url);
    listener.exec("LISTEN \"" + run.channel + "\"");
    std::thread listen_thread([&] {
        PGconn *c = listener.raw();
        while (!stop_listener.load()) {
            pollfd p{PQsocket(c), POLLIN, 0};
            if (poll(&p, 1, 50) > 0) {
                if (PQconsumeInput(c) == 0) {
                    listener_error = PQerrorMessage(c);
                    return;
                }
                while (PGnotify *n = PQnotifies(c)) {
                    notifications.fetch_add(1);
                    PQfreemem(n);
                }
            }
        }
    });

    const long per_writer = std::max(1L, writes / o.writers);
    const long total = per_writer * o.writers;
    std::atomic<int> ready{0};
    std::atomic<bool> go{false};
    std::vector<std::string> errors(static_cast<size_t>(o.writers));
    std::vector<Clock::time_point> ends(static_cast<size_t>(o.writers));
    std::vector<std::vector<double>> lat(static_cast<size_t>(o.writers));
    std::vector<std::thread> threads;
    // The business row's text column and the event payload: the same bytes, w_payload_bytes long.
    Generator pg_payload;
    pg_payload.payload_bytes = o.w_payload_bytes;
    pg_payload.prefix = 'w';
    pg_payload.aggregates = total;
    pg_payload.count = total;
    std::string payload;
    pg_payload.payload(payload, 0);
    const std::string insert =
        "INSERT INTO \"" + run.schema + "\".bench_orders (customer, amount, body) VALUES ($1, $2, $3)";

    threads.reserve(static_cast<size_t>(o.writers));
    for (int w = 0; w < o.writers; ++w) {
        threads.emplace_back([&, w] {
            outbox_config *cfg = nullptr;
            outbox_db *db = nullptr;
            outbox_event *ev = nullptr;
            auto &my_lat = lat[static_cast<size_t>(w)];
            my_lat.reserve(static_cast<size_t>(per_writer));
            auto fail = [&](const std::string &what) {
                errors[static_cast<size_t>(w)] = what + ": " + outbox_last_error();
            };
            do {
                if (outbox_config_new(&cfg) != OUTBOX_OK ||
                    outbox_config_set(cfg, "outbox.schema", run.schema.c_str()) != OUTBOX_OK ||
                    outbox_config_set(cfg, "relay.notify_channel", run.channel.c_str()) != OUTBOX_OK ||
                    outbox_config_set(cfg, "write.notify", notify ? "true" : "false") != OUTBOX_OK) {
                    fail("config");
                    break;
                }
                if (outbox_db_open(&db, run.pg_url.c_str(), cfg) != OUTBOX_OK) {
                    fail("outbox_db_open");
                    break;
                }
                if (outbox_event_new(&ev) != OUTBOX_OK || outbox_event_set(ev, "aggregate_type", "ORD") != OUTBOX_OK ||
                    outbox_event_set(ev, "operation", "POST") != OUTBOX_OK ||
                    outbox_event_set(ev, "payload", payload.c_str()) != OUTBOX_OK ||
                    outbox_event_set(ev, "metadata", Generator::metadata()) != OUTBOX_OK ||
                    outbox_event_set(ev, "user", Generator::user()) != OUTBOX_OK) {
                    fail("event");
                    break;
                }
                auto *pgc = static_cast<PGconn *>(outbox_db_pgconn(db));
                PGresult *prep = PQprepare(pgc, "bench_order", insert.c_str(), 3, nullptr);
                const bool prep_ok = PQresultStatus(prep) == PGRES_COMMAND_OK;
                PQclear(prep);
                if (!prep_ok) {
                    errors[static_cast<size_t>(w)] = std::string("prepare: ") + PQerrorMessage(pgc);
                    break;
                }
                ready.fetch_add(1);
                while (!go.load()) {
                    std::this_thread::yield();
                }
                char agg[48], customer[48];
                for (long i = 0; i < per_writer; ++i) {
                    std::snprintf(agg, sizeof agg, "%s%03d-%02d-%09ld", key.c_str(), slice, w, i);
                    std::snprintf(customer, sizeof customer, "c%02d-%09ld", w, i);
                    const auto t0 = Clock::now();
                    if (outbox_db_exec(db, "BEGIN") != OUTBOX_OK) {
                        fail("BEGIN");
                        break;
                    }
                    const char *vals[3] = {customer, "99.99", payload.c_str()};
                    PGresult *res = PQexecPrepared(pgc, "bench_order", 3, vals, nullptr, nullptr, 0);
                    const bool ok = PQresultStatus(res) == PGRES_COMMAND_OK;
                    PQclear(res);
                    if (!ok) {
                        errors[static_cast<size_t>(w)] = std::string("INSERT: ") + PQerrorMessage(pgc);
                        break;
                    }
                    if (mode != WMode::biz) {
                        if (outbox_event_set(ev, "aggregate_id", agg) != OUTBOX_OK) {
                            fail("aggregate_id");
                            break;
                        }
                        if (outbox_write(db, ev) != OUTBOX_OK) {
                            fail("outbox_write");
                            break;
                        }
                    }
                    if (outbox_db_exec(db, "COMMIT") != OUTBOX_OK) {
                        fail("COMMIT");
                        break;
                    }
                    my_lat.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
                    if (g_interrupted.load()) {
                        errors[static_cast<size_t>(w)] = "interrupted";
                        break;
                    }
                }
            } while (false);
            ends[static_cast<size_t>(w)] = Clock::now();
            if (!errors[static_cast<size_t>(w)].empty()) {
                ready.fetch_add(1); // never leave the starter waiting
            }
            outbox_event_free(ev);
            outbox_db_close(db);
            outbox_config_free(cfg);
        });
    }
    while (ready.load() < o.writers) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    const double cpu0 = cpu_seconds();
    const auto t0 = Clock::now();
    go.store(true);
    for (auto &th : threads) {
        th.join();
    }
    const double cpu = cpu_seconds() - cpu0;
    Clock::time_point t1 = t0;
    for (const auto &e : ends) {
        t1 = std::max(t1, e);
    }
    // Notifications are delivered at commit; give the listener a moment to drain the last ones.
    for (int k = 0; k < 40 && notify && notifications.load() < total; ++k) {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    stop_listener.store(true);
    listen_thread.join();
    for (const auto &e : errors) {
        if (!e.empty()) {
            die(key + ": writer failed: " + e);
        }
    }
    if (!listener_error.empty()) {
        die(key + ": listener failed: " + listener_error);
    }
    const long got = notifications.load();
    expect(run, notify ? got == total : got == 0,
           key + ": the listener received " + std::to_string(got) + " notification(s), expected " +
               std::to_string(notify ? total : 0));
    WSlice ws;
    ws.txns = total;
    ws.seconds = seconds_between(t0, t1);
    ws.cpu_s = cpu;
    for (auto &v : lat) {
        ws.latency_ms.insert(ws.latency_ms.end(), v.begin(), v.end());
    }
    return ws;
}

// ---------------------------------------------------------------------------------------------- output

std::string server_version(Pg &pg) {
    auto r = pg.query("SHOW server_version");
    return r->get(0, 0);
}

void print_table(const Run &run, const Options &o, const std::string &pg_version, double wall) {
    std::printf("\n## outbox relay benchmark\n\n");
    std::printf("| scenario | events | seconds | events/s | ratio | target |\n");
    std::printf("| --- | ---: | ---: | ---: | --- | --- |\n");
    for (const auto &r : run.rows) {
        std::printf("| %s: %s | %ld | %.2f | %.0f | %s | %s |\n", r.key.c_str(), r.what.c_str(), r.events, r.seconds,
                    r.rate(), r.ratio.empty() ? "" : r.ratio.c_str(), r.target.c_str());
    }
    std::printf("\n");
    std::printf("- message: %d-byte payload, %d-byte body, persistent, mandatory, routed to one durable %s "
                "queue; exchange %s\n",
                o.payload_bytes, run.body_bytes, o.queue_type.c_str(), run.exchange.c_str());
    std::printf("- peak RSS of the bench process: %.1f MiB\n", static_cast<double>(peak_rss_kib()) / 1024.0);
    std::string cpu;
    for (const auto &r : run.rows) {
        if (r.client_cpu_s >= 0 && r.events > 0) {
            cpu += (cpu.empty() ? "" : ", ") + r.key + " " +
                   fixed(r.client_cpu_s * 1e6 / static_cast<double>(r.events), 1) + " us/event";
        }
    }
    if (!cpu.empty()) {
        std::printf("- client CPU (this process, user+sys, during the timed part): %s\n", cpu.c_str());
    }
    for (const auto &n : run.notes) {
        std::printf("- %s\n", n.c_str());
    }
    utsname u{};
    uname(&u);
    std::printf("- liboutbox %s, PostgreSQL %s, librabbitmq %s, %s %s, %u CPUs, run took %.0f s\n", outbox_version(),
                pg_version.c_str(), amqp_version(), u.sysname, u.release, std::thread::hardware_concurrency(), wall);
    if (!run.failures.empty()) {
        std::printf("- **%zu check(s) FAILED** (see stderr): the figures are not to be trusted\n", run.failures.size());
    }
    std::fflush(stdout);
}


// The commit whose code this run measures: bench/run sets OUTBOX_SOURCE_REV (scripts/source_rev.sh).
std::string source_rev() {
    const char *rev = std::getenv("OUTBOX_SOURCE_REV");
    return rev != nullptr && *rev != '\0' ? rev : "unknown (run outside bench/run)";
}

// The report: every figure with its same-run baseline, ratio, target and verdict, then every row.
void write_md(const Run &run, const Options &o, const std::string &pg_version, double wall) {
    std::ostringstream m;
    char when[64];
    const time_t now = std::time(nullptr);
    tm u{};
    gmtime_r(&now, &u);
    std::strftime(when, sizeof when, "%Y-%m-%d %H:%M UTC", &u);
    utsname un{};
    uname(&un);
    m << "# outbox benchmark report (" << (o.quick ? "quick" : "full") << " run, " << when << ")\n\n";
    m << "Measured the code of commit " << source_rev() << ".\n\n";
    m << "Written by `bench/run` (bench/relay_bench). Every ratio is against a baseline measured in the same run, "
         "on the same servers. liboutbox "
      << outbox_version() << ", PostgreSQL " << pg_version << ", librabbitmq " << amqp_version() << ", " << un.sysname
      << " " << un.release << ", " << std::thread::hardware_concurrency() << " CPUs; the run took " << fixed(wall, 0)
      << " s. The bench queue is a durable " << o.queue_type << " queue; "
      << std::count(run.amqp_url.begin(), run.amqp_url.end(), ',') + 1
      << " RabbitMQ address(es) given (the baseline publishes through the first, where the relay connects "
         "first).\n\n";
    if (o.quick) {
        m << "**Quick mode: small sizes for checking the harness; these figures are not the project's figures.**\n\n";
    }
    if (!run.failures.empty()) {
        m << "**" << run.failures.size() << " self-check(s) FAILED: the figures are not to be trusted.**\n\n";
        for (const auto &f : run.failures) {
            m << "- " << f << "\n";
        }
        m << "\n";
    }
    int pass = 0, miss = 0;
    for (const auto &f : run.figures) {
        pass += f.verdict == "PASS" ? 1 : 0;
        miss += f.verdict == "MISS" ? 1 : 0;
    }
    m << "## Targets (" << pass << " PASS, " << miss << " MISS)\n\n";
    m << "| scenario | figure | value | baseline (same run) | ratio | target | verdict |\n";
    m << "| --- | --- | --- | --- | ---: | --- | --- |\n";
    // In the issue's order (1 drain ... 8 table health), whatever order the scenarios ran in.
    std::vector<Figure> figs = run.figures;
    std::stable_sort(figs.begin(), figs.end(),
                     [](const Figure &a, const Figure &b) { return a.section < b.section; });
    for (const auto &f : figs) {
        m << "| " << f.section << " | " << f.name << " | " << f.value << " | " << f.baseline << " | "
          << (f.ratio >= 0 ? fixed(f.ratio, f.ratio < 10 ? 2 : 1) : "") << " | " << f.target << " | "
          << (f.verdict == "MISS" ? "**MISS**" : f.verdict) << " |\n";
    }
    m << "\n## Every measurement\n\n";
    m << "| key | what | events | seconds | events/s | ratio | relay peak RSS |\n";
    m << "| --- | --- | ---: | ---: | ---: | --- | ---: |\n";
    for (const auto &r : run.rows) {
        m << "| " << r.key << " | " << r.what << " | " << r.events << " | " << fixed(r.seconds, 2) << " | "
          << fixed(r.rate(), 0) << " | " << r.ratio << " | "
          << (r.peak_rss_kib >= 0 ? fixed(static_cast<double>(r.peak_rss_kib) / 1024.0, 1) + " MiB" : "") << " |\n";
    }
    m << "\n## Notes\n\n";
    std::string ph;
    for (const auto &[name, secs] : run.phases) {
        ph += (ph.empty() ? "" : ", ") + name + " " + fixed(secs, 0) + " s";
    }
    if (!ph.empty()) {
        m << "- wall time per scenario (setup included): " << ph << "\n";
    }
    for (const auto &n : run.notes) {
        m << "- " << n << "\n";
    }
    m << "\n## Plots\n\n";
    const std::pair<const char *, const char *> plots[] = {
        {"sweep_batch", "throughput_vs_batch_window.png"},
        {"drain", "drain_vs_backlog.png"},
        {"latency", "latency_vs_load.png"},
        {"health", "table_health.png"},
    };
    for (const auto &[series, png] : plots) {
        if (run.series.count(series) != 0) {
            m << "![" << png << "](" << png << ")\n\n";
        }
    }
    const std::string tmp = o.md_file + ".tmp";
    {
        std::ofstream f(tmp);
        f << m.str();
        if (!f) {
            die("cannot write " + tmp);
        }
    }
    if (std::rename(tmp.c_str(), o.md_file.c_str()) != 0) {
        die("cannot rename " + tmp + " to " + o.md_file);
    }
    progress("report written to " + o.md_file);
}

void write_json(const Run &run, const Options &o, const std::string &pg_version, double wall) {
    std::ostringstream j;
    j << "{\n  \"tool\": \"bench/relay_bench\",\n";
    char when[64];
    const time_t now = std::time(nullptr);
    tm u{};
    gmtime_r(&now, &u);
    std::strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &u);
    j << "  \"time\": " << json_str(when) << ",\n";
    j << "  \"mode\": " << json_str(o.quick ? "quick" : "full") << ",\n";
    j << "  \"source_rev\": " << json_str(source_rev()) << ",\n";
    j << "  \"params\": {\"events\": " << o.events << ", \"payload_bytes\": " << o.payload_bytes
      << ", \"body_bytes\": " << run.body_bytes << ", \"window\": " << o.window << ", \"batch_size\": " << o.batch_size
      << ", \"per_aggregate\": " << o.per_aggregate << ", \"seed_events\": " << o.seed_events
      << ", \"w1_events\": " << o.w1_events << ", \"writers\": " << o.writers << ", \"writes\": " << o.writes
      << ", \"w_slices\": " << o.w_slices << ", \"w_payload_bytes\": " << o.w_payload_bytes
      << ", \"drain_sizes\": " << json_list(std::vector<double>(o.drain_sizes.begin(), o.drain_sizes.end()), 0)
      << ", \"sweep_events\": " << o.sweep_events << ", \"scale_events\": " << o.scale_events
      << ", \"scale_per_aggregate\": " << o.scale_per_aggregate << ", \"latency_seconds\": " << fixed(o.latency_seconds, 1)
      << ", \"health_minutes\": " << fixed(o.health_minutes, 2) << ", \"health_age_s\": " << o.health_age_s
      << "},\n";
    utsname un{};
    uname(&un);
    j << "  \"env\": {\"liboutbox\": " << json_str(outbox_version()) << ", \"postgresql\": " << json_str(pg_version)
      << ", \"librabbitmq\": " << json_str(amqp_version()) << ", \"kernel\": " << json_str(un.release)
      << ", \"cpus\": " << std::thread::hardware_concurrency() << "},\n";
    j << "  \"scenarios\": [\n";
    for (size_t k = 0; k < run.rows.size(); ++k) {
        const Row &r = run.rows[k];
        j << "    {\"key\": " << json_str(r.key) << ", \"what\": " << json_str(r.what) << ", \"events\": " << r.events
          << ", \"seconds\": " << fixed(r.seconds, 4) << ", \"events_per_s\": " << fixed(r.rate(), 1);
        if (r.ratio_value >= 0) {
            j << ", \"ratio\": " << fixed(r.ratio_value, 4) << ", \"ratio_label\": " << json_str(r.ratio);
        }
        if (!r.target.empty()) {
            j << ", \"target\": " << json_str(r.target);
        }
        if (r.client_cpu_s >= 0) {
            j << ", \"client_cpu_s\": " << fixed(r.client_cpu_s, 3);
        }
        if (r.peak_rss_kib >= 0) {
            j << ", \"relay_peak_rss_kib\": " << r.peak_rss_kib;
        }
        if (!r.extra_json.empty()) {
            j << ", " << r.extra_json;
        }
        j << "}" << (k + 1 < run.rows.size() ? "," : "") << "\n";
    }
    j << "  ],\n";
    j << "  \"figures\": [\n";
    for (size_t k = 0; k < run.figures.size(); ++k) {
        const Figure &f = run.figures[k];
        j << "    {\"section\": " << json_str(f.section) << ", \"name\": " << json_str(f.name)
          << ", \"value\": " << json_str(f.value) << ", \"baseline\": " << json_str(f.baseline);
        if (f.ratio >= 0) {
            j << ", \"ratio\": " << fixed(f.ratio, 4);
        }
        j << ", \"target\": " << json_str(f.target) << ", \"verdict\": " << json_str(f.verdict) << "}"
          << (k + 1 < run.figures.size() ? "," : "") << "\n";
    }
    j << "  ],\n";
    j << "  \"series\": {";
    bool first_series = true;
    for (const auto &[name, value] : run.series) {
        j << (first_series ? "\n    " : ",\n    ") << json_str(name) << ": " << value;
        first_series = false;
    }
    j << "\n  },\n";
    j << "  \"notes\": [";
    for (size_t k = 0; k < run.notes.size(); ++k) {
        j << (k > 0 ? ", " : "") << json_str(run.notes[k]);
    }
    j << "],\n";
    j << "  \"failures\": [";
    for (size_t k = 0; k < run.failures.size(); ++k) {
        j << (k > 0 ? ", " : "") << json_str(run.failures[k]);
    }
    j << "],\n";
    j << "  \"scenario_seconds\": {";
    for (size_t k = 0; k < run.phases.size(); ++k) {
        j << (k > 0 ? ", " : "") << json_str(run.phases[k].first) << ": " << fixed(run.phases[k].second, 1);
    }
    j << "},\n";
    j << "  \"peak_rss_kib\": " << peak_rss_kib() << ",\n";
    j << "  \"wall_seconds\": " << fixed(wall, 1) << "\n}\n";
    const std::string tmp = o.json_file + ".tmp";
    {
        std::ofstream f(tmp);
        f << j.str();
        if (!f) {
            die("cannot write " + tmp);
        }
    }
    if (std::rename(tmp.c_str(), o.json_file.c_str()) != 0) {
        die("cannot rename " + tmp + " to " + o.json_file);
    }
    progress("figures written to " + o.json_file);
}

// ---------------------------------------------------------------------------------------------- main

// ---------------------------------------------------------------------------------------------- C

// One consumer draining `count` messages: per message BEGIN [+ dedupe], one effect row, COMMIT, ack.
Row run_consumer(Run &run, const std::string &name, long count, bool dedupe) {
    outbox_config *cfg = nullptr;
    outbox_config_new(&cfg);
    outbox_config_set(cfg, "amqp.url", run.amqp_url.c_str());
    outbox_config_set(cfg, "amqp.exchange", run.exchange.c_str());
    outbox_config_set(cfg, "outbox.schema", run.schema.c_str());
    outbox_config_set(cfg, "consumer.queue_type", "classic");
    outbox_config_set(cfg, "consumer.prefetch", "256");
    outbox_db *db = nullptr;
    outbox_consumer *c = nullptr;
    if (outbox_db_open(&db, run.pg_url.c_str(), cfg) != OUTBOX_OK ||
        outbox_consumer_new(&c, cfg, name.c_str()) != OUTBOX_OK ||
        outbox_migrate(nullptr, db, OUTBOX_MIGRATE_INBOX) != OUTBOX_OK) {
        throw std::runtime_error(std::string("C: ") + outbox_last_error());
    }
    const std::string effect = "INSERT INTO \"" + run.schema + "\".bench_effects (consumer, outbox_id) VALUES ($1, $2)";
    auto *pg = static_cast<PGconn *>(outbox_db_pgconn(db));
    long handled = 0;
    const double cpu0 = cpu_seconds();
    const auto t0 = Clock::now();
    while (handled < count) {
        check_interrupt();
        outbox_message *m = nullptr;
        outbox_status st = outbox_consumer_next(&m, c, 5000);
        if (st != OUTBOX_OK) {
            throw std::runtime_error("C: " + name + " got " + std::to_string(handled) + " of " +
                                     std::to_string(count) + ": " + outbox_last_error());
        }
        bool first = true;
        if (dedupe) {
            // The library's fast path: BEGIN and the dedupe statement in one round trip.
            outbox_dedupe_result r;
            outbox_dedupe_result_init(&r);
            if (outbox_consumer_begin(&r, db, c, m) != OUTBOX_OK) {
                throw std::runtime_error(std::string("C: dedupe: ") + outbox_last_error());
            }
            first = r.first_time != 0;
        } else {
            outbox_db_exec(db, "BEGIN");
        }
        if (first) {
            const char *vals[] = {name.c_str(), outbox_message_field(m, "OUTBOX_ID")};
            PQclear(PQexecParams(pg, effect.c_str(), 2, nullptr, vals, nullptr, nullptr, 0));
        }
        if (outbox_db_exec(db, "COMMIT") != OUTBOX_OK || outbox_consumer_ack(c, m) != OUTBOX_OK) {
            throw std::runtime_error(std::string("C: ") + outbox_last_error());
        }
        outbox_message_free(m);
        ++handled;
    }
    Row r;
    r.seconds = seconds_between(t0, Clock::now());
    r.client_cpu_s = cpu_seconds() - cpu0;
    r.events = handled;
    outbox_consumer_free(c);
    outbox_db_close(db);
    outbox_config_free(cfg);
    return r;
}

// ---------------------------------------------------------------------------------------------- shared

// Empties the outbox and its counter table, so each backlog starts on a table of its own size.
void reset_outbox(Pg &pg, const Run &run) {
    pg.exec("TRUNCATE \"" + run.schema + "\".outbox, \"" + run.schema + "\".outbox_aggregates");
}

// Writer threads for L and H: each with its own connection, one event per transaction (BEGIN,
// outbox_write, COMMIT), paced so that event k starts at t0 + k / rate (open loop: a writer that
// falls behind does not sleep), or unpaced (rate 0) until `seconds` have passed. Event k gets
// aggregate id id_of(k); the steady-clock time after its COMMIT returned goes to commit_ns[k].
struct PacedWrites {
    long written = 0;
    double seconds = 0; // first start to last commit
    std::vector<int64_t> commit_ns;
};

int64_t now_ns() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count();
}

template <class IdOf>
PacedWrites paced_writes(const Run &run, const Options &o, bool notify, double rate, double seconds, long cap,
                         IdOf id_of) {
    PacedWrites pw;
    pw.commit_ns.assign(static_cast<size_t>(cap), 0);
    std::vector<std::string> errors(static_cast<size_t>(o.writers));
    std::atomic<int> ready{0};
    std::atomic<bool> go{false};
    Clock::time_point t0{};
    Clock::time_point deadline{};
    Generator pl;
    pl.payload_bytes = o.w_payload_bytes;
    std::string payload;
    pl.payload(payload, 0);
    std::vector<std::thread> threads;
    for (int w = 0; w < o.writers; ++w) {
        threads.emplace_back([&, w] {
            outbox_config *cfg = nullptr;
            outbox_db *db = nullptr;
            outbox_event *ev = nullptr;
            auto &err = errors[static_cast<size_t>(w)];
            do {
                if (outbox_config_new(&cfg) != OUTBOX_OK ||
                    outbox_config_set(cfg, "outbox.schema", run.schema.c_str()) != OUTBOX_OK ||
                    outbox_config_set(cfg, "relay.notify_channel", run.channel.c_str()) != OUTBOX_OK ||
                    outbox_config_set(cfg, "write.notify", notify ? "true" : "false") != OUTBOX_OK ||
                    outbox_db_open(&db, run.pg_url.c_str(), cfg) != OUTBOX_OK || outbox_event_new(&ev) != OUTBOX_OK ||
                    outbox_event_set(ev, "aggregate_type", "PRD") != OUTBOX_OK ||
                    outbox_event_set(ev, "operation", "PUT") != OUTBOX_OK ||
                    outbox_event_set(ev, "payload", payload.c_str()) != OUTBOX_OK) {
                    err = std::string("writer setup: ") + outbox_last_error();
                    break;
                }
                ready.fetch_add(1);
                while (!go.load()) {
                    std::this_thread::yield();
                }
                std::string agg;
                for (long k = w; k < cap; k += o.writers) {
                    if (rate > 0) {
                        std::this_thread::sleep_until(
                            t0 + std::chrono::nanoseconds(static_cast<int64_t>(static_cast<double>(k) * 1e9 / rate)));
                    } else if (Clock::now() >= deadline) {
                        break;
                    }
                    id_of(agg, k);
                    if (outbox_event_set(ev, "aggregate_id", agg.c_str()) != OUTBOX_OK ||
                        outbox_db_exec(db, "BEGIN") != OUTBOX_OK || outbox_write(db, ev) != OUTBOX_OK ||
                        outbox_db_exec(db, "COMMIT") != OUTBOX_OK) {
                        err = std::string("write: ") + outbox_last_error();
                        break;
                    }
                    pw.commit_ns[static_cast<size_t>(k)] = now_ns();
                    if (g_interrupted.load()) {
                        err = "interrupted";
                        break;
                    }
                }
            } while (false);
            if (!err.empty()) {
                ready.fetch_add(1);
            }
            outbox_event_free(ev);
            outbox_db_close(db);
            outbox_config_free(cfg);
        });
    }
    while (ready.load() < o.writers) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    t0 = Clock::now() + std::chrono::milliseconds(20);
    deadline = t0 + std::chrono::nanoseconds(static_cast<int64_t>(seconds * 1e9));
    go.store(true);
    for (auto &t : threads) {
        t.join();
    }
    for (const auto &e : errors) {
        if (!e.empty()) {
            die("writer failed: " + e);
        }
    }
    int64_t first = INT64_MAX, last = 0;
    for (long k = 0; k < cap; ++k) {
        const int64_t c = pw.commit_ns[static_cast<size_t>(k)];
        if (c != 0) {
            ++pw.written;
            last = std::max(last, c);
        }
    }
    first = std::chrono::duration_cast<std::chrono::nanoseconds>(t0.time_since_epoch()).count();
    pw.seconds = pw.written > 0 ? static_cast<double>(last - first) / 1e9 : 0;
    return pw;
}

// ---------------------------------------------------------------------------------------------- X

// Scale-out: 1, 2, 4 `outbox relay` daemons drain one backlog of events spread K per aggregate;
// afterwards the whole queue is consumed and, per aggregate, the first delivery of each seq must
// come in seq order with nothing missing.
void run_scale(Run &run, const Options &o, Pg &pg, Amqp &admin, const Generator &base) {
    const std::string table = "\"" + run.schema + "\".outbox";
    const std::string aggregates = "\"" + run.schema + "\".outbox_aggregates";
    const Row *b = find_row(run, "B");
    double rate1 = -1;
    std::string series = "[";
    for (long k : o.scale_relays) {
        reset_outbox(pg, run);
        Generator g = base;
        g.code = static_cast<uint16_t>(0x0100 + k);
        g.prefix = 'x';
        g.count = o.scale_events;
        g.aggregates = std::max(1L, o.scale_events / o.scale_per_aggregate);
        progress("X-" + std::to_string(k) + ": loading a backlog of " + std::to_string(g.count) + " events over " +
                 std::to_string(g.aggregates) + " aggregates");
        load_backlog(pg, table, aggregates, g);
        progress("X-" + std::to_string(k) + ": " + std::to_string(k) + " `outbox relay` process(es) draining it");
        std::vector<std::unique_ptr<Daemon>> ds;
        const auto t0 = Clock::now();
        for (long i = 0; i < k; ++i) {
            ds.push_back(start_counting_daemon(run, "bench-x" + std::to_string(k) + "-" + std::to_string(i), {}));
        }
        long done = 0, last_done = -1;
        auto last_progress = Clock::now();
        std::string trouble;
        while (trouble.empty()) {
            std::this_thread::sleep_for(std::chrono::milliseconds(5));
            done = 0;
            for (auto &d : ds) {
                done += d->published.load();
                if (!daemon_alive(*d)) {
                    trouble = d->name + " exited: " + d->tail;
                }
            }
            if (done >= g.count) {
                break;
            }
            if (done != last_done) {
                last_done = done;
                last_progress = Clock::now();
            } else if (seconds_between(last_progress, Clock::now()) > 60) {
                trouble = "no progress for 60 s at " + std::to_string(done) + " of " + std::to_string(g.count);
            }
            if (g_interrupted.load()) {
                trouble = "interrupted";
            }
        }
        int64_t end_ns = 0;
        for (auto &d : ds) {
            end_ns = std::max(end_ns, d->last_ns.load());
        }
        const double secs = static_cast<double>(end_ns - std::chrono::duration_cast<std::chrono::nanoseconds>(
                                                             t0.time_since_epoch())
                                                             .count()) /
                            1e9;
        std::vector<double> rss;
        long max_rss = 0;
        for (auto &d : ds) {
            ProcExit e = stop_daemon(*d);
            rss.push_back(static_cast<double>(e.maxrss_kib) / 1024.0);
            max_rss = std::max(max_rss, e.maxrss_kib);
            expect(run, e.status == 0, d->name + ": exited with status 0 on SIGTERM (" + std::to_string(e.status) + ")");
        }
        if (!trouble.empty()) {
            die("X-" + std::to_string(k) + ": " + trouble);
        }
        auto res = pg.query("SELECT count(*) FILTER (WHERE status = 'PUBLISHED'), count(*) FROM " + table);
        expect(run, res->get_ll(0, 0) == g.count,
               "X-" + std::to_string(k) + ": all " + std::to_string(g.count) + " rows PUBLISHED (" + res->get(0, 0) +
                   ")");
        // The order check, over everything in the queue.
        std::vector<int64_t> last(static_cast<size_t>(g.aggregates), 0);
        long received = 0, dups = 0, out_of_order = 0, foreign = 0;
        {
            Amqp c(run.amqp_url, 0);
            c.consume(run.queue);
            Amqp::Delivery dv;
            while (c.next(dv, received < g.count ? 10000 : 300)) {
                ++received;
                const long a = dv.aggregate_id.size() > 1 && dv.aggregate_id[0] == 'x'
                                   ? std::strtol(dv.aggregate_id.c_str() + 1, nullptr, 10)
                                   : -1;
                if (a < 0 || a >= g.aggregates || dv.seq < 1) {
                    ++foreign;
                    continue;
                }
                int64_t &l = last[static_cast<size_t>(a)];
                if (dv.seq == l + 1) {
                    l = dv.seq;
                } else if (dv.seq <= l) {
                    ++dups;
                } else {
                    ++out_of_order;
                    l = dv.seq;
                }
            }
        }
        long missing = 0;
        for (long a = 0; a < g.aggregates; ++a) {
            const int64_t want = (g.count - a + g.aggregates - 1) / g.aggregates;
            if (last[static_cast<size_t>(a)] != want) {
                ++missing;
            }
        }
        const bool order_ok = out_of_order == 0 && missing == 0 && foreign == 0 && received >= g.count;
        expect(run, order_ok,
               "X-" + std::to_string(k) + ": per-aggregate order (received " + std::to_string(received) + ", " +
                   std::to_string(out_of_order) + " out of order, " + std::to_string(missing) +
                   " aggregates incomplete, " + std::to_string(foreign) + " unexpected, " + std::to_string(dups) +
                   " duplicates)");
        Row r;
        r.key = "X-" + std::to_string(k);
        r.what = std::to_string(k) + " `outbox relay` process(es) draining one table (" +
                 std::to_string(o.scale_per_aggregate) + " events/aggregate)";
        r.events = g.count;
        r.seconds = secs;
        r.peak_rss_kib = max_rss;
        r.extra_json = "\"relays\": " + std::to_string(k) + ", \"relay_peak_rss_mib\": " + json_list(rss, 1) +
                       ", \"order_ok\": " + (order_ok ? "true" : "false") + ", \"received\": " +
                       std::to_string(received) + ", \"duplicates\": " + std::to_string(dups);
        Figure f;
        f.section = "3 scale-out";
        f.name = std::to_string(k) + " relay(s): throughput, order check " + (order_ok ? "passed" : "FAILED");
        f.value = rate_str(r.rate());
        if (k == o.scale_relays.front() && b != nullptr) {
            rate1 = r.rate();
            f.baseline = "B " + rate_str(b->rate());
            f.ratio = r.rate() / b->rate();
        } else if (rate1 > 0) {
            f.baseline = std::to_string(o.scale_relays.front()) + " relay(s) " + rate_str(rate1);
            f.ratio = r.rate() / rate1;
        }
        if (k == o.scale_relays.front() && rate1 < 0) {
            rate1 = r.rate();
        }
        r.ratio_value = f.ratio;
        r.ratio = f.ratio >= 0 ? "ratio " + fixed(f.ratio, 2) : "";
        f.target = "order check passes";
        f.verdict = order_ok ? "PASS" : "MISS";
        series += std::string(series.size() > 1 ? ", " : "") + "{\"relays\": " + std::to_string(k) +
                  ", \"events_per_s\": " + fixed(r.rate(), 1) + ", \"order_ok\": " + (order_ok ? "true" : "false") +
                  "}";
        run.rows.push_back(r);
        add_figure(run, f);
        admin.purge(run.queue);
    }
    run.series["scale"] = series + "]";
    reset_outbox(pg, run);
}

// ---------------------------------------------------------------------------------------------- L

// A plain consumer on the bench queue recording when each event arrived, by the index in its
// aggregate id ("l<index>").
struct ArrivalRecorder {
    std::mutex mu;
    std::vector<std::pair<long, int64_t>> got; // (index, steady ns)
    std::atomic<bool> stop{false};
    std::string error;
    std::thread th;

    void start(const Run &run) {
        th = std::thread([this, url = run.amqp_url, queue = run.queue] {
            try {
                Amqp c(url, 0);
                c.consume(queue);
                Amqp::Delivery d;
                while (!stop.load()) {
                    if (!c.next(d, 100)) {
                        continue;
                    }
                    const int64_t t = now_ns();
                    if (d.aggregate_id.size() > 1 && d.aggregate_id[0] == 'l') {
                        const long idx = std::strtol(d.aggregate_id.c_str() + 1, nullptr, 10);
                        std::lock_guard<std::mutex> lk(mu);
                        got.emplace_back(idx, t);
                    }
                }
            } catch (const std::exception &e) {
                error = e.what();
            }
        });
    }
    std::vector<std::pair<long, int64_t>> take() {
        std::lock_guard<std::mutex> lk(mu);
        std::vector<std::pair<long, int64_t>> out;
        out.swap(got);
        return out;
    }
    void finish() {
        stop.store(true);
        if (th.joinable()) {
            th.join();
        }
    }
};

struct LatPoint {
    std::string mode;
    double load = 0, offered = 0, achieved = 0;
    long written = 0, received = 0;
    double p50 = 0, p99 = 0, p999 = 0, max = 0;
};

// One load point: paced writes of events base..base+n, then wait until the consumer saw them all.
LatPoint latency_point(Run &run, const Options &o, ArrivalRecorder &rec, const std::string &mode, bool notify,
                       double load, double rate, double seconds, long &base) {
    const long cap = rate > 0 ? static_cast<long>(rate * seconds) : static_cast<long>(seconds * 50000);
    const long b0 = base;
    base += cap;
    rec.take(); // anything left over belongs to earlier points
    PacedWrites pw = paced_writes(run, o, notify, rate, seconds, cap, [b0](std::string &out, long k) {
        char buf[32];
        std::snprintf(buf, sizeof buf, "l%010ld", b0 + k);
        out.assign(buf);
    });
    std::vector<int64_t> recv(static_cast<size_t>(cap), 0);
    long received = 0;
    const auto wait0 = Clock::now();
    while (received < pw.written && seconds_between(wait0, Clock::now()) < 30 && rec.error.empty()) {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
        for (const auto &[idx, t] : rec.take()) {
            const long k = idx - b0;
            if (k >= 0 && k < cap && recv[static_cast<size_t>(k)] == 0) {
                recv[static_cast<size_t>(k)] = t;
                ++received;
            }
        }
    }
    if (!rec.error.empty()) {
        die("L: consumer: " + rec.error);
    }
    std::vector<double> lat;
    lat.reserve(static_cast<size_t>(received));
    for (long k = 0; k < cap; ++k) {
        if (recv[static_cast<size_t>(k)] != 0 && pw.commit_ns[static_cast<size_t>(k)] != 0) {
            lat.push_back(static_cast<double>(recv[static_cast<size_t>(k)] - pw.commit_ns[static_cast<size_t>(k)]) /
                          1e6);
        }
    }
    LatPoint p;
    p.mode = mode;
    p.load = load;
    p.offered = rate;
    p.written = pw.written;
    p.received = received;
    p.achieved = pw.seconds > 0 ? static_cast<double>(pw.written) / pw.seconds : 0;
    p.p50 = percentile(lat, 50);
    p.p99 = percentile(lat, 99);
    p.p999 = percentile(lat, 99.9);
    p.max = lat.empty() ? 0 : *std::max_element(lat.begin(), lat.end());
    expect(run, received == pw.written,
           "L " + mode + " at " + fixed(load * 100, 0) + "%: every committed event reached the consumer (" +
               std::to_string(received) + " of " + std::to_string(pw.written) + ")");
    progress("L " + mode + " at " + (load > 0 ? fixed(load * 100, 0) + "%" : std::string("max")) + ": " +
             fixed(p.achieved, 0) + " events/s written, p50 " + fixed(p.p50, 2) + " ms, p99 " + fixed(p.p99, 2) +
             " ms, p99.9 " + fixed(p.p999, 2) + " ms");
    return p;
}

void run_latency(Run &run, const Options &o, Pg &pg) {
    reset_outbox(pg, run);
    pg.exec("CHECKPOINT");
    ArrivalRecorder rec;
    rec.start(run);
    long base = 0;
    auto daemon = start_daemon(run, "bench-latency", {});
    std::vector<LatPoint> points;
    struct Stop {
        ArrivalRecorder &rec;
        std::unique_ptr<Daemon> &d;
        ~Stop() {
            rec.finish();
            if (d) {
                stop_daemon(*d);
            }
        }
    } stop{rec, daemon};
    std::this_thread::sleep_for(std::chrono::milliseconds(300)); // the relay connects
    progress("L: maximum rate: " + std::to_string(o.writers) + " unpaced writers for " +
             fixed(o.latency_max_seconds, 0) + " s, with the relay daemon (defaults) and a consumer running");
    LatPoint mx = latency_point(run, o, rec, "notify off", false, 0, 0, o.latency_max_seconds, base);
    run.max_rate = mx.achieved;
    Row rm;
    rm.key = "L-max";
    rm.what = "maximum end-to-end rate: " + std::to_string(o.writers) +
              " unpaced writers (one event per transaction), relay daemon, consumer";
    rm.events = mx.written;
    rm.seconds = mx.written / std::max(1.0, mx.achieved);
    run.rows.push_back(rm);
    for (double load : o.latency_loads) {
        for (int notify = 0; notify < 2; ++notify) {
            std::this_thread::sleep_for(std::chrono::milliseconds(300));
            points.push_back(latency_point(run, o, rec, notify ? "notify on" : "notify off", notify != 0, load,
                                           load * run.max_rate, o.latency_seconds, base));
            require_alive(*daemon);
        }
    }
    // Which setting reaches p50 <= 5 ms without writer-side NOTIFY: a short polling interval.
    if (o.latency_poll_diag) {
        stop_daemon(*daemon);
        daemon = start_daemon(run, "bench-latency-poll5", {"--poll-interval-ms", "5"});
        std::this_thread::sleep_for(std::chrono::milliseconds(300));
        points.push_back(latency_point(run, o, rec, "notify off, poll 5 ms", false, 0.5, 0.5 * run.max_rate,
                                       o.latency_seconds, base));
        require_alive(*daemon);
    }
    std::string series = "[";
    for (const auto &p : points) {
        series += std::string(series.size() > 1 ? ", " : "") + "{\"mode\": " + json_str(p.mode) +
                  ", \"load\": " + fixed(p.load, 2) + ", \"offered_per_s\": " + fixed(p.offered, 1) +
                  ", \"achieved_per_s\": " + fixed(p.achieved, 1) + ", \"written\": " + std::to_string(p.written) +
                  ", \"received\": " + std::to_string(p.received) + ", \"p50_ms\": " + fixed(p.p50, 3) +
                  ", \"p99_ms\": " + fixed(p.p99, 3) + ", \"p999_ms\": " + fixed(p.p999, 3) +
                  ", \"max_ms\": " + fixed(p.max, 3) + "}";
        Row r;
        r.key = "L-" + std::string(p.mode == "notify on" ? "on" : (p.mode == "notify off" ? "off" : "poll5")) + "-" +
                fixed(p.load * 100, 0);
        r.what = "latency COMMIT -> consumer, " + p.mode + ", " + fixed(p.load * 100, 0) + "% of max (" +
                 fixed(p.offered, 0) + "/s offered): p50 " + fixed(p.p50, 2) + " ms, p99 " + fixed(p.p99, 2) +
                 " ms, p99.9 " + fixed(p.p999, 2) + " ms";
        r.events = p.written;
        r.seconds = p.achieved > 0 ? static_cast<double>(p.written) / p.achieved : 0;
        r.extra_json = "\"p50_ms\": " + fixed(p.p50, 3) + ", \"p99_ms\": " + fixed(p.p99, 3) +
                       ", \"p999_ms\": " + fixed(p.p999, 3) + ", \"max_ms\": " + fixed(p.max, 3) +
                       ", \"load\": " + fixed(p.load, 2) + ", \"offered_per_s\": " + fixed(p.offered, 1);
        run.rows.push_back(r);
        if (p.load == 0.5) {
            Figure f50, f99;
            f50.section = f99.section = "4 latency";
            f50.name = "p50 at 50% load, " + p.mode;
            f50.value = fixed(p.p50, 2) + " ms";
            f50.target = "≤ 5 ms";
            f50.verdict = verdict(p.p50 <= 5);
            f99.name = "p99 at 50% load, " + p.mode;
            f99.value = fixed(p.p99, 2) + " ms";
            f99.target = "≤ 25 ms";
            f99.verdict = verdict(p.p99 <= 25);
            f50.baseline = f99.baseline = "max rate " + rate_str(run.max_rate) + " (same run)";
            add_figure(run, f50);
            add_figure(run, f99);
        }
    }
    run.series["latency"] = series + "]";
    run.notes.push_back("L: writers pace commits at 25/50/80% of the maximum rate measured first (" +
                        rate_str(run.max_rate) +
                        ": unpaced writers with the relay daemon and a consumer running); latency is from COMMIT "
                        "returning in the writer to the consumer (a plain AMQP consumer in the same process, same "
                        "monotonic clock) receiving the message. The relay is `outbox relay` with its defaults "
                        "(relay.listen=true, relay.poll_interval_ms=1000); \"notify on\" sets write.notify=true in "
                        "the writers, \"poll 5 ms\" runs the relay with --poll-interval-ms 5 instead");
    reset_outbox(pg, run);
}

// ---------------------------------------------------------------------------------------------- H

struct TableSample {
    double t = 0;
    std::map<std::string, std::array<long long, 3>> tables; // name -> size bytes, live, dead
};

void run_health(Run &run, const Options &o, Pg &pg, Amqp &admin) {
    const double seconds = o.health_minutes * 60;
    reset_outbox(pg, run);
    // The bench queue would only pile up messages nobody reads: unbind it for the duration.
    admin.unbind(run.queue, run.exchange);
    const std::string cname = "bench-health-" + run.exchange;
    outbox_config *ccfg = nullptr;
    outbox_config_new(&ccfg);
    const std::string age = std::to_string(o.health_age_s);
    const std::pair<const char *, std::string> settings[] = {
        {"amqp.url", run.amqp_url},         {"amqp.exchange", run.exchange},  {"outbox.schema", run.schema},
        {"consumer.queue_type", "classic"}, {"consumer.prefetch", "256"},     {"inbox.retention_s", age},
        {"relay.notify_channel", run.channel}};
    for (const auto &[k, v] : settings) {
        if (outbox_config_set(ccfg, k, v.c_str()) != OUTBOX_OK) {
            die(std::string("H: config ") + k + ": " + outbox_last_error());
        }
    }
    outbox_db *admin_db = nullptr;
    if (outbox_db_open(&admin_db, run.pg_url.c_str(), ccfg) != OUTBOX_OK ||
        outbox_migrate(nullptr, admin_db, OUTBOX_MIGRATE_INBOX) != OUTBOX_OK) {
        die(std::string("H: ") + outbox_last_error());
    }
    {
        outbox_consumer *c = nullptr;
        if (outbox_consumer_new(&c, ccfg, cname.c_str()) != OUTBOX_OK || outbox_consumer_connect(c) != OUTBOX_OK) {
            die(std::string("H: consumer: ") + outbox_last_error());
        }
        outbox_consumer_free(c);
    }
    auto daemon = start_daemon(run, "bench-health", {});
    std::atomic<bool> stop_consumer{false}, stop_purge{false};
    std::atomic<long> handled{0};
    std::atomic<long long> purged_outbox{0}, purged_inbox{0};
    std::string consumer_error, purge_error;
    std::mutex consumer_mu;
    std::atomic<bool> consumer_failed{false};
    auto consumer_fail = [&](const std::string &msg) {
        std::lock_guard<std::mutex> lock(consumer_mu);
        if (consumer_error.empty()) {
            consumer_error = msg;
        }
        consumer_failed.store(true);
    };
    // Two competing consumers of the one queue (same consumer name, so one inbox): a single one
    // handling one transaction per event falls behind 50% of the relay's rate on 2 cores.
    auto consume = [&] {
        outbox_db *db = nullptr;
        outbox_consumer *c = nullptr;
        if (outbox_db_open(&db, run.pg_url.c_str(), ccfg) != OUTBOX_OK ||
            outbox_consumer_new(&c, ccfg, cname.c_str()) != OUTBOX_OK) {
            consumer_fail(outbox_last_error());
        }
        while (!consumer_failed.load() && !stop_consumer.load()) {
            outbox_message *m = nullptr;
            const outbox_status st = outbox_consumer_next(&m, c, 200);
            if (st == OUTBOX_ERR_TIMEOUT) {
                continue;
            }
            outbox_dedupe_result r;
            outbox_dedupe_result_init(&r);
            if (st != OUTBOX_OK || outbox_consumer_begin(&r, db, c, m) != OUTBOX_OK ||
                outbox_db_exec(db, "COMMIT") != OUTBOX_OK || outbox_consumer_ack(c, m) != OUTBOX_OK) {
                consumer_fail(outbox_last_error());
            }
            outbox_message_free(m);
            handled.fetch_add(1);
        }
        outbox_consumer_free(c);
        outbox_db_close(db);
    };
    std::thread consumer([&] {
        std::thread second(consume);
        consume();
        second.join();
    });
    std::thread purger([&] {
        outbox_db *db = nullptr;
        if (outbox_db_open(&db, run.pg_url.c_str(), ccfg) != OUTBOX_OK) {
            purge_error = outbox_last_error();
            return;
        }
        auto next = Clock::now();
        while (!stop_purge.load() && purge_error.empty()) {
            next += std::chrono::milliseconds(static_cast<int64_t>(o.health_purge_s * 1000));
            while (!stop_purge.load() && Clock::now() < next) {
                std::this_thread::sleep_for(std::chrono::milliseconds(50));
            }
            int64_t n1 = 0, n2 = 0;
            if (outbox_purge_published(&n1, db, o.health_age_s, 5000) != OUTBOX_OK ||
                outbox_inbox_purge(&n2, db, o.health_age_s, 5000) != OUTBOX_OK) {
                purge_error = outbox_last_error();
            }
            purged_outbox.fetch_add(n1);
            purged_inbox.fetch_add(n2);
        }
        outbox_db_close(db);
    });
    struct Stop {
        std::atomic<bool> &a, &b;
        std::thread &c, &p;
        std::unique_ptr<Daemon> &d;
        ~Stop() {
            a.store(true);
            b.store(true);
            if (c.joinable()) {
                c.join();
            }
            if (p.joinable()) {
                p.join();
            }
            if (d) {
                stop_daemon(*d);
            }
        }
    } stopper{stop_consumer, stop_purge, consumer, purger, daemon};

    const long aggs = o.health_aggregates;
    auto id_of = [aggs](std::string &out, long k) {
        char buf[32];
        std::snprintf(buf, sizeof buf, "h%07ld", k % aggs);
        out.assign(buf);
    };
    double rate = run.max_rate > 0 ? 0.5 * run.max_rate : -1;
    if (rate < 0) {
        progress("H: measuring the maximum rate (3 s unpaced)");
        PacedWrites mx = paced_writes(run, o, false, 0, 3, 300000, id_of);
        rate = 0.5 * static_cast<double>(mx.written) / std::max(0.001, mx.seconds);
    }
    progress("H: " + fixed(seconds / 60, 1) + " min at " + rate_str(rate) + " (50% load), relay daemon, consumer with "
             "dedupe, purges of events and inbox rows older than " + age + " s every " + fixed(o.health_purge_s, 0) +
             " s; sampling every " + fixed(o.health_sample_s, 0) + " s");
    std::vector<TableSample> samples;
    std::atomic<bool> writing{true};
    PacedWrites pw;
    std::thread writer([&] {
        try {
            pw = paced_writes(run, o, false, rate, seconds, static_cast<long>(rate * seconds), id_of);
        } catch (const std::exception &e) {
            consumer_fail(std::string("writers: ") + e.what());
        }
        writing.store(false);
    });
    const auto t0 = Clock::now();
    const std::string q =
        "SELECT c.relname, pg_total_relation_size(c.oid), coalesce(s.n_live_tup, 0), coalesce(s.n_dead_tup, 0)"
        " FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
        " LEFT JOIN pg_stat_user_tables s ON s.relid = c.oid"
        " WHERE n.nspname = $1 AND c.relkind = 'r' AND c.relname IN"
        " ('outbox', 'outbox_aggregates', 'outbox_inbox', 'outbox_inbox_positions') ORDER BY 1";
    auto sample = [&] {
        TableSample ts;
        ts.t = seconds_between(t0, Clock::now());
        auto r = pg.query(q, {run.schema});
        for (int i = 0; i < r->rows(); ++i) {
            ts.tables[r->get(i, 0)] = {r->get_ll(i, 1), r->get_ll(i, 2), r->get_ll(i, 3)};
        }
        samples.push_back(ts);
    };
    auto next = t0;
    bool relay_alive = true;
    while (writing.load()) {
        relay_alive = relay_alive && daemon_alive(*daemon);
        sample();
        next += std::chrono::milliseconds(static_cast<int64_t>(o.health_sample_s * 1000));
        while (writing.load() && Clock::now() < next) {
            std::this_thread::sleep_for(std::chrono::milliseconds(50));
        }
    }
    writer.join();
    if (!relay_alive) {
        require_alive(*daemon); // says why
    }
    sample();
    // The consumers may trail the writers on a busy machine: give them up to 5 minutes to catch up
    // (every event must be handled; how long it took is reported).
    const auto w0 = Clock::now();
    while (handled.load() < pw.written && seconds_between(w0, Clock::now()) < 300 && !consumer_failed.load()) {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    run.notes.push_back("H: the consumers handled the last event " + fixed(seconds_between(w0, Clock::now()), 1) +
                        " s after the writers stopped");
    if (consumer_failed.load() || !purge_error.empty()) {
        std::lock_guard<std::mutex> lock(consumer_mu);
        die("H: " + consumer_error + purge_error);
    }
    expect(run, handled.load() >= pw.written,
           "H: the consumer handled every event (" + std::to_string(handled.load()) + " of " +
               std::to_string(pw.written) + ")");
    // Flatness: mean total size over the last third vs the first third of the samples taken once
    // the tables can have reached their steady size: after the purge age plus two purges, and
    // after the first third of the run (autovacuum needs a few visits, a minute apart, before the
    // space of purged rows is reused).
    const double warm = std::max(o.health_age_s + 2 * o.health_purge_s, seconds / 3);
    std::vector<const TableSample *> steady;
    for (const auto &s : samples) {
        if (s.t >= warm) {
            steady.push_back(&s);
        }
    }
    std::string series = "{\"t\": [";
    for (size_t i = 0; i < samples.size(); ++i) {
        series += (i > 0 ? ", " : "") + fixed(samples[i].t, 1);
    }
    series += "], \"tables\": {";
    std::string verdicts;
    bool all_flat = true;
    bool first_table = true;
    for (const char *name : {"outbox", "outbox_aggregates", "outbox_inbox", "outbox_inbox_positions"}) {
        std::vector<double> size, live, dead;
        for (const auto &s : samples) {
            auto it = s.tables.find(name);
            size.push_back(it == s.tables.end() ? 0 : static_cast<double>(it->second[0]));
            live.push_back(it == s.tables.end() ? 0 : static_cast<double>(it->second[1]));
            dead.push_back(it == s.tables.end() ? 0 : static_cast<double>(it->second[2]));
        }
        series += std::string(first_table ? "" : ", ") + json_str(name) + ": {\"size_bytes\": " + json_list(size, 0) +
                  ", \"live\": " + json_list(live, 0) + ", \"dead\": " + json_list(dead, 0) + "}";
        first_table = false;
        double ratio = -1;
        if (steady.size() >= 6) {
            const size_t third = steady.size() / 3;
            double a = 0, z = 0;
            for (size_t i = 0; i < third; ++i) {
                auto f = steady[i]->tables.find(name);
                auto l = steady[steady.size() - 1 - i]->tables.find(name);
                a += f == steady[i]->tables.end() ? 0 : static_cast<double>(f->second[0]);
                z += l == steady[steady.size() - 1 - i]->tables.end() ? 0 : static_cast<double>(l->second[0]);
            }
            ratio = a > 0 ? z / a : -1;
        }
        const bool is_positions = std::strcmp(name, "outbox_aggregates") == 0 ||
                                  std::strcmp(name, "outbox_inbox_positions") == 0;
        Figure f;
        f.section = "8 table health";
        f.name = std::string(name) + " total size, last third vs first third of the steady state";
        f.value = fixed(size.empty() ? 0 : size.back() / 1048576.0, 1) + " MiB at the end, " +
                  fixed(dead.empty() ? 0 : dead.back(), 0) + " dead tuples";
        f.ratio = ratio;
        f.baseline = ratio >= 0 ? "first third of the same run" : "too few samples after warm-up";
        f.target = is_positions ? "≤ 1.25 (bounded by " + std::to_string(aggs) + " aggregates)" : "≤ 1.25 (flat)";
        f.verdict = ratio >= 0 ? verdict(ratio <= 1.25) : "";
        // Autovacuum visits a table about once a minute (autovacuum_naptime), so between visits
        // the dead rows of purged and published events pile up: a run of a few minutes sees one
        // or two teeth of that saw, not whether it is flat.
        if (o.health_minutes < 10) {
            f.target += ": judged only over >= 10 min (--only H --health-minutes 30)";
            f.verdict = "";
        }
        if (ratio >= 0 && ratio > 1.25) {
            all_flat = false;
        }
        add_figure(run, f);
    }
    series += "}, \"written\": " + std::to_string(pw.written) + ", \"rate_per_s\": " + fixed(rate, 1) +
              ", \"purged_outbox\": " + std::to_string(purged_outbox.load()) +
              ", \"purged_inbox\": " + std::to_string(purged_inbox.load()) + ", \"warmup_s\": " + fixed(warm, 0) +
              ", \"flat\": " + (all_flat ? "true" : "false") + "}";
    run.series["health"] = series;
    Row r;
    r.key = "H";
    r.what = "table health: " + fixed(seconds / 60, 1) + " min at 50% load with relay, dedupe consumer, purges (" +
             std::to_string(purged_outbox.load()) + " events and " + std::to_string(purged_inbox.load()) +
             " inbox rows purged)";
    r.events = pw.written;
    r.seconds = pw.seconds;
    run.rows.push_back(r);
    admin.bind(run.queue, run.exchange);
    admin.delete_queue(cname);
    admin.delete_queue(cname + ".dead");
    outbox_db_close(admin_db);
    outbox_config_free(ccfg);
    reset_outbox(pg, run);
}

// ---------------------------------------------------------------------------------------------- K

// The bindings' per-write cost, from the JSON that python/bench_write.py and node/bench/write.js
// wrote in this run (each measured its C reference, bench/write_c, in interleaved rounds).
void run_bindings(Run &run, const Options &o) {
    auto load = [](const std::string &file) -> cJSON * {
        std::ifstream f(file);
        if (!f) {
            die("K: cannot read " + file);
        }
        std::string all((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
        cJSON *j = cJSON_Parse(all.c_str());
        if (j == nullptr) {
            die("K: " + file + " is not JSON");
        }
        return j;
    };
    auto num = [](cJSON *obj, const char *a, const char *b) {
        cJSON *x = cJSON_GetObjectItemCaseSensitive(obj, a);
        x = x != nullptr ? cJSON_GetObjectItemCaseSensitive(x, b) : nullptr;
        return cJSON_IsNumber(x) ? x->valuedouble : -1.0;
    };
    struct Src {
        const char *lang;
        std::string file;
        double target;
        std::vector<std::pair<const char *, const char *>> paths; // json key, description
    };
    const Src srcs[] = {
        {"Python",
         o.bindings_python_json,
         1.2,
         {{"lent", "outbox.write(conn, ...) on a lent psycopg connection"},
          {"owned", "db.write(...) on an outbox.Db"}}},
        {"Node",
         o.bindings_node_json,
         1.3,
         {{"addon", "await db.write(event), owned connection"},
          {"addonMany", "await db.writeMany(events)"},
          {"pg", "await outbox.write(pgClient, event), node-postgres"}}},
    };
    std::string series = "[";
    for (const auto &s : srcs) {
        if (s.file.empty()) {
            progress(std::string("K: no ") + s.lang + " figures given (--bindings-" +
                     (s.lang[0] == 'P' ? "python" : "node") + "), skipped");
            continue;
        }
        cJSON *j = load(s.file);
        const double c = num(j, "us_per_write", "c");
        expect(run, c > 0, std::string("K: ") + s.lang + " figures include the C reference");
        bool first = true;
        for (const auto &[k, desc] : s.paths) {
            const double v = num(j, "us_per_write", k);
            expect(run, v > 0, std::string("K: ") + s.lang + " figures include " + k);
            if (v <= 0 || c <= 0) {
                continue;
            }
            Figure f;
            f.section = "7 bindings";
            f.name = std::string(s.lang) + ": " + desc;
            f.value = fixed(v, 1) + " us/write";
            f.baseline = "C outbox_write " + fixed(c, 1) + " us/write";
            f.ratio = v / c;
            if (first) {
                f.target = "≤ " + fixed(s.target, 1) + "x";
                f.verdict = verdict(f.ratio <= s.target);
            }
            first = false;
            add_figure(run, f);
            series += std::string(series.size() > 1 ? ", " : "") + "{\"lang\": " + json_str(s.lang) +
                      ", \"path\": " + json_str(k) + ", \"us_per_write\": " + fixed(v, 2) +
                      ", \"c_us_per_write\": " + fixed(c, 2) + "}";
        }
        cJSON_Delete(j);
    }
    run.series["bindings"] = series + "]";
}

int run_bench(const Options &o) {
    const auto wall0 = Clock::now();
    Run run;
    run.pg_url = env_or("OUTBOX_PG_URL", "postgresql://outbox:outbox@127.0.0.1:54329/outbox");
    run.amqp_url = env_or("OUTBOX_AMQP_URL", "amqp://outbox:outbox@127.0.0.1:56729/%2f");
    // Child processes (the drain child, `outbox relay` daemons) read the URLs from the environment.
    setenv("OUTBOX_PG_URL", run.pg_url.c_str(), 1);
    setenv("OUTBOX_AMQP_URL", run.amqp_url.c_str(), 1);
    run.outbox_cli = o.outbox_cli;
    if (run.outbox_cli.empty()) {
        char self[4096];
        const ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
        std::string dir = n > 0 ? std::string(self, static_cast<size_t>(n)) : std::string();
        dir = dir.substr(0, dir.rfind('/'));
        run.outbox_cli = dir + "/../cli/outbox";
    }
    if (access(run.outbox_cli.c_str(), X_OK) != 0 &&
        (wanted(o, "X") || wanted(o, "L") || (wanted(o, "H") && o.health_minutes > 0))) {
        die("the outbox command is not at " + run.outbox_cli + " (build the CLI, or give --outbox-cli PATH)");
    }
    std::random_device rd;
    const uint32_t tag = static_cast<uint32_t>(rd()) ^ (static_cast<uint32_t>(getpid()) << 16);
    char hex[16];
    std::snprintf(hex, sizeof hex, "%08x", tag);
    run.schema = std::string("bench_") + hex;
    run.exchange = std::string("bench.") + hex;
    run.queue = run.exchange + ".q";
    run.channel = std::string("bench_") + hex;
    run.log_prefix = env_or("TMPDIR", "/tmp") + "/relay_bench-" + hex + "-";

    Pg pg(run.pg_url);
    pg.exec("SET client_min_messages = warning");
    const std::string pg_version = server_version(pg);
    Amqp admin(run.amqp_url, 0);

    // Set up; everything below is undone at the end, also after an error.
    struct Cleanup {
        Run &run;
        Pg &pg;
        Amqp &admin;
        bool keep;
        ~Cleanup() {
            if (keep) {
                std::fprintf(stderr, "bench: kept schema %s, exchange %s, queue %s\n", run.schema.c_str(),
                             run.exchange.c_str(), run.queue.c_str());
                return;
            }
            try {
                admin.delete_queue(run.queue);
                admin.delete_exchange(run.exchange);
            } catch (const std::exception &e) {
                std::fprintf(stderr, "bench: cleanup (RabbitMQ): %s\n", e.what());
            }
            try {
                pg.exec("DROP SCHEMA IF EXISTS \"" + run.schema + "\" CASCADE");
            } catch (const std::exception &e) {
                std::fprintf(stderr, "bench: cleanup (PostgreSQL): %s\n", e.what());
            }
            if (run.failures.empty() && std::uncaught_exceptions() == 0) {
                for (const auto &f : g_daemon_logs) {
                    std::remove(f.c_str());
                }
            }
        }
    } cleanup{run, pg, admin, o.keep};

    progress("schema " + run.schema + ", exchange " + run.exchange + ", queue " + run.queue);
    admin.declare_exchange(run.exchange);
    admin.declare_queue(run.queue, o.queue_type);
    admin.bind(run.queue, run.exchange);
    {
        outbox_config *cfg = relay_config(run, o.batch_size, o.window, run.pg_url);
        outbox_db *db = nullptr;
        outbox_status rc = outbox_db_open(&db, run.pg_url.c_str(), cfg);
        outbox_config_free(cfg);
        if (rc != OUTBOX_OK) {
            die(std::string("outbox_db_open: ") + outbox_last_error());
        }
        rc = outbox_migrate(nullptr, db, OUTBOX_MIGRATE_OUTBOX);
        std::string err = rc == OUTBOX_OK ? "" : outbox_last_error();
        outbox_db_close(db);
        if (rc != OUTBOX_OK) {
            die("outbox_migrate: " + err);
        }
    }
    const std::string table = "\"" + run.schema + "\".outbox";
    const std::string aggregates = "\"" + run.schema + "\".outbox_aggregates";

    Generator gr;
    gr.run = tag;
    gr.code = 0x0001;
    gr.prefix = 'r';
    gr.count = o.events;
    gr.aggregates = (o.events + o.per_aggregate - 1) / o.per_aggregate;
    gr.payload_bytes = o.payload_bytes;
    gr.base_us =
        std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::system_clock::now().time_since_epoch())
            .count() -
        60 * 1000000LL; // a minute ago: due now
    run.notes.push_back("R backlog: " + std::to_string(gr.count) + " events over " + std::to_string(gr.aggregates) +
                        " aggregates (" + std::to_string(o.per_aggregate) +
                        " per aggregate), written by COPY, then VACUUM ANALYZE and CHECKPOINT before timing");

    auto phase_t0 = Clock::now();
    auto phase = [&](const std::string &name) {
        const auto now = Clock::now();
        run.phases.emplace_back(name, seconds_between(phase_t0, now));
        phase_t0 = now;
    };
    const bool want_b = wanted(o, "B");
    if (want_b) {
        pg.exec("CHECKPOINT");
        Row b = run_baseline(run, o, gr);
        const uint32_t n = admin.count(run.queue);
        expect(run, n == static_cast<uint32_t>(gr.count),
               "B: the queue holds " + std::to_string(gr.count) + " messages (" + std::to_string(n) + ")");
        check_sample(run, admin, gr, "B");
        progress("B: " + rate_str(b.rate()) + " (the baseline of D, P, X)");
        run.rows.push_back(b);
        admin.purge(run.queue);
        std::this_thread::sleep_for(std::chrono::seconds(1)); // let the broker settle after the purge
        phase("B");
    }
    auto size_label = [](long n) {
        if (n >= 1000000 && n % 1000000 == 0) {
            return std::to_string(n / 1000000) + "M";
        }
        if (n >= 1000 && n % 1000 == 0) {
            return std::to_string(n / 1000) + "k";
        }
        return std::to_string(n);
    };
    if (wanted(o, "D")) {
        std::string series = "[";
        const Row *first = nullptr;
        size_t first_idx = 0;
        uint16_t code = 0x0020;
        for (long n : o.drain_sizes) {
            reset_outbox(pg, run);
            Generator g = gr;
            g.code = code++;
            g.count = n;
            g.aggregates = (n + o.per_aggregate - 1) / o.per_aggregate;
            const std::string key = "R-" + size_label(n);
            progress(key + ": loading the backlog (COPY, VACUUM ANALYZE, CHECKPOINT)");
            const auto l0 = Clock::now();
            load_backlog(pg, table, aggregates, g);
            progress(key + ": loaded in " + fixed(seconds_between(l0, Clock::now()), 1) + " s");
            Row r = run_relay(run, o, g, pg, o.batch_size, o.window, key);
            const uint32_t q = admin.count(run.queue);
            expect(run, q == static_cast<uint32_t>(g.count),
                   key + ": the queue holds " + std::to_string(g.count) + " messages (" + std::to_string(q) + ")");
            check_sample(run, admin, g, key);
            Figure f;
            f.section = "1 relay drain";
            f.name = "relay drain, backlog " + size_label(n) + " (batch " + std::to_string(o.batch_size) + ", window " +
                     std::to_string(o.window) + ")";
            f.value = rate_str(r.rate());
            if (const Row *b = find_row(run, "B")) {
                f.baseline = "B " + rate_str(b->rate());
                f.ratio = r.rate() / b->rate();
                f.target = "≥ 0.85";
                f.verdict = verdict(f.ratio >= 0.85);
                r.ratio_value = f.ratio;
                r.ratio = key + "/B = " + fixed(f.ratio, 2);
                r.target = "≥ 0.85: " + f.verdict;
            }
            add_figure(run, f);
            Figure m;
            m.section = "1 relay drain";
            m.name = "relay process peak RSS, backlog " + size_label(n);
            m.value = fixed(static_cast<double>(r.peak_rss_kib) / 1024.0, 1) + " MiB";
            if (n >= 1000000) {
                m.target = "< 64 MiB";
                m.verdict = verdict(r.peak_rss_kib < 64 * 1024);
            }
            add_figure(run, m);
            series += std::string(series.size() > 1 ? ", " : "") + "{\"backlog\": " + std::to_string(n) +
                      ", \"events_per_s\": " + fixed(r.rate(), 1) + ", \"peak_rss_kib\": " +
                      std::to_string(r.peak_rss_kib) + "}";
            run.rows.push_back(r);
            if (first == nullptr) {
                first_idx = run.rows.size() - 1;
                first = &run.rows.back();
            }
            admin.purge(run.queue);
            std::this_thread::sleep_for(std::chrono::seconds(1));
        }
        if (o.drain_sizes.size() > 1) {
            const Row &lo = run.rows[first_idx];
            const Row &hi = run.rows.back();
            Figure f;
            f.section = "1 relay drain";
            f.name = "throughput at the largest backlog vs the smallest (" + hi.key + " vs " + lo.key + ")";
            f.value = rate_str(hi.rate());
            f.baseline = lo.key + " " + rate_str(lo.rate());
            f.ratio = hi.rate() / lo.rate();
            f.target = "≥ 0.80 (within 20%)";
            f.verdict = verdict(f.ratio >= 0.8);
            add_figure(run, f);
        }
        run.series["drain"] = series + "]";
        reset_outbox(pg, run);
        phase("D");
    }
    if (wanted(o, "P")) {
        // Throughput vs relay.batch_size (window fixed) and vs relay.window (batch fixed).
        std::string sb = "[", sw = "[";
        uint16_t code = 0x0040;
        auto point = [&](int batch, int window, std::string &series) {
            reset_outbox(pg, run);
            Generator g = gr;
            g.code = code++;
            g.count = o.sweep_events;
            g.aggregates = o.sweep_events;
            load_backlog(pg, table, aggregates, g);
            const std::string key = std::string(&series == &sb ? "P-batch" : "P-window") + "@b" +
                                    std::to_string(batch) + "w" + std::to_string(window);
            Row r = run_relay(run, o, g, pg, batch, window, key);
            const uint32_t q = admin.count(run.queue);
            expect(run, q == static_cast<uint32_t>(g.count),
                   key + ": the queue holds " + std::to_string(g.count) + " messages (" + std::to_string(q) + ")");
            if (const Row *b = find_row(run, "B")) {
                r.ratio_value = r.rate() / b->rate();
                r.ratio = key + "/B = " + fixed(r.ratio_value, 2);
            }
            progress(key + ": " + rate_str(r.rate()) + (r.ratio.empty() ? "" : ", " + r.ratio));
            series += std::string(series.size() > 1 ? ", " : "") + "{\"batch_size\": " + std::to_string(batch) +
                      ", \"window\": " + std::to_string(window) + ", \"events_per_s\": " + fixed(r.rate(), 1) + "}";
            run.rows.push_back(r);
            admin.purge(run.queue);
        };
        for (long bsz : o.sweep_batches) {
            point(static_cast<int>(bsz), o.window, sb);
        }
        for (long w : o.sweep_windows) {
            point(o.batch_size, static_cast<int>(w), sw);
        }
        run.series["sweep_batch"] = sb + "]";
        run.series["sweep_window"] = sw + "]";
        reset_outbox(pg, run);
        phase("P");
    }
    // Diagnostics: the relay as in D at --events, with session settings in pg.url (libpq "options")
    // that a user can apply today. R-nojit: no JIT for the claim query. R-pinned: no JIT, and sorts
    // priced out so the claim keeps walking the pending index in order instead of sorting.
    const std::pair<const char *, const char *> diagnostics[] = {
        {"R-nojit", "-c jit=off"},
        {"R-pinned", "-c jit=off -c enable_sort=off"},
    };
    uint16_t diag_code = 0x0010;
    for (const auto &[dkey, dopts] : diagnostics) {
        if (!wanted(o, dkey)) {
            continue;
        }
        reset_outbox(pg, run);
        Generator gd = gr;
        gd.code = diag_code++;
        gd.prefix = dkey[2] == 'n' ? 'j' : 'p';
        progress(std::string(dkey) + ": loading the backlog");
        load_backlog(pg, table, aggregates, gd);
        Row r = run_relay(run, o, gd, pg, o.batch_size, o.window, dkey, dopts);
        r.what = std::string("diagnostic: as R, with options='") + dopts + "' in pg.url";
        const uint32_t n = admin.count(run.queue);
        expect(run, n == static_cast<uint32_t>(gd.count),
               std::string(dkey) + ": the queue holds " + std::to_string(gd.count) + " messages (" + std::to_string(n) +
                   ")");
        if (const Row *b = find_row(run, "B")) {
            r.ratio_value = r.rate() / b->rate();
            r.ratio = std::string(dkey) + "/B = " + fixed(r.ratio_value, 2);
        }
        run.rows.push_back(r);
        admin.purge(run.queue);
        std::this_thread::sleep_for(std::chrono::seconds(1));
    }
    // The drain whose ratio the relay-only rows (R-w1, S) refer to: the one at --events, else the largest.
    auto main_drain = [&]() -> const Row * {
        const Row *best = nullptr;
        for (const auto &r : run.rows) {
            if (r.key.rfind("R-", 0) == 0 && r.key != "R-w1" && r.key.find("jit") == std::string::npos &&
                r.key.find("pinned") == std::string::npos) {
                if (r.events == o.events) {
                    return &r;
                }
                if (best == nullptr || r.events > best->events) {
                    best = &r;
                }
            }
        }
        return best;
    };
    if (wanted(o, "R-w1")) {
        reset_outbox(pg, run);
        Generator g1 = gr;
        g1.code = 0x0002;
        g1.prefix = 'q';
        g1.count = o.w1_events;
        g1.aggregates = (g1.count + o.per_aggregate - 1) / o.per_aggregate;
        progress("R-w1: loading the backlog");
        load_backlog(pg, table, aggregates, g1);
        Row r = run_relay(run, o, g1, pg, o.batch_size, 1, "R-w1");
        if (const Row *base = main_drain()) {
            r.ratio_value = r.rate() / base->rate();
            r.ratio = "R-w1/" + base->key + " = " + fixed(r.ratio_value, 2);
        }
        progress("R-w1: " + rate_str(r.rate()) + (r.ratio.empty() ? "" : ", " + r.ratio));
        run.rows.push_back(r);
        admin.purge(run.queue);
        phase("R-w1");
    }
    if (wanted(o, "S")) {
        reset_outbox(pg, run);
        Generator gs = gr;
        gs.code = 0x0003;
        gs.prefix = 's';
        gs.count = o.seed_events;
        gs.aggregates = gs.count;
        progress("S: loading the backlog");
        load_backlog(pg, table, aggregates, gs);
        Row s = run_seed_style(run, gs, pg);
        Figure f;
        f.section = "2 seed-style contrast";
        f.name = "the documents' loop without its sleep (publish + UPDATE per event)";
        f.value = rate_str(s.rate());
        if (const Row *rr = main_drain()) {
            s.ratio_value = rr->rate() / s.rate();
            s.ratio = rr->key + "/S = " + fixed(s.ratio_value, 1);
            f.baseline = rr->key + " " + rate_str(rr->rate());
            f.ratio = s.ratio_value;
        }
        add_figure(run, f);
        run.rows.push_back(s);
        admin.purge(run.queue);
        phase("S");

        // The loop as written: its 1 s sleep per poll, measured for a bounded time on a backlog it
        // cannot finish in that time.
        SeedLoop written;
        written.key = "S-sleep";
        written.sleep_s = 1.0;
        written.limit_s = o.quick ? 5.0 : 10.0;
        reset_outbox(pg, run);
        Generator gw = gr;
        gw.code = 0x0004;
        gw.prefix = 'w';
        gw.count = static_cast<long>(100 * (written.limit_s + 3));
        gw.aggregates = gw.count;
        progress("S-sleep: loading the backlog");
        load_backlog(pg, table, aggregates, gw);
        Row w = run_seed_style(run, gw, pg, written);
        Figure f2;
        f2.section = "2 seed-style contrast";
        f2.name = "the documents' loop as written (sleep 1 s per poll of 100), " + fixed(written.limit_s, 0) + " s";
        f2.value = rate_str(w.rate());
        if (const Row *rr = main_drain()) {
            w.ratio_value = rr->rate() / w.rate();
            w.ratio = rr->key + "/S-sleep = " + fixed(w.ratio_value, 1);
            f2.baseline = rr->key + " " + rate_str(rr->rate());
            f2.ratio = w.ratio_value;
            f2.target = "relay/loop ≥ 10";
            f2.verdict = verdict(f2.ratio >= 10);
            w.target = "relay/loop ≥ 10: " + f2.verdict;
        }
        add_figure(run, f2);
        run.rows.push_back(w);
        admin.purge(run.queue);
        phase("S-sleep");
    }
    if (wanted(o, "X")) {
        run_scale(run, o, pg, admin, gr);
        phase("X");
    }
    if (wanted(o, "L")) {
        run_latency(run, o, pg);
        phase("L");
    }
    if (wanted(o, "C")) {
        // Both consumers' queues exist before one publish of N messages reaches them both.
        progress("C: two consumers (with and without dedupe), " + std::to_string(o.consume_events) + " messages each");
        pg.exec("CREATE TABLE IF NOT EXISTS \"" + run.schema +
                "\".bench_effects (consumer text NOT NULL, outbox_id text NOT NULL)");
        const std::string names[2] = {"bench-dedupe-" + run.exchange, "bench-plain-" + run.exchange};
        for (const auto &n : names) {
            outbox_config *cfg = nullptr;
            outbox_consumer *c = nullptr;
            outbox_config_new(&cfg);
            outbox_config_set(cfg, "amqp.url", run.amqp_url.c_str());
            outbox_config_set(cfg, "amqp.exchange", run.exchange.c_str());
            outbox_config_set(cfg, "consumer.queue_type", "classic");
            outbox_consumer_new(&c, cfg, n.c_str());
            if (outbox_consumer_connect(c) != OUTBOX_OK) {
                throw std::runtime_error(std::string("C: ") + outbox_last_error());
            }
            outbox_consumer_free(c);
            outbox_config_free(cfg);
        }
        Generator gc = gr;
        gc.code = 0x0004;
        gc.prefix = 'c';
        gc.count = o.consume_events;
        gc.aggregates = gc.count;
        run_baseline(run, o, gc);
        admin.purge(run.queue);
        pg.exec("CHECKPOINT");
        // Interleaved plain, dedupe, dedupe, plain (half the messages each time), so drift in the
        // machine's load hits both alike; each consumer drains its own queue of all N messages.
        const long first_half = gc.count / 2;
        Row p1 = run_consumer(run, names[1], first_half, false);
        Row d1 = run_consumer(run, names[0], first_half, true);
        Row d2 = run_consumer(run, names[0], gc.count - first_half, true);
        Row p2 = run_consumer(run, names[1], gc.count - first_half, false);
        Row plain = p1;
        plain.events += p2.events;
        plain.seconds += p2.seconds;
        plain.client_cpu_s += p2.client_cpu_s;
        Row dd = d1;
        dd.events += d2.events;
        dd.seconds += d2.seconds;
        dd.client_cpu_s += d2.client_cpu_s;
        plain.key = "C-plain";
        plain.what = "C: consumer runtime, one transaction per message, without dedupe";
        dd.key = "C-dedupe";
        dd.what = "C: the same consumer opening its transaction with outbox_consumer_begin (BEGIN + dedupe, one round trip)";
        dd.ratio_value = dd.rate() / plain.rate();
        dd.ratio = "dedupe/plain = " + fixed(dd.ratio_value, 2);
        dd.target = std::string("≥ 0.8: ") + (dd.ratio_value >= 0.8 ? "PASS" : "MISS");
        Figure f;
        f.section = "6 consumer";
        f.name = "consumer with dedupe in the handler's transaction";
        f.value = rate_str(dd.rate());
        f.baseline = "the same consumer without dedupe " + rate_str(plain.rate());
        f.ratio = dd.ratio_value;
        f.target = "≥ 0.8";
        f.verdict = verdict(dd.ratio_value >= 0.8);
        add_figure(run, f);
        auto effects = pg.query("SELECT count(DISTINCT outbox_id) FROM \"" + run.schema + "\".bench_effects");
        expect(run, effects->get(0, 0) == std::to_string(gc.count),
               "C: every message had its effect (" + effects->get(0, 0) + " distinct)");
        run.rows.push_back(plain);
        run.rows.push_back(dd);
        for (const auto &n : names) {
            admin.delete_queue(n);
            admin.delete_queue(n + ".dead");
        }
        phase("C");
    }
    if (wanted(o, "W")) {
        // Slices of the three modes interleaved biz, off, on, on, off, biz, ... so a burst of
        // background I/O (other commits, a checkpoint) lands on every mode alike.
        progress("W: " + std::to_string(o.writers) + " writers, " + std::to_string(o.writes) +
                 " transactions per mode (one business row, plus one outbox_write unless biz), in " +
                 std::to_string(o.w_slices) + " interleaved slices per mode");
        pg.exec("CREATE TABLE IF NOT EXISTS \"" + run.schema +
                "\".bench_orders (id bigserial PRIMARY KEY, customer text NOT NULL, amount numeric(12,2) NOT NULL,"
                " body text NOT NULL, created_at timestamptz NOT NULL DEFAULT now())");
        pg.exec("CHECKPOINT");
        WSlice sum[3];
        std::vector<double> rates[3];
        const long slice_writes = std::max(1L, o.writes / o.w_slices);
        const WMode fwd[3] = {WMode::biz, WMode::off, WMode::on};
        for (int round = 0; round < o.w_slices; ++round) {
            for (int k = 0; k < 3; ++k) {
                const WMode m = fwd[round % 2 == 0 ? k : 2 - k];
                WSlice ws = run_writes(run, o, m, round, slice_writes);
                WSlice &acc = sum[static_cast<int>(m)];
                acc.txns += ws.txns;
                acc.seconds += ws.seconds;
                acc.cpu_s += ws.cpu_s;
                acc.latency_ms.insert(acc.latency_ms.end(), ws.latency_ms.begin(), ws.latency_ms.end());
                rates[static_cast<int>(m)].push_back(static_cast<double>(ws.txns) / ws.seconds);
            }
        }
        auto list = [](const std::vector<double> &v, int decimals) {
            std::string out;
            for (double x : v) {
                out += (out.empty() ? "" : ", ") + fixed(x, decimals);
            }
            return out;
        };
        const double biz_tps = static_cast<double>(sum[0].txns) / sum[0].seconds;
        std::string series = "[";
        for (int k = 0; k < 3; ++k) {
            const WMode m = static_cast<WMode>(k);
            Row r;
            r.key = wmode_key(m);
            r.what = std::to_string(o.writers) + " writers, one business row per transaction" +
                     (m == WMode::biz ? std::string(" alone")
                                      : std::string(" + outbox_write, write.notify=") + (m == WMode::on ? "true" : "false"));
            r.events = sum[k].txns;
            r.seconds = sum[k].seconds;
            r.client_cpu_s = sum[k].cpu_s;
            // Pairwise ratios against the biz slice of the same round.
            std::vector<double> pairs;
            for (size_t i = 0; i < rates[k].size() && i < rates[0].size(); ++i) {
                pairs.push_back(rates[k][i] / rates[0][i]);
            }
            const double p50 = percentile(sum[k].latency_ms, 50);
            const double p99 = percentile(sum[k].latency_ms, 99);
            r.extra_json = "\"slices\": " + std::to_string(rates[k].size()) + ", \"slice_tps\": [" +
                           list(rates[k], 1) + "], \"p50_ms\": " + fixed(p50, 3) + ", \"p99_ms\": " + fixed(p99, 3) +
                           ", \"pair_ratio_median\": " + fixed(median(pairs), 4);
            series += std::string(series.size() > 1 ? ", " : "") + "{\"mode\": " + json_str(r.key) +
                      ", \"tps\": " + fixed(r.rate(), 1) + ", \"p50_ms\": " + fixed(p50, 3) +
                      ", \"p99_ms\": " + fixed(p99, 3) + "}";
            Figure f;
            f.section = "5 write overhead";
            f.name = r.what;
            f.value = fixed(r.rate(), 0) + " TPS, p50 " + fixed(p50, 2) + " ms, p99 " + fixed(p99, 2) + " ms";
            if (m != WMode::biz) {
                r.ratio_value = r.rate() / biz_tps;
                r.ratio = std::string(r.key) + "/W-biz = " + fixed(r.ratio_value, 2) + " (slice pairs: median " +
                          fixed(median(pairs), 2) + ")";
                f.baseline = "business row alone " + fixed(biz_tps, 0) + " TPS, p50 " +
                             fixed(percentile(sum[0].latency_ms, 50), 2) + " ms";
                f.ratio = r.ratio_value;
                if (m == WMode::off) {
                    f.target = "≥ 0.90 (≤ 10% TPS loss, defaults)";
                    f.verdict = verdict(f.ratio >= 0.9);
                    r.target = "≥ 0.90: " + f.verdict;
                } else {
                    f.target = "reported (write.notify is off by default)";
                }
            }
            add_figure(run, f);
            run.rows.push_back(r);
        }
        run.series["write"] = series + "]";
        run.notes.push_back(
            "W: each writer its own connection (outbox_db_open), synchronous_commit on; a transaction is BEGIN, "
            "INSERT INTO bench_orders (a " +
            std::to_string(o.w_payload_bytes) + "-byte text column), [outbox_write of a " +
            std::to_string(o.w_payload_bytes) +
            "-byte payload, a new aggregate per event], COMMIT; latency is BEGIN sent to COMMIT returned; " +
            std::to_string(o.w_slices) + " slices of " + std::to_string(slice_writes) +
            " transactions per mode, interleaved biz/off/on/on/off/biz; a LISTEN connection drains the channel");
        phase("W");
    }
    if (wanted(o, "K")) {
        run_bindings(run, o);
        phase("K");
    }
    if (wanted(o, "H") && o.health_minutes > 0) {
        run_health(run, o, pg, admin);
        phase("H");
    }
    const double wall = seconds_between(wall0, Clock::now());
    print_table(run, o, pg_version, wall);
    if (!o.json_file.empty()) {
        write_json(run, o, pg_version, wall);
    }
    if (!o.md_file.empty()) {
        write_md(run, o, pg_version, wall);
    }
    if (!run.failures.empty()) {
        return 2;
    }
    if (o.enforce_target) {
        for (const auto &f : run.figures) {
            if (f.verdict == "MISS") {
                return 3;
            }
        }
    }
    return 0;
}

} // namespace

int main(int argc, char **argv) {
    if (argc > 1 && std::strcmp(argv[1], "--child-drain") == 0) {
        return child_drain(argc, argv);
    }
    std::signal(SIGINT, on_signal);
    std::signal(SIGTERM, on_signal);
    try {
        const Options o = parse_options(argc, argv);
        return run_bench(o);
    } catch (const std::exception &e) {
        std::fprintf(stderr, "bench: error: %s\n", e.what());
        return 1;
    }
}
