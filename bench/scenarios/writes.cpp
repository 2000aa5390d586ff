// W: write overhead. --writers threads, each its own connection, synchronous_commit on: BEGIN, one
// prepared INSERT of a business row (a --w-payload-bytes text column), [outbox_write of a payload
// of the same size | the same event row by a prepared plain INSERT into a bare copy of the outbox
// table (no key, no index: the physical floor of "one more row")], COMMIT; a new aggregate per
// event, and for W-off-100 100 events per aggregate (the counter's update path). Modes interleaved
// biz/row/off/on/off100/off100/on/off/row/biz in --w-slices slices; TPS and p50/p99 of the
// transaction (BEGIN sent to COMMIT returned). Targets: W-off and W-off-100 >= 0.90 x W-row (and
// x W-biz).
#include "../scenarios.hpp"

#include "../support/writers.hpp"

#include <outbox.h>
#include <poll.h>

#include <algorithm>
#include <chrono>
#include <thread>

namespace bench {

namespace {

// Write modes of W: the business transaction alone, with outbox_write (write.notify off, on), and
// with the same event row inserted by a plain INSERT into a bare table (the floor); and
// outbox_write with 100 events per aggregate (the counter's update path; every other mode writes a
// new aggregate per event).
enum class WMode { biz = 0, off = 1, on = 2, row = 3, off100 = 4 };
constexpr int kWModes = 5;
constexpr long kEventsPerAggregate100 = 100;
// Per mode, in enum order: its row key, and what the transaction holds beyond the business row.
struct WModeName {
    const char *key, *what;
};
constexpr WModeName kWModeNames[kWModes] = {
    {"W-biz", " alone"},
    {"W-off", " + outbox_write, write.notify=false"},
    {"W-on", " + outbox_write, write.notify=true"},
    {"W-row", " + the same event row by a plain INSERT into a bare table"},
    {"W-off-100", " + outbox_write, write.notify=false, 100 events per aggregate"},
};
const char *wmode_key(WMode m) {
    return kWModeNames[static_cast<int>(m)].key;
}

// The bare copy of the outbox table W-row inserts into: the same columns and defaults, no key,
// no index, no check.
std::string bare_rows_table(const Run &run) {
    return table_of(run, "bench_event_rows");
}

struct WSlice {
    long txns = 0;
    double seconds = 0, cpu_s = 0;
    std::vector<double> latency_ms; // per transaction, BEGIN sent to COMMIT returned
    CpuTimes machine;               // the machine's CPU time meanwhile, and what the hypervisor took of it
    // The share of the machine's CPU stolen during the slice(s), or -1 when not measured.
    [[nodiscard]] double steal() const {
        return machine.total > 0 ? static_cast<double>(machine.steal) / static_cast<double>(machine.total) : -1;
    }
};

// A LISTEN connection standing in for the relay, draining the run's notifications as they come.
class Listener {
  public:
    explicit Listener(const Run &run) : pg_(run.pg_url) {
        pg_.exec("LISTEN \"" + run.channel + "\"");
        worker_.start([this] { loop(); });
    }
    void stop() { worker_.stop(); }
    [[nodiscard]] long received() const { return notifications_.load(); }
    std::string error; // read after stop()

  private:
    void loop() {
        PGconn *c = pg_.raw();
        while (!worker_.stopping()) {
            pollfd p{PQsocket(c), POLLIN, 0};
            if (poll(&p, 1, 50) > 0) {
                if (PQconsumeInput(c) == 0) {
                    error = PQerrorMessage(c);
                    return;
                }
                while (PGnotify *n = PQnotifies(c)) {
                    notifications_.fetch_add(1);
                    PQfreemem(n);
                }
            }
        }
    }
    Pg pg_;
    std::atomic<long> notifications_{0};
    Worker worker_; // last: joined before the rest goes
};

// What one writer thread of a slice does: `count` transactions, their latencies into `lat`.
struct SliceWriter {
    const Run &run;
    WMode mode;
    int slice, w;
    long count;
    const std::string &payload;
    StartLine &start;
    std::vector<double> &lat;
    std::string &error;
    Clock::time_point &end; // when its last transaction ended (before its connection is closed)

    void operator()() {
        WriterConn c;
        error = c.open(run, mode == WMode::on,
                       {{"aggregate_type", "ORD"},
                        {"operation", "POST"},
                        {"payload", payload},
                        {"metadata", Generator::metadata()},
                        {"user", Generator::user()}});
        auto *pgc = c.db != nullptr ? static_cast<PGconn *>(outbox_db_pgconn(c.db)) : nullptr;
        if (error.empty()) {
            const std::string insert =
                "INSERT INTO " + table_of(run, "bench_orders") + " (customer, amount, body) VALUES ($1, $2, $3)";
            PGresult *prep = PQprepare(pgc, "bench_order", insert.c_str(), 3, nullptr);
            if (PQresultStatus(prep) != PGRES_COMMAND_OK) {
                error = std::string("prepare: ") + PQerrorMessage(pgc);
            }
            PQclear(prep);
        }
        if (error.empty() && mode == WMode::row) {
            // The columns outbox_write fills, as text parameters cast like the library's statement.
            const std::string row = "INSERT INTO " + bare_rows_table(run) +
                                    " (position, aggregate_type, aggregate_id, seq, outbox_id, event_type, operation,"
                                    " payload, metadata, actor, created_at) VALUES (0, $1, $2, 1,"
                                    " CAST($3 AS uuid), $4, $5, CAST($6 AS json), CAST($7 AS json), $8, now())";
            PGresult *prep = PQprepare(pgc, "bench_event_row", row.c_str(), 8, nullptr);
            if (PQresultStatus(prep) != PGRES_COMMAND_OK) {
                error = std::string("prepare: ") + PQerrorMessage(pgc);
            }
            PQclear(prep);
        }
        if (error.empty()) {
            start.arrive_and_wait();
            write_all(c, pgc);
        }
        end = Clock::now();
        if (!error.empty()) {
            start.give_up(); // never leave the starter waiting
        }
    }

    void write_all(WriterConn &c, PGconn *pgc) {
        const std::string key = wmode_key(mode);
        lat.reserve(static_cast<size_t>(count));
        auto fail = [&](const std::string &what) { error = what + ": " + outbox_last_error(); };
        char agg[48], customer[48];
        for (long i = 0; i < count; ++i) {
            const long per_aggregate = mode == WMode::off100 ? kEventsPerAggregate100 : 1;
            std::snprintf(agg, sizeof agg, "%s%03d-%02d-%09ld", key.c_str(), slice, w, i / per_aggregate);
            std::snprintf(customer, sizeof customer, "c%02d-%09ld", w, i);
            const auto t0 = Clock::now();
            if (outbox_db_exec(c.db, "BEGIN") != OUTBOX_OK) {
                return fail("BEGIN");
            }
            const char *vals[3] = {customer, "99.99", payload.c_str()};
            PGresult *res = PQexecPrepared(pgc, "bench_order", 3, vals, nullptr, nullptr, 0);
            const bool ok = PQresultStatus(res) == PGRES_COMMAND_OK;
            PQclear(res);
            if (!ok) {
                error = std::string("INSERT: ") + PQerrorMessage(pgc);
                return;
            }
            if (mode == WMode::row && !insert_row(pgc, agg, i)) {
                return;
            }
            if (mode == WMode::off || mode == WMode::on || mode == WMode::off100) {
                if (outbox_event_set(c.ev, "aggregate_id", agg) != OUTBOX_OK) {
                    return fail("aggregate_id");
                }
                if (outbox_write(c.db, c.ev) != OUTBOX_OK) {
                    return fail("outbox_write");
                }
            }
            if (outbox_db_exec(c.db, "COMMIT") != OUTBOX_OK) {
                return fail("COMMIT");
            }
            lat.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
            if (g_interrupted.load()) {
                error = "interrupted";
                return;
            }
        }
    }

    // W-row: the event row outbox_write would store, by a plain prepared INSERT. Its metadata and
    // user are made once, as the outbox_write modes set them once on their event.
    const std::string metadata = Generator::metadata();
    const std::string user = Generator::user();
    bool insert_row(PGconn *pgc, const char *agg, long i) {
        char id[64];
        std::snprintf(id, sizeof id, "00000000-%04x-7000-8000-%012ld", static_cast<unsigned>(slice * 64 + w) & 0xffffU,
                      i);
        const char *vals[8] = {"ORD", agg, id, "OrderCreated", "POST", payload.c_str(), metadata.c_str(), user.c_str()};
        PGresult *res = PQexecPrepared(pgc, "bench_event_row", 8, vals, nullptr, nullptr, 0);
        const bool ok = PQresultStatus(res) == PGRES_COMMAND_OK;
        if (!ok) {
            error = std::string("INSERT of the event row: ") + PQerrorMessage(pgc);
        }
        PQclear(res);
        return ok;
    }
};

// One slice of a write mode: `writes` transactions over o.writers threads, each with its own
// connection (outbox_db_open). A transaction is one business row (INSERT INTO bench_orders), plus,
// unless mode is biz, one outbox_write whose payload is that row as JSON.
WSlice run_writes(Run &run, const Options &o, WMode mode, int slice, long writes) {
    const bool notify = mode == WMode::on;
    const std::string key = wmode_key(mode);
    Listener listener(run);
    const long per_writer = std::max(1L, writes / o.writers);
    const long total = per_writer * o.writers;
    StartLine start;
    std::vector<std::string> errors(static_cast<size_t>(o.writers));
    std::vector<std::vector<double>> lat(static_cast<size_t>(o.writers));
    // The business row's text column and the event payload: the same bytes, w_payload_bytes long.
    Generator pg_payload;
    pg_payload.payload_bytes = o.w_payload_bytes;
    pg_payload.prefix = 'w';
    pg_payload.aggregates = total;
    pg_payload.count = total;
    std::string payload;
    pg_payload.payload(payload, 0);
    std::vector<std::thread> threads;
    std::vector<Clock::time_point> ends(static_cast<size_t>(o.writers));
    threads.reserve(static_cast<size_t>(o.writers));
    for (int w = 0; w < o.writers; ++w) {
        const auto i = static_cast<size_t>(w);
        threads.emplace_back(SliceWriter{run, mode, slice, w, per_writer, payload, start, lat[i], errors[i], ends[i]});
    }
    start.wait_for(o.writers);
    const double cpu0 = cpu_seconds();
    const CpuTimes machine0 = cpu_times();
    const auto t0 = Clock::now();
    start.release();
    for (auto &th : threads) {
        th.join();
    }
    const double cpu = cpu_seconds() - cpu0;
    const CpuTimes machine1 = cpu_times();
    const Clock::time_point t1 = std::max(t0, *std::max_element(ends.begin(), ends.end()));
    // Notifications are delivered at commit; give the listener a moment to drain the last ones.
    for (int k = 0; k < 40 && notify && listener.received() < total; ++k) {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    listener.stop();
    for (const auto &e : errors) {
        if (!e.empty()) {
            die(key + ": writer failed: " + e);
        }
    }
    if (!listener.error.empty()) {
        die(key + ": listener failed: " + listener.error);
    }
    const long got = listener.received();
    expect(run, notify ? got == total : got == 0,
           key + ": the listener received " + std::to_string(got) + " notification(s), expected " +
               std::to_string(notify ? total : 0));
    WSlice ws;
    ws.txns = total;
    ws.seconds = seconds_between(t0, t1);
    ws.cpu_s = cpu;
    ws.machine.total = machine1.total - machine0.total;
    ws.machine.steal = machine1.steal - machine0.steal;
    for (auto &v : lat) {
        ws.latency_ms.insert(ws.latency_ms.end(), v.begin(), v.end());
    }
    return ws;
}

// Every mode's slices summed, and each slice's TPS (for the pairwise ratios).
struct WSums {
    WSlice sum[kWModes];
    std::vector<double> rates[kWModes];
};

// Slices of the modes interleaved biz, row, off, on, off100, off100, on, off, row, biz, ... so a burst of
// background I/O (other commits, a checkpoint) lands on every mode alike. Attempt k of the judging
// numbers its slices after the earlier attempts', so every event still has an aggregate of its own.
WSums measure_modes(Run &run, const Options &o, long slice_writes, int attempt) {
    WSums s;
    const WMode fwd[kWModes] = {WMode::biz, WMode::row, WMode::off, WMode::on, WMode::off100};
    for (int round = 0; round < o.w_slices; ++round) {
        for (int k = 0; k < kWModes; ++k) {
            const WMode m = fwd[round % 2 == 0 ? k : kWModes - 1 - k];
            WSlice ws = run_writes(run, o, m, (attempt - 1) * o.w_slices + round, slice_writes);
            WSlice &acc = s.sum[static_cast<int>(m)];
            acc.txns += ws.txns;
            acc.seconds += ws.seconds;
            acc.cpu_s += ws.cpu_s;
            acc.machine.total += ws.machine.total;
            acc.machine.steal += ws.machine.steal;
            acc.latency_ms.insert(acc.latency_ms.end(), ws.latency_ms.begin(), ws.latency_ms.end());
            s.rates[static_cast<int>(m)].push_back(static_cast<double>(ws.txns) / ws.seconds);
        }
    }
    return s;
}

// The row and figure of mode k against the business row alone; its point of the series.
void mode_row(Run &run, const Options &o, const WSums &s, int k, Json &series, const Judging &how) {
    const WMode m = static_cast<WMode>(k);
    const double biz_tps = static_cast<double>(s.sum[0].txns) / s.sum[0].seconds;
    Row r;
    r.key = wmode_key(m);
    r.what = std::to_string(o.writers) + " writers, one business row per transaction" + kWModeNames[k].what;
    r.events = s.sum[k].txns;
    r.seconds = s.sum[k].seconds;
    r.client_cpu_s = s.sum[k].cpu_s;
    r.steal = s.sum[k].steal();
    // Pairwise ratios against the biz slice of the same round.
    std::vector<double> pairs;
    for (size_t i = 0; i < s.rates[k].size() && i < s.rates[0].size(); ++i) {
        pairs.push_back(s.rates[k][i] / s.rates[0][i]);
    }
    const double p50 = percentile(s.sum[k].latency_ms, 50);
    const double p99 = percentile(s.sum[k].latency_ms, 99);
    r.extra = Json::object().integer("slices", static_cast<long long>(s.rates[k].size()));
    r.extra.set("slice_tps", Json::numbers(s.rates[k], 1)).num("p50_ms", p50, 3).num("p99_ms", p99, 3);
    r.extra.num("pair_ratio_median", median(pairs), 4);
    series.push(Json::object().str("mode", r.key).num("tps", r.rate(), 1).num("p50_ms", p50, 3).num("p99_ms", p99, 3));
    Figure f;
    f.section = "5 write overhead";
    f.name = r.what;
    f.value = fixed(r.rate(), 0) + " TPS, p50 " + fixed(p50, 2) + " ms, p99 " + fixed(p99, 2) + " ms";
    if (m != WMode::biz) {
        r.ratio_value = r.rate() / biz_tps;
        r.ratio = std::string(r.key) + "/W-biz = " + fixed(r.ratio_value, 2) + " (slice pairs: median " +
                  fixed(median(pairs), 2) + ")";
        f.baseline = "business row alone " + fixed(biz_tps, 0) + " TPS, p50 " +
                     fixed(percentile(s.sum[0].latency_ms, 50), 2) + " ms";
        f.ratio = r.ratio_value;
        record_sides(f, how, r.steal, s.sum[0].steal());
        if (m == WMode::off || m == WMode::off100) {
            f.target = "≥ 0.90 (≤ 10% TPS loss, defaults)";
            judge(f, how, f.ratio >= 0.9, r.steal, s.sum[0].steal());
            r.target = "≥ 0.90: " + f.verdict;
        } else if (m == WMode::on) {
            f.target = "reported (write.notify is off by default)";
        } else {
            f.target = "reported (the floor of one more row)";
        }
    }
    add_figure(run, f);
    run.rows.push_back(r);
}

// outbox_write (mode off, or off100) against the floor: the same transaction with the same event row
// by a plain INSERT into a bare table, pairwise per round as above (issues 19 and 30: >= 0.90, the
// slice-pair median too).
void floor_figure(Run &run, const Options &o, const WSums &s, WMode mode, const Judging &how) {
    const int off = static_cast<int>(mode);
    const int row = static_cast<int>(WMode::row);
    std::vector<double> pairs;
    for (size_t i = 0; i < s.rates[off].size() && i < s.rates[row].size(); ++i) {
        pairs.push_back(s.rates[off][i] / s.rates[row][i]);
    }
    const double off_tps = static_cast<double>(s.sum[off].txns) / s.sum[off].seconds;
    const double row_tps = static_cast<double>(s.sum[row].txns) / s.sum[row].seconds;
    Figure f;
    f.section = "5 write overhead";
    f.name = std::to_string(o.writers) + " writers: outbox_write" +
             (mode == WMode::off100 ? ", 100 events per aggregate," : std::string()) +
             " against the same event row by a plain INSERT";
    f.value = fixed(off_tps, 0) + " TPS, p99 " + fixed(percentile(s.sum[off].latency_ms, 99), 2) +
              " ms (slice pairs: median " + fixed(median(pairs), 2) + ")";
    f.baseline = "business row + the event row in a bare table " + fixed(row_tps, 0) + " TPS, p99 " +
                 fixed(percentile(s.sum[row].latency_ms, 99), 2) + " ms";
    f.ratio = off_tps / row_tps;
    f.target = "≥ 0.90, the slice-pair median too (issue 30)";
    judge(f, how, f.ratio >= 0.9 && median(pairs) >= 0.9, s.sum[off].steal(), s.sum[row].steal());
    add_figure(run, f);
}

// The sides W's verdicts compare: the business row alone, W-off and W-row.
std::vector<double> judged_sides(const WSums &w) {
    return {w.sum[static_cast<int>(WMode::biz)].steal(), w.sum[static_cast<int>(WMode::off)].steal(),
            w.sum[static_cast<int>(WMode::row)].steal(), w.sum[static_cast<int>(WMode::off100)].steal()};
}

} // namespace

void scenario_writes(Bench &b) {
    Run &run = b.run;
    const Options &o = b.o;
    progress("W: " + std::to_string(o.writers) + " writers, " + std::to_string(o.writes) +
             " transactions per mode (one business row; plus one outbox_write, or the same event row into a"
             " bare table), in " +
             std::to_string(o.w_slices) + " interleaved slices per mode");
    b.pg.exec("CREATE TABLE IF NOT EXISTS " + table_of(run, "bench_orders") +
              " (id bigserial PRIMARY KEY, customer text NOT NULL, amount numeric(12,2) NOT NULL,"
              " body text NOT NULL, created_at timestamptz NOT NULL DEFAULT now())");
    b.pg.exec("CREATE TABLE IF NOT EXISTS " + bare_rows_table(run) + " (LIKE " + table_of(run, "outbox_events") +
              " INCLUDING DEFAULTS)");
    b.pg.exec("CHECKPOINT");
    const long slice_writes = std::max(1L, o.writes / o.w_slices);
    // The modes, measured interleaved, are the sides of every W figure: judged together.
    const auto q = measure_quiet<WSums>(
        "W", quiet_rule(o), [&](int attempt) { return measure_modes(run, o, slice_writes, attempt); }, judged_sides);
    const WSums &s = q.value;
    Json series = Json::array();
    for (int k = 0; k < kWModes; ++k) {
        mode_row(run, o, s, k, series, q.how);
    }
    floor_figure(run, o, s, WMode::off, q.how);
    floor_figure(run, o, s, WMode::off100, q.how);
    run.series["write"] = series;
    run.notes.push_back(
        "W: each writer its own connection (outbox_db_open), synchronous_commit on; a transaction is BEGIN, "
        "INSERT INTO bench_orders (a " +
        std::to_string(o.w_payload_bytes) + "-byte text column), [outbox_write of a " +
        std::to_string(o.w_payload_bytes) +
        "-byte payload, a new aggregate per event (W-off-100: 100 events per aggregate, each writer its own) | the "
        "same event row by a prepared plain INSERT into "
        "bench_event_rows, a copy of the outbox table's columns and defaults without key or index], COMMIT; "
        "latency is BEGIN sent to COMMIT returned; " +
        std::to_string(o.w_slices) + " slices of " + std::to_string(slice_writes) +
        " transactions per mode, interleaved biz/row/off/on/off100/off100/on/off/row/biz; a LISTEN connection drains "
        "the channel");
    b.phase("W");
}

} // namespace bench
