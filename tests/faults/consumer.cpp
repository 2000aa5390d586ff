// Fault-suite consumer: the consumer runtime of the public C API (outbox_consumer_run: BEGIN,
// dedupe, handler, COMMIT, ack) with a handler that applies one effect per event, and a log of
// every delivery it saw.
//
//   outbox_fault_consumer --name C --schema S --exchange X --log FILE [--handler-sleep-us N]
//                         [--fail-pct N --fixed-file PATH] [--set key=value]...
//
// The handler, inside the consumer's transaction, inserts (consumer, event) into <schema>.effects;
// a second application of the same event would raise the row's n above 1, which the checker
// counts. Log lines (one write(2) each, so they survive a kill -9 whole):
//   R <event-id> <aggregate-id> <seq> <delivery-count> <epoch-ms> <order>  the handler ran (first time per
//     dedupe); <order> is the inbox's report: in_order, stale, gap or unchecked
//   D <event-id>                                        a redelivery the inbox answered "seen"
//   F <event-id> <aggregate-id> <seq> <class> <epoch-ms>  the handler failed on purpose (rolled back)
//   L <epoch-ms> <level> <message>                      the runtime's log (reconnects, errors)
// --fail-pct N (faults 15, 16: parked aggregates): the handler fails for the aggregates whose
// FNV-1a hash of the id is below N modulo 100, in a class chosen by (hash / 100) % 3, the same as
// failing_class() in check.py:
//   flaky      each event fails its first 2 runs in this process (transient), then succeeds
//   broken     transient failure until the file --fixed-file exists ("the fix is deployed")
//   permanent  events with an odd seq fail with OUTBOX_HANDLER_PERMANENT (only a skip gets past
//              them); even ones succeed
// Reads OUTBOX_PG_URL and OUTBOX_AMQP_URL; stops on SIGTERM/SIGINT.
#include <outbox.h>

#include <libpq-fe.h>

#include <fcntl.h>
#include <sys/time.h>
#include <unistd.h>

#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace {

outbox_consumer *g_consumer = nullptr;
extern "C" void on_stop(int) {
    outbox_consumer_stop(g_consumer);
}

int g_log = -1;

void log_line(const std::string &line) {
    std::string l = line + "\n";
    const char *p = l.data();
    size_t left = l.size();
    while (left > 0) {
        ssize_t n = ::write(g_log, p, left);
        if (n < 0) {
            std::perror("write log");
            std::_Exit(3);
        }
        p += n;
        left -= static_cast<size_t>(n);
    }
}

long long now_ms() {
    timeval tv{};
    gettimeofday(&tv, nullptr);
    return static_cast<long long>(tv.tv_sec) * 1000 + tv.tv_usec / 1000;
}

struct Ctx {
    std::string name;
    std::string insert_sql;
    long sleep_us = 0;
    int fail_pct = 0;
    std::string fixed_file;
    std::mutex mu;
    std::unordered_map<std::string, int> runs; // flaky class: handler runs per event in this process
};

uint32_t fnv1a(const char *s) {
    uint32_t h = 2166136261u;
    for (; *s != '\0'; ++s) {
        h ^= static_cast<unsigned char>(*s);
        h *= 16777619u;
    }
    return h;
}

// The class of an aggregate's failures: nullptr for one that never fails.
const char *failing_class(const Ctx &ctx, const char *agg) {
    const uint32_t h = fnv1a(agg);
    if (ctx.fail_pct <= 0 || static_cast<int>(h % 100) >= ctx.fail_pct) {
        return nullptr;
    }
    static const char *const classes[] = {"flaky", "broken", "permanent"};
    return classes[(h / 100) % 3];
}

// 0 (go on), or the handler's failing return value for this run of the event.
int planned_failure(Ctx &ctx, const char *cls, const char *id, int64_t seq) {
    if (cls == nullptr) {
        return 0;
    }
    const std::string c = cls;
    if (c == "flaky") {
        std::lock_guard<std::mutex> lock(ctx.mu);
        return ctx.runs[id]++ < 2 ? 1 : 0;
    }
    if (c == "broken") {
        return access(ctx.fixed_file.c_str(), F_OK) == 0 ? 0 : 1;
    }
    return seq % 2 == 1 ? OUTBOX_HANDLER_PERMANENT : 0;
}

int handle(outbox_db *tx, const outbox_message *msg, void *ud) {
    auto *ctx = static_cast<Ctx *>(ud);
    const char *id = outbox_message_field(msg, "OUTBOX_ID");
    const char *agg = outbox_message_field(msg, "AGGREGATE_ID");
    const std::string seq = std::to_string(outbox_message_seq(msg));
    const char *cls = failing_class(*ctx, agg);
    const int fail = planned_failure(*ctx, cls, id, outbox_message_seq(msg));
    if (fail != 0) {
        log_line(std::string("F ") + id + " " + agg + " " + seq + " " + cls + " " + std::to_string(now_ms()));
        outbox_handler_error((std::string("fault suite: ") + cls + " aggregate " + agg + ", seq " + seq).c_str());
        return fail;
    }
    // The inbox's order report goes in too: the checker requires every event applied after a
    // later one of its aggregate to be a redelivery the library flagged as stale.
    static const char *const orders[] = {"unchecked", "in_order", "stale", "gap"};
    const int order = outbox_message_order(msg);
    log_line(std::string("R ") + id + " " + agg + " " + seq + " " + std::to_string(outbox_message_delivery_count(msg)) +
             " " + std::to_string(now_ms()) + " " + (order >= 0 && order <= 3 ? orders[order] : "?"));
    if (ctx->sleep_us > 0) {
        usleep(static_cast<useconds_t>(ctx->sleep_us));
    }
    auto *pg = static_cast<PGconn *>(outbox_db_pgconn(tx));
    const char *params[] = {ctx->name.c_str(), id, agg, seq.c_str()};
    PGresult *r = PQexecParams(pg, ctx->insert_sql.c_str(), 4, nullptr, params, nullptr, nullptr, 0);
    const bool ok = PQresultStatus(r) == PGRES_COMMAND_OK;
    PQclear(r);
    if (!ok) {
        outbox_handler_error(PQerrorMessage(pg));
        return 1;
    }
    return 0;
}

void on_log(outbox_log_level level, const char *message, void *) {
    static const char *names[] = {"debug", "info", "warn", "error"};
    const std::string m = message;
    // The runtime's note for a redelivery it skipped: "consumer N: event <id> (...) was already processed".
    const std::string seen = ") was already processed";
    const size_t ev = m.find(": event ");
    if (ev != std::string::npos && m.find(seen) != std::string::npos) {
        const size_t start = ev + 8;
        log_line("D " + m.substr(start, m.find(' ', start) - start));
        return;
    }
    log_line("L " + std::to_string(now_ms()) + " " + names[static_cast<int>(level) & 3] + " " + m);
}

} // namespace

int main(int argc, char **argv) {
    std::string name, schema, exchange, log;
    Ctx ctx;
    std::vector<std::pair<std::string, std::string>> sets;
    for (int i = 1; i + 1 < argc; i += 2) {
        const std::string a = argv[i], v = argv[i + 1];
        if (a == "--name")
            name = v;
        else if (a == "--schema")
            schema = v;
        else if (a == "--exchange")
            exchange = v;
        else if (a == "--log")
            log = v;
        else if (a == "--handler-sleep-us")
            ctx.sleep_us = std::atol(v.c_str());
        else if (a == "--fail-pct")
            ctx.fail_pct = std::atoi(v.c_str());
        else if (a == "--fixed-file")
            ctx.fixed_file = v;
        else if (a == "--set" && v.find('=') != std::string::npos)
            sets.emplace_back(v.substr(0, v.find('=')), v.substr(v.find('=') + 1));
        else {
            name.clear();
            break;
        }
    }
    if (name.empty() || schema.empty() || exchange.empty() || log.empty() || argc % 2 == 0) {
        std::fprintf(stderr,
                     "usage: %s --name C --schema S --exchange X --log FILE [--handler-sleep-us N] [--fail-pct N "
                     "--fixed-file PATH]"
                     " [--set k=v]...\n",
                     argv[0]);
        return 2;
    }
    g_log = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (g_log < 0) {
        std::perror(log.c_str());
        return 2;
    }
    ctx.name = name;
    ctx.insert_sql = "INSERT INTO \"" + schema +
                     "\".effects (consumer, outbox_id, aggregate_id, seq, n) VALUES ($1, $2, $3, $4, 1)"
                     " ON CONFLICT (consumer, outbox_id) DO UPDATE SET n = effects.n + 1";
    const char *pg = std::getenv("OUTBOX_PG_URL");
    const char *amqp = std::getenv("OUTBOX_AMQP_URL");
    outbox_config *cfg = nullptr;
    outbox_config_new(&cfg);
    sets.insert(sets.begin(), {{"outbox.schema", schema}, {"amqp.exchange", exchange}});
    if (pg != nullptr)
        sets.insert(sets.begin(), {"pg.url", pg});
    if (amqp != nullptr)
        sets.insert(sets.begin(), {"amqp.url", amqp});
    for (const auto &[k, v] : sets) {
        if (outbox_config_set(cfg, k.c_str(), v.c_str()) != OUTBOX_OK) {
            std::fprintf(stderr, "consumer: %s=%s: %s\n", k.c_str(), v.c_str(), outbox_last_error());
            return 2;
        }
    }
    if (outbox_consumer_new(&g_consumer, cfg, name.c_str()) != OUTBOX_OK) {
        std::fprintf(stderr, "consumer: %s\n", outbox_last_error());
        return 2;
    }
    outbox_consumer_set_logger(g_consumer, on_log, nullptr);
    std::signal(SIGTERM, on_stop);
    std::signal(SIGINT, on_stop);
    std::signal(SIGPIPE, SIG_IGN);
    const outbox_status st = outbox_consumer_run(g_consumer, nullptr, handle, &ctx);
    if (st != OUTBOX_OK) {
        log_line("L " + std::to_string(now_ms()) + " error run returned " + outbox_status_name(st) + ": " +
                 outbox_last_error());
        std::fprintf(stderr, "consumer %s: run: %s: %s\n", name.c_str(), outbox_status_name(st), outbox_last_error());
    }
    outbox_consumer_free(g_consumer);
    outbox_config_free(cfg);
    ::close(g_log);
    return st == OUTBOX_OK ? 0 : 1;
}
