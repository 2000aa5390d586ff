// Fault-suite writer: commits events through the public C API under load and logs the outcome of
// every event it ever wrote, so the checker knows exactly what was committed and what was not.
//
//   outbox_fault_writer --name W --schema S --log FILE [--aggregates K] [--prefix P]
//                       [--rate TX_PER_S] [--rollback-pct N] [--hold-max-ms N] [--hold-first-s N]
//                       [--seed N]
//
// Each transaction: BEGIN, txid_current(), 1-3 outbox_write()s on random aggregates, then COMMIT
// (or, for --rollback-pct of them, a deliberate ROLLBACK). Log lines (one write(2) each, so a
// line is whole even when the process dies right after):
//   C <event-id> <aggregate-id> <seq> <how>   committed; how = commit | late (held >= 10 s) |
//                                             resolved (txid_status)
//   A <event-id> <aggregate-id> <seq> <how>   not committed; how = rollback | error | resolved
// A COMMIT whose reply was lost (the server died, the connection broke) has an unknown outcome:
// the writer reconnects, waits until txid_status() of the txid it read before COMMIT is no longer
// 'in progress', then reads the event rows back: present = committed. A txid the server has not
// handed out yet ("in the future": a promoted standby that never received the transaction's WAL,
// or a crash that lost it) was never begun there: its rows decide at once. A txid_status() that
// disagrees with the rows is logged as  T <txid> <status> <rows>  (see resolve()). Nothing is
// logged as C or A before the outcome is certain.
// --hold-max-ms keeps each transaction open a random time before COMMIT; --hold-first-s holds the
// first one that long (late commits; a held transaction always commits). Reads OUTBOX_PG_URL; stops after the current
// transaction on SIGTERM/SIGINT.
#include <outbox.h>

#include <libpq-fe.h>

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace {

std::atomic<bool> g_stop{false};
extern "C" void on_stop(int) {
    g_stop.store(true);
}

struct Options {
    std::string name = "w";
    std::string schema = "public";
    std::string log;
    std::string prefix = "a";
    int aggregates = 50;
    double rate = 20;
    int rollback_pct = 10;
    int hold_max_ms = 0;
    int hold_first_s = 0;
    unsigned seed = 1;
};

struct Written {
    std::string id, aggregate;
    long long seq = 0;
};

int g_log = -1;

void log_line(const std::string &line) {
    std::string l = line + "\n";
    const char *p = l.data();
    size_t left = l.size();
    while (left > 0) {
        ssize_t n = ::write(g_log, p, left);
        if (n < 0) {
            std::perror("write log");
            std::exit(3);
        }
        p += n;
        left -= static_cast<size_t>(n);
    }
}

// One line per event: <kind> <id> <aggregate> <seq> <how> <epoch-ms when the outcome was known>.
void log_events(char kind, const std::vector<Written> &ws, const char *how) {
    const auto ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
            .count();
    for (const auto &w : ws) {
        log_line(std::string(1, kind) + " " + w.id + " " + w.aggregate + " " + std::to_string(w.seq) + " " + how + " " +
                 std::to_string(ms));
    }
}

void sleep_ms(long long ms) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
    while (!g_stop.load() && std::chrono::steady_clock::now() < until) {
        std::this_thread::sleep_for(std::chrono::milliseconds(std::min<long long>(ms, 50)));
    }
}

// A fresh connection, retried until the server is back (or a stop).
outbox_db *connect(const char *url, const outbox_config *cfg, bool honour_stop = true) {
    int backoff = 100;
    while (true) {
        outbox_db *db = nullptr;
        if (outbox_db_open(&db, url, cfg) == OUTBOX_OK) {
            return db;
        }
        if (honour_stop && g_stop.load()) {
            return nullptr;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(backoff));
        backoff = std::min(backoff * 2, 2000);
    }
}

std::string scalar(PGconn *pg, const char *sql, const std::vector<std::string> &params, bool *ok,
                   std::string *sqlstate = nullptr) {
    std::vector<const char *> p;
    for (const auto &s : params) {
        p.push_back(s.c_str());
    }
    PGresult *r = PQexecParams(pg, sql, static_cast<int>(p.size()), nullptr, p.data(), nullptr, nullptr, 0);
    std::string out;
    *ok = PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1;
    if (sqlstate != nullptr) {
        const char *state = PQresultErrorField(r, PG_DIAG_SQLSTATE);
        *sqlstate = state != nullptr ? state : "";
    }
    if (*ok && !PQgetisnull(r, 0, 0)) {
        out = PQgetvalue(r, 0, 0);
    }
    PQclear(r);
    return out;
}

// Outcome of transaction `txid` whose COMMIT reply was lost: true = committed. Asks on a new
// connection (the old one is broken), retrying until the server answers; waits while the
// transaction is still in progress (its backend may not have noticed the broken socket yet).
bool resolve(const char *url, const outbox_config *cfg, const std::string &txid, const std::string &table,
             const std::vector<Written> &ws) {
    while (true) {
        // A stop does not cut this short: an unknown outcome is never guessed.
        outbox_db *db = connect(url, cfg, false);
        PGconn *pg = static_cast<PGconn *>(outbox_db_pgconn(db));
        bool ok = false;
        std::string state;
        std::string status = scalar(pg, "SELECT txid_status(CAST($1 AS bigint))", {txid}, &ok, &state);
        // 22023: "transaction ID ... is in the future". After a failover the writers' own
        // unreplicated txids are such, and while every writer waits here nothing may move the new
        // primary's counter past them: waiting for it to would never end.
        if (!ok && state == "22023") {
            ok = true;
            status = "not yet handed out";
        }
        if (!ok) {
            outbox_db_close(db);
            std::this_thread::sleep_for(std::chrono::milliseconds(200));
            continue;
        }
        if (status == "in progress") {
            outbox_db_close(db);
            std::this_thread::sleep_for(std::chrono::milliseconds(200));
            continue;
        }
        // The rows decide: event ids are unique and the transaction is over, so its rows are
        // visible exactly when it committed. txid_status() alone is not enough: after a crash
        // restart an xid whose WAL never reached disk is handed out again, and the status then
        // reported is that of the new transaction (seen here: 'committed' for a lost COMMIT).
        std::string ids = "{";
        for (size_t i = 0; i < ws.size(); ++i) {
            ids += (i ? "," : "") + ws[i].id;
        }
        ids += "}";
        std::string sql = "SELECT count(*) FROM " + table + " WHERE outbox_id = ANY(CAST($1 AS uuid[]))";
        std::string n = scalar(pg, sql.c_str(), {ids}, &ok);
        outbox_db_close(db);
        if (!ok) {
            std::this_thread::sleep_for(std::chrono::milliseconds(200));
            continue;
        }
        const long long rows = std::atoll(n.c_str());
        if (rows != 0 && rows != static_cast<long long>(ws.size())) {
            std::fprintf(stderr, "writer: %lld of the %zu events of txid %s exist: a torn transaction\n", rows,
                         ws.size(), txid.c_str());
            log_line("X txid " + txid + " status '" + status + "' rows " + n);
            std::exit(4);
        }
        const bool committed = rows != 0;
        if (committed != (status == "committed")) {
            std::fprintf(stderr, "writer: txid_status(%s) = '%s' but %lld of %zu event rows exist\n", txid.c_str(),
                         status.c_str(), rows, ws.size());
            log_line("T " + txid + " " + status + " " + n);
        }
        return committed;
    }
}

bool parse(int argc, char **argv, Options &o) {
    for (int i = 1; i < argc; ++i) {
        std::string a = argv[i];
        if (i + 1 >= argc) {
            return false;
        }
        std::string v = argv[++i];
        if (a == "--name")
            o.name = v;
        else if (a == "--schema")
            o.schema = v;
        else if (a == "--log")
            o.log = v;
        else if (a == "--prefix")
            o.prefix = v;
        else if (a == "--aggregates")
            o.aggregates = std::atoi(v.c_str());
        else if (a == "--rate")
            o.rate = std::atof(v.c_str());
        else if (a == "--rollback-pct")
            o.rollback_pct = std::atoi(v.c_str());
        else if (a == "--hold-max-ms")
            o.hold_max_ms = std::atoi(v.c_str());
        else if (a == "--hold-first-s")
            o.hold_first_s = std::atoi(v.c_str());
        else if (a == "--seed")
            o.seed = static_cast<unsigned>(std::strtoul(v.c_str(), nullptr, 10));
        else
            return false;
    }
    return !o.log.empty() && o.aggregates > 0 && o.rate > 0;
}

} // namespace

int main(int argc, char **argv) {
    Options o;
    if (!parse(argc, argv, o)) {
        std::fprintf(stderr,
                     "usage: %s --name W --schema S --log FILE [--aggregates K] [--prefix P] [--rate TX_PER_S]\n"
                     "          [--rollback-pct N] [--hold-max-ms N] [--hold-first-s N] [--seed N]\n",
                     argv[0]);
        return 2;
    }
    const char *url = std::getenv("OUTBOX_PG_URL");
    if (url == nullptr) {
        std::fprintf(stderr, "writer: OUTBOX_PG_URL is not set\n");
        return 2;
    }
    g_log = ::open(o.log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (g_log < 0) {
        std::perror(o.log.c_str());
        return 2;
    }
    std::signal(SIGTERM, on_stop);
    std::signal(SIGINT, on_stop);
    std::signal(SIGPIPE, SIG_IGN);

    outbox_config *cfg = nullptr;
    outbox_config_new(&cfg);
    if (outbox_config_set(cfg, "outbox.schema", o.schema.c_str()) != OUTBOX_OK) {
        std::fprintf(stderr, "writer: %s\n", outbox_last_error());
        return 2;
    }
    const std::string table = "\"" + o.schema + "\".outbox";
    std::mt19937 rng(o.seed);
    outbox_event *ev = nullptr;
    outbox_event_new(&ev);
    outbox_db *db = nullptr;
    long long n = 0, commits = 0, rollbacks = 0, errors = 0, resolved = 0;
    const auto period = std::chrono::microseconds(static_cast<long long>(1e6 / o.rate));
    auto next = std::chrono::steady_clock::now();

    while (!g_stop.load()) {
        if (db == nullptr || outbox_db_tx_state(db) == OUTBOX_TX_UNKNOWN) {
            outbox_db_close(db);
            db = connect(url, cfg);
            if (db == nullptr) {
                break;
            }
        }
        PGconn *pg = static_cast<PGconn *>(outbox_db_pgconn(db));
        std::vector<Written> ws;
        std::string txid;
        bool ok = outbox_db_exec(db, "BEGIN") == OUTBOX_OK;
        if (ok) {
            txid = scalar(pg, "SELECT txid_current()", {}, &ok);
        }
        const int events = 1 + static_cast<int>(rng() % 3);
        for (int i = 0; ok && i < events; ++i) {
            const std::string agg = o.prefix + std::to_string(rng() % static_cast<unsigned>(o.aggregates));
            const std::string payload = "{\"writer\":\"" + o.name + "\",\"n\":" + std::to_string(++n) + "}";
            outbox_event_set(ev, "aggregate_type", "FLT");
            outbox_event_set(ev, "aggregate_id", agg.c_str());
            outbox_event_set(ev, "operation", "PUT");
            outbox_event_set(ev, "payload", payload.c_str());
            const outbox_status st = outbox_write(db, ev);
            const char *id = outbox_event_id(ev);
            if (st != OUTBOX_OK) {
                ok = false;
                if (id != nullptr) {
                    ws.push_back({id, agg, 0}); // never committed: the transaction fails with it
                }
                std::fprintf(stderr, "writer %s: write: %s: %s\n", o.name.c_str(), outbox_status_name(st),
                             outbox_last_error());
                break;
            }
            ws.push_back({id, agg, static_cast<long long>(outbox_event_seq(ev))});
        }
        if (!ok) {
            // Nothing was committed: COMMIT was never sent. The server rolls back (or already did).
            ++errors;
            log_events('A', ws, "error");
            // After a failed write the handle keeps its event id (for a retry of the same event);
            // the next transaction writes new events, so it gets a fresh handle.
            outbox_event_free(ev);
            outbox_event_new(&ev);
            if (outbox_db_tx_state(db) != OUTBOX_TX_UNKNOWN) {
                outbox_db_exec(db, "ROLLBACK");
            }
            outbox_db_close(db);
            db = nullptr;
            sleep_ms(100);
            continue;
        }
        long long hold = 0;
        if (o.hold_first_s > 0 && commits + rollbacks == 0) {
            hold = o.hold_first_s * 1000LL;
            std::fprintf(stderr, "writer %s: holding txid %s open for %d s\n", o.name.c_str(), txid.c_str(),
                         o.hold_first_s);
        } else if (o.hold_max_ms > 0) {
            hold = static_cast<long long>(rng() % static_cast<unsigned>(o.hold_max_ms + 1));
        }
        if (hold > 0) {
            // The hold is not cut short by a stop: the late commit is the point.
            const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(hold);
            while (std::chrono::steady_clock::now() < until) {
                std::this_thread::sleep_for(std::chrono::milliseconds(20));
            }
        }
        const bool late = hold >= 10000;
        if (!late && static_cast<int>(rng() % 100) < o.rollback_pct) {
            // Rolled back: even if ROLLBACK's reply is lost, the transaction never committed.
            outbox_db_exec(db, "ROLLBACK");
            log_events('A', ws, "rollback");
            ++rollbacks;
        } else if (outbox_db_exec(db, "COMMIT") == OUTBOX_OK) {
            log_events('C', ws, late ? "late" : "commit");
            ++commits;
        } else {
            std::fprintf(stderr, "writer %s: COMMIT of txid %s failed (%s); resolving its outcome\n", o.name.c_str(),
                         txid.c_str(), outbox_last_error());
            outbox_db_close(db);
            db = nullptr;
            const bool committed = resolve(url, cfg, txid, table, ws);
            log_events(committed ? 'C' : 'A', ws, "resolved");
            ++resolved;
            (committed ? commits : rollbacks) += 1;
        }
        next += period;
        const auto now = std::chrono::steady_clock::now();
        if (next < now) {
            next = now;
        } else {
            sleep_ms(std::chrono::duration_cast<std::chrono::milliseconds>(next - now).count());
        }
    }
    outbox_db_close(db);
    outbox_event_free(ev);
    outbox_config_free(cfg);
    std::fprintf(stderr, "writer %s: %lld committed, %lld rolled back, %lld failed before commit, %lld resolved\n",
                 o.name.c_str(), commits, rollbacks, errors, resolved);
    ::close(g_log);
    return 0;
}
