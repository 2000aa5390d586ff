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

#include <poll.h>
#include <sys/resource.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <memory>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

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
    int writers = 4;
    long writes = 20000;
    int w_slices = 10;     // W: each mode's writes in this many slices, interleaved off/on (ABBA) against drift
    int per_aggregate = 1; // events per aggregate in the relay backlog (seq 1..k)
    long seed_events = -1; // S backlog; default events / 10
    long w1_events = -1;   // R-w1 backlog; default events / 100
    long consume_events = -1; // C: messages per consumer; default events / 20
    bool quick = false;
    bool keep = false;
    bool enforce_target = false;
    std::string only = "B,R,R-w1,S,W,C";
    std::string json_file;
    std::string steps_csv; // per-step relay stats, for looking into a slow relay
};

void usage(FILE *to) {
    std::fprintf(to, "usage: relay_bench [options]\n"
                     "  --events N          relay backlog and baseline message count (default 100000)\n"
                     "  --payload-bytes N   size of each event's JSON payload (default 1024)\n"
                     "  --window N          publisher-confirm window, relay and baseline alike (default 512)\n"
                     "  --batch-size N      relay.batch_size (default 500)\n"
                     "  --per-aggregate K   events per aggregate in the relay backlog, seq 1..K (default 1)\n"
                     "  --seed-events N     backlog of the seed-style loop (default events/10)\n"
                     "  --w1-events N       backlog of the relay with relay.window=1 (default events/100)\n"
                     "  --writers N         concurrent writer threads (default 4)\n"
                     "  --writes N          events written per write scenario, over all writers (default 20000)\n"
                     "  --w-slices N        split each write scenario into N slices, run interleaved off, on, on,\n"
                     "                      off, ... so background load hits both alike (default 10; --quick 4)\n"
                     "  --quick             small sizes: 5000 events, 2000 writes\n"
                     "  --only LIST         scenarios to run, comma-separated from B,R,R-nojit,R-pinned,R-w1,S,W,C\n"
                     "  --consume-events N  C: messages each consumer handles (default events/20)\n"
                     "                      (default B,R,R-w1,S,W; R-nojit, R-pinned are diagnostics)\n"
                     "  --json FILE         also write the figures as JSON to FILE\n"
                     "  --steps-csv FILE    write every relay step's outbox_relay_stats to FILE\n"
                     "  --keep              keep the schema, exchange and queue afterwards\n"
                     "  --enforce-target    exit 3 when R/B is below 0.85\n"
                     "environment: OUTBOX_PG_URL, OUTBOX_AMQP_URL (default: the scripts/services.sh endpoints)\n");
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

Options parse_options(int argc, char **argv) {
    Options o;
    bool events_set = false;
    bool writes_set = false;
    bool slices_set = false;
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
        } else if (a == "--payload-bytes") {
            o.payload_bytes = static_cast<int>(parse_long(a, value(), 64, 1 << 20));
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
        } else if (a == "--quick") {
            o.quick = true;
        } else if (a == "--only") {
            o.only = value();
        } else if (a == "--json") {
            o.json_file = value();
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
        if (!writes_set) {
            o.writes = 2000;
        }
        if (!slices_set) {
            o.w_slices = 4;
        }
    }
    if (o.consume_events < 0) {
        o.consume_events = std::max(200L, o.events / 20);
    }
    if (o.seed_events < 0) {
        o.seed_events = std::max(100L, o.events / 10);
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
    Amqp(const std::string &url, int heartbeat_s) {
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
    void declare_queue(const std::string &name) {
        amqp_table_entry_t arg{};
        arg.key = amqp_cstring_bytes("x-queue-type");
        arg.value.kind = AMQP_FIELD_KIND_UTF8;
        arg.value.value.bytes = amqp_cstring_bytes("classic");
        amqp_table_t args{1, &arg};
        amqp_queue_declare(c_, kChannel, bytes_of(name), 0, 1, 0, 0, args);
        check(amqp_get_rpc_reply(c_), "queue.declare " + name);
    }
    void bind(const std::string &queue, const std::string &exchange) {
        amqp_queue_bind(c_, kChannel, bytes_of(queue), bytes_of(exchange), amqp_empty_bytes, amqp_empty_table);
        check(amqp_get_rpc_reply(c_), "queue.bind");
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
            g.headers = p.headers.num_entries;
        }
        amqp_destroy_message(&msg);
        return g;
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
    [[nodiscard]] double rate() const { return seconds > 0 ? static_cast<double>(events) / seconds : 0; }
};

struct Run {
    std::string schema, exchange, queue, channel;
    std::string pg_url, amqp_url;
    std::vector<Row> rows;
    std::vector<std::string> notes;
    std::vector<std::string> failures; // verification failures: the figures are not to be trusted
    int body_bytes = 0;
};

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
           who + ": properties and routing key as the relay sets them");
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

outbox_config *relay_config(const Run &run, const Options &o, int window, const std::string &pg_url) {
    outbox_config *cfg = nullptr;
    if (outbox_config_new(&cfg) != OUTBOX_OK) {
        die(std::string("outbox_config_new: ") + outbox_last_error());
    }
    const std::string batch = std::to_string(o.batch_size);
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

Row run_relay(Run &run, const Options &o, const Generator &g, Pg &pg, int window, const std::string &key,
              const std::string &pg_url) {
    progress(key + ": relay draining a backlog of " + std::to_string(g.count) + " events (batch " +
             std::to_string(o.batch_size) + ", window " + std::to_string(window) + ")");
    outbox_config *cfg = relay_config(run, o, window, pg_url);
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

    int64_t steps = 0, claimed = 0, published = 0, failed = 0, held_back = 0, unconfirmed = 0;
    int64_t claim_us = 0, publish_us = 0, mark_us = 0, total_us = 0, first_step_us = 0, max_step_us = 0;
    std::ofstream csv;
    if (!o.steps_csv.empty()) {
        csv.open(o.steps_csv, std::ios::app);
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
        published += st.published;
        failed += st.failed;
        mark_us += st.mark_us;
        if (st.published > 0 || st.failed > 0) {
            t_last = Clock::now();
        }
        if (st.claimed == 0) {
            break;
        }
        if (csv.is_open()) {
            csv << key << ',' << steps << ',' << st.claimed << ',' << st.published << ',' << st.held_back << ','
                << st.claim_us << ',' << st.publish_us << ',' << st.mark_us << ',' << st.total_us << '\n';
        }
        if (steps == 0) {
            first_step_us = st.total_us;
        }
        ++steps;
        claimed += st.claimed;
        held_back += st.held_back;
        unconfirmed += st.unconfirmed;
        claim_us += st.claim_us;
        publish_us += st.publish_us;
        total_us += st.total_us;
        max_step_us = std::max<int64_t>(max_step_us, st.total_us);
        check_interrupt();
        if (steps > 10 * g.count + 100) {
            die(key + ": the relay does not finish");
        }
    }
    const double secs = seconds_between(t0, t_last);

    Row r;
    r.client_cpu_s = cpu_seconds() - cpu0;
    r.key = key;
    r.what = "outbox relay draining a backlog (batch " + std::to_string(o.batch_size) + ", window " +
             std::to_string(window) + ", " + std::to_string(o.per_aggregate) + " event(s)/aggregate)";
    r.events = published;
    r.seconds = secs;
    auto per_event = [&](int64_t us) {
        return fixed(published > 0 ? static_cast<double>(us) / static_cast<double>(published) : 0, 2);
    };
    std::ostringstream x;
    x << "\"steps\": " << steps << ", \"claimed\": " << claimed << ", \"published\": " << published
      << ", \"failed\": " << failed << ", \"held_back\": " << held_back << ", \"unconfirmed\": " << unconfirmed
      << ", \"claim_us\": " << claim_us << ", \"publish_us\": " << publish_us << ", \"mark_us\": " << mark_us
      << ", \"step_total_us\": " << total_us << ", \"first_step_us\": " << first_step_us
      << ", \"max_step_us\": " << max_step_us << ", \"claim_us_per_event\": " << per_event(claim_us)
      << ", \"publish_us_per_event\": " << per_event(publish_us) << ", \"mark_us_per_event\": " << per_event(mark_us);
    r.extra_json = x.str();
    if (key != "R-w1") {
        const double tot = static_cast<double>(std::max<int64_t>(1, claim_us + publish_us + mark_us));
        run.notes.push_back(key + " phases (outbox_relay_stats, summed over " + std::to_string(steps) +
                            " steps): claim " + fixed(static_cast<double>(claim_us) / 1e6, 2) + " s (" +
                            fixed(100.0 * static_cast<double>(claim_us) / tot, 0) + "%, " + per_event(claim_us) +
                            " us/event), publish+confirm " + fixed(static_cast<double>(publish_us) / 1e6, 2) + " s (" +
                            fixed(100.0 * static_cast<double>(publish_us) / tot, 0) + "%, " + per_event(publish_us) +
                            " us/event), mark+commit " + fixed(static_cast<double>(mark_us) / 1e6, 2) + " s (" +
                            fixed(100.0 * static_cast<double>(mark_us) / tot, 0) + "%, " + per_event(mark_us) +
                            " us/event); first step (connects to both servers) " +
                            fixed(static_cast<double>(first_step_us) / 1e3, 1) + " ms, slowest step " +
                            fixed(static_cast<double>(max_step_us) / 1e3, 1) + " ms");
    }

    expect(run, published == g.count && failed == 0 && unconfirmed == 0,
           key + ": every event confirmed and marked (" + std::to_string(published) + "/" + std::to_string(g.count) +
               ")");
    auto res = pg.query("SELECT count(*) FILTER (WHERE status = 'PUBLISHED'), count(*) FROM " +
                            ("\"" + run.schema + "\".outbox") + " WHERE aggregate_id LIKE $1",
                        {std::string(1, g.prefix) + "%"});
    expect(run, res->get_ll(0, 0) == g.count && res->get_ll(0, 1) == g.count,
           key + ": all " + std::to_string(g.count) + " rows are PUBLISHED (" + res->get(0, 0) + " of " +
               res->get(0, 1) + ")");
    return r;
}

// ---------------------------------------------------------------------------------------------- S

Row run_seed_style(Run &run, const Generator &g, Pg &pg) {
    progress("S: seed-style loop (publish + UPDATE per event, no confirms), " + std::to_string(g.count) + " events");
    Amqp mq(run.amqp_url, 30);
    const std::string t = "\"" + run.schema + "\".outbox";
    // The documents: SELECT * FROM OUTBOX WHERE STATUS = 'PENDING' ORDER BY CREATED_AT ASC LIMIT 100, then
    // per event publish and UPDATE ... SET STATUS = 'PUBLISHED', PUBLISHED_AT = ... WHERE OUTBOX_ID = ?.
    pg.prepare("seed_select",
               "SELECT outbox_id, event_type, aggregate_type, aggregate_id, operation, payload, metadata, actor,"
               " to_char(created_at AT TIME ZONE 'UTC', 'YYYYMMDDHH24MISS'), seq, retry_count, status FROM " +
                   t + " WHERE status = 'PENDING' ORDER BY created_at ASC LIMIT 100",
               0);
    pg.prepare("seed_update", "UPDATE " + t + " SET status = 'PUBLISHED', published_at = now() WHERE outbox_id = $1",
               1);
    std::string body;
    const std::string exchange = run.exchange;
    long done = 0;
    long polls = 0;
    const double cpu0 = cpu_seconds();
    const auto t0 = Clock::now();
    while (true) {
        auto rows = pg.exec_prepared("seed_select", {});
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
            pg.exec_prepared("seed_update", {PQgetvalue(rows->raw(), k, 0)});
            ++done;
        }
        check_interrupt();
    }
    const double secs = seconds_between(t0, Clock::now());
    const double cpu = cpu_seconds() - cpu0;
    // No confirms: nothing says the broker has them yet. Give it a moment before checking.
    Amqp admin(run.amqp_url, 0);
    uint32_t n = 0;
    for (int k = 0; k < 100 && (n = admin.count(run.queue)) < static_cast<uint32_t>(g.count); ++k) {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    expect(run, done == g.count, "S: published and marked every event (" + std::to_string(done) + ")");
    expect(run, n == static_cast<uint32_t>(g.count),
           "S: the queue holds " + std::to_string(g.count) + " messages (" + std::to_string(n) + ")");
    Row r;
    r.key = "S";
    r.what = "seed-style loop: SELECT 100, publish + UPDATE per event, no confirms, no sleep";
    r.events = done;
    r.seconds = secs;
    r.extra_json = "\"polls\": " + std::to_string(polls);
    r.client_cpu_s = cpu;
    return r;
}

// ---------------------------------------------------------------------------------------------- W

// One slice of a write scenario: `writes` events over o.writers threads.
Row run_writes(Run &run, const Options &o, bool notify, int payload_bytes, int slice, long writes) {
    const std::string key = notify ? "W-on" : "W-off";
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
    std::vector<std::thread> threads;
    Generator pg_payload;
    pg_payload.payload_bytes = payload_bytes;
    pg_payload.prefix = 'w';
    pg_payload.aggregates = total;
    pg_payload.count = total;
    std::string payload;
    pg_payload.payload(payload, 0);

    threads.reserve(static_cast<size_t>(o.writers));
    for (int w = 0; w < o.writers; ++w) {
        threads.emplace_back([&, w] {
            outbox_config *cfg = nullptr;
            outbox_db *db = nullptr;
            outbox_event *ev = nullptr;
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
                if (outbox_event_new(&ev) != OUTBOX_OK || outbox_event_set(ev, "aggregate_type", "PRD") != OUTBOX_OK ||
                    outbox_event_set(ev, "operation", "POST") != OUTBOX_OK ||
                    outbox_event_set(ev, "payload", payload.c_str()) != OUTBOX_OK ||
                    outbox_event_set(ev, "metadata", Generator::metadata()) != OUTBOX_OK ||
                    outbox_event_set(ev, "user", Generator::user()) != OUTBOX_OK) {
                    fail("event");
                    break;
                }
                ready.fetch_add(1);
                while (!go.load()) {
                    std::this_thread::yield();
                }
                char agg[48];
                long i = 0;
                for (; i < per_writer; ++i) {
                    std::snprintf(agg, sizeof agg, "%s%03d-%02d-%09ld", notify ? "won" : "woff", slice, w, i);
                    if (outbox_event_set(ev, "aggregate_id", agg) != OUTBOX_OK) {
                        fail("aggregate_id");
                        break;
                    }
                    if (outbox_db_exec(db, "BEGIN") != OUTBOX_OK) {
                        fail("BEGIN");
                        break;
                    }
                    if (outbox_write(db, ev) != OUTBOX_OK) {
                        fail("outbox_write");
                        break;
                    }
                    if (outbox_db_exec(db, "COMMIT") != OUTBOX_OK) {
                        fail("COMMIT");
                        break;
                    }
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
            std::string msg = key;
            msg += ": writer failed: ";
            msg += e;
            die(msg);
        }
    }
    if (!listener_error.empty()) {
        die(key + ": listener failed: " + listener_error);
    }
    const long got = notifications.load();
    expect(run, notify ? got == total : got == 0,
           key + ": the listener received " + std::to_string(got) + " notification(s), expected " +
               std::to_string(notify ? total : 0));

    Row r;
    r.key = key;
    r.what =
        std::to_string(o.writers) + " writers, BEGIN/outbox_write/COMMIT, write.notify=" + (notify ? "true" : "false");
    r.events = total;
    r.seconds = seconds_between(t0, t1);
    r.extra_json = "\"notifications\": " + std::to_string(got);
    r.client_cpu_s = cpu;
    return r;
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
    std::printf("- message: %d-byte payload, %d-byte body, persistent, mandatory, routed to one durable classic "
                "queue; exchange %s\n",
                o.payload_bytes, run.body_bytes, run.exchange.c_str());
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
    j << "  \"params\": {\"events\": " << o.events << ", \"payload_bytes\": " << o.payload_bytes
      << ", \"body_bytes\": " << run.body_bytes << ", \"window\": " << o.window << ", \"batch_size\": " << o.batch_size
      << ", \"per_aggregate\": " << o.per_aggregate << ", \"seed_events\": " << o.seed_events
      << ", \"w1_events\": " << o.w1_events << ", \"writers\": " << o.writers << ", \"writes\": " << o.writes
      << ", \"w_slices\": " << o.w_slices << "},\n";
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
        if (!r.extra_json.empty()) {
            j << ", " << r.extra_json;
        }
        j << "}" << (k + 1 < run.rows.size() ? "," : "") << "\n";
    }
    j << "  ],\n";
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

int run_bench(const Options &o) {
    const auto wall0 = Clock::now();
    Run run;
    run.pg_url = env_or("OUTBOX_PG_URL", "postgresql://outbox:outbox@127.0.0.1:54329/outbox");
    run.amqp_url = env_or("OUTBOX_AMQP_URL", "amqp://outbox:outbox@127.0.0.1:56729/%2f");
    std::random_device rd;
    const uint32_t tag = static_cast<uint32_t>(rd()) ^ (static_cast<uint32_t>(getpid()) << 16);
    char hex[16];
    std::snprintf(hex, sizeof hex, "%08x", tag);
    run.schema = std::string("bench_") + hex;
    run.exchange = std::string("bench.") + hex;
    run.queue = run.exchange + ".q";
    run.channel = std::string("bench_") + hex;

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
        }
    } cleanup{run, pg, admin, o.keep};

    progress("schema " + run.schema + ", exchange " + run.exchange + ", queue " + run.queue);
    admin.declare_exchange(run.exchange);
    admin.declare_queue(run.queue);
    admin.bind(run.queue, run.exchange);
    {
        outbox_config *cfg = relay_config(run, o, o.window, run.pg_url);
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

    const bool want_b = wanted(o, "B");
    const bool want_r = wanted(o, "R");
    if (want_b) {
        pg.exec("CHECKPOINT");
        Row b = run_baseline(run, o, gr);
        const uint32_t n = admin.count(run.queue);
        expect(run, n == static_cast<uint32_t>(gr.count),
               "B: the queue holds " + std::to_string(gr.count) + " messages (" + std::to_string(n) + ")");
        check_sample(run, admin, gr, "B");
        run.rows.push_back(b);
        admin.purge(run.queue);
        std::this_thread::sleep_for(std::chrono::seconds(1)); // let the broker settle after the purge
    }
    if (want_r) {
        progress("R: loading the backlog");
        load_backlog(pg, table, aggregates, gr);
        Row r = run_relay(run, o, gr, pg, o.window, "R", run.pg_url);
        const uint32_t n = admin.count(run.queue);
        expect(run, n == static_cast<uint32_t>(gr.count),
               "R: the queue holds " + std::to_string(gr.count) + " messages (" + std::to_string(n) + ")");
        check_sample(run, admin, gr, "R");
        if (const Row *b = find_row(run, "B")) {
            r.ratio_value = r.rate() / b->rate();
            r.ratio = "R/B = " + fixed(r.ratio_value, 2);
            r.target = std::string("≥ 0.85: ") + (r.ratio_value >= 0.85 ? "PASS" : "MISS");
        }
        run.rows.push_back(r);
        admin.purge(run.queue);
        std::this_thread::sleep_for(std::chrono::seconds(1));
    }
    // Diagnostics: the relay as in R, with session settings in pg.url (libpq "options") that a user can
    // apply today. R-nojit: no JIT for the claim query. R-pinned: no JIT, and sorts priced out so the
    // claim keeps walking the pending index in order instead of sorting the whole backlog.
    const std::pair<const char *, const char *> diagnostics[] = {
        {"R-nojit", "-c jit=off"},
        {"R-pinned", "-c jit=off -c enable_sort=off"},
    };
    uint16_t diag_code = 0x0010;
    for (const auto &[dkey, dopts] : diagnostics) {
        if (!wanted(o, dkey)) {
            continue;
        }
        Generator gd = gr;
        gd.code = diag_code++;
        gd.prefix = dkey[2] == 'n' ? 'j' : 'p';
        progress(std::string(dkey) + ": loading the backlog");
        load_backlog(pg, table, aggregates, gd);
        Row r = run_relay(run, o, gd, pg, o.window, dkey, with_options(run.pg_url, dopts));
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
    if (wanted(o, "R-w1")) {
        Generator g1 = gr;
        g1.code = 0x0002;
        g1.prefix = 'q';
        g1.count = o.w1_events;
        g1.aggregates = (g1.count + o.per_aggregate - 1) / o.per_aggregate;
        progress("R-w1: loading the backlog");
        load_backlog(pg, table, aggregates, g1);
        Row r = run_relay(run, o, g1, pg, 1, "R-w1", run.pg_url);
        // Against the relay whose claim is not the bottleneck, when there is one: the point is confirms.
        const Row *base = find_row(run, "R-pinned");
        if (base == nullptr) {
            base = find_row(run, "R");
        }
        if (base != nullptr) {
            r.ratio_value = r.rate() / base->rate();
            r.ratio = "R-w1/" + base->key + " = " + fixed(r.ratio_value, 2);
        }
        run.rows.push_back(r);
        admin.purge(run.queue);
    }
    if (wanted(o, "S")) {
        Generator gs = gr;
        gs.code = 0x0003;
        gs.prefix = 's';
        gs.count = o.seed_events;
        gs.aggregates = gs.count;
        progress("S: loading the backlog");
        load_backlog(pg, table, aggregates, gs);
        Row s = run_seed_style(run, gs, pg);
        if (const Row *rr = find_row(run, "R")) {
            s.ratio_value = rr->rate() / s.rate();
            s.ratio = "R/S = " + fixed(s.ratio_value, 1);
        }
        s.target = "the real loop sleeps 1 s per 100: ≤ 100/s";
        run.rows.push_back(s);
        admin.purge(run.queue);
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
        auto effects = pg.query("SELECT count(DISTINCT outbox_id) FROM \"" + run.schema + "\".bench_effects");
        expect(run, effects->get(0, 0) == std::to_string(gc.count),
               "C: every message had its effect (" + effects->get(0, 0) + " distinct)");
        run.rows.push_back(plain);
        run.rows.push_back(dd);
        for (const auto &n : names) {
            admin.delete_queue(n);
            admin.delete_queue(n + ".dead");
        }
    }
    if (wanted(o, "W")) {
        // Slices of both modes interleaved off, on, on, off, off, on, ... (ABBA): a burst of background
        // I/O (other commits, a checkpoint) lands on both modes alike instead of on one of them.
        progress("W: " + std::to_string(o.writers) + " writers, " + std::to_string(o.writes) +
                 " events per mode, one per transaction, in " + std::to_string(o.w_slices) +
                 " interleaved slices per mode");
        pg.exec("CHECKPOINT");
        Row sum[2]; // [0] notify off, [1] notify on
        std::vector<double> rates[2];
        const long slice_writes = std::max(1L, o.writes / o.w_slices);
        for (int slice = 0; slice < 2 * o.w_slices; ++slice) {
            const bool notify = (slice % 4 == 1) || (slice % 4 == 2);
            Row w = run_writes(run, o, notify, o.payload_bytes, slice, slice_writes);
            Row &acc = sum[notify ? 1 : 0];
            if (rates[notify ? 1 : 0].empty()) {
                acc = w;
                acc.client_cpu_s = 0;
                acc.events = 0;
                acc.seconds = 0;
                acc.extra_json = "";
            }
            acc.events += w.events;
            acc.seconds += w.seconds;
            acc.client_cpu_s += w.client_cpu_s;
            rates[notify ? 1 : 0].push_back(w.rate());
        }
        // Pairwise ratios of neighbouring slices (each off slice with the on slice run next to it).
        std::vector<double> pair_ratios;
        for (size_t k = 0; k < rates[0].size() && k < rates[1].size(); ++k) {
            pair_ratios.push_back(rates[1][k] / rates[0][k]);
        }
        auto median = [](std::vector<double> v) {
            std::sort(v.begin(), v.end());
            const size_t n = v.size();
            return n == 0 ? 0.0 : (n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2);
        };
        auto list = [](const std::vector<double> &v, int decimals) {
            std::string out;
            for (double x : v) {
                out += (out.empty() ? "" : ", ") + fixed(x, decimals);
            }
            return out;
        };
        const double pair_median = median(pair_ratios);
        for (int k = 0; k < 2; ++k) {
            sum[k].extra_json = "\"slices\": " + std::to_string(rates[k].size()) + ", \"slice_events_per_s\": [" +
                                list(rates[k], 1) + "], \"slice_median_events_per_s\": " + fixed(median(rates[k]), 1);
        }
        Row &on = sum[1];
        on.ratio_value = on.rate() / sum[0].rate();
        on.ratio = "on/off = " + fixed(on.ratio_value, 2) + " (slice pairs: median " + fixed(pair_median, 2) + ")";
        on.target = "NOTIFY costs " + fixed(100.0 * (1.0 - on.ratio_value), 0) + "% of write throughput";
        on.extra_json +=
            ", \"pair_ratios\": [" + list(pair_ratios, 3) + "], \"pair_ratio_median\": " + fixed(pair_median, 4);
        run.rows.push_back(sum[0]);
        run.rows.push_back(on);
        run.notes.push_back(
            "W: each writer its own connection (outbox_db_open), one event per transaction, a new aggregate per "
            "event, a LISTEN connection draining the channel; " +
            std::to_string(o.w_slices) + " slices of " + std::to_string(slice_writes) +
            " events per mode, interleaved off/on/on/off; slice events/s off [" + list(rates[0], 0) + "], on [" +
            list(rates[1], 0) + "]");
    }
    const double wall = seconds_between(wall0, Clock::now());
    print_table(run, o, pg_version, wall);
    if (!o.json_file.empty()) {
        write_json(run, o, pg_version, wall);
    }
    if (!run.failures.empty()) {
        return 2;
    }
    if (o.enforce_target) {
        const Row *r = find_row(run, "R");
        if (r != nullptr && r->ratio_value >= 0 && r->ratio_value < 0.85) {
            return 3;
        }
    }
    return 0;
}

} // namespace

int main(int argc, char **argv) {
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
