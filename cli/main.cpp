// The `outbox` command: schema migrations, the relay daemon and operator tools, on the public C
// API alone (outbox.h): every operator command is also a C call.
#include "capi.hpp"
#include "common.hpp"
#include "console.hpp"
#include "metrics.hpp"
#include "parked.hpp"

#include <cjson/cJSON.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <iostream>
#include <memory>
#include <optional>
#include <sys/time.h>
#include <unistd.h>

namespace outbox::cli {
namespace {

// Exit status of a usage error (a bad flag or option value, a missing URL); 1 is a failure at run
// time (a server, the data), 0 success.
constexpr int kUsageExit = 2;

long long ll(int64_t v) {
    return static_cast<long long>(v);
}

std::string qualified(const outbox_config *cfg, const char *table_key) {
    return config_get(cfg, "outbox.schema") + "." + config_get(cfg, table_key);
}

int run_migrate(const CommonOptions &opts, const std::string &only) {
    ConfigPtr cfg = build_config(opts);
    DbPtr db = open_db(cfg.get());
    const outbox_migrate_target what = only == "outbox"  ? OUTBOX_MIGRATE_OUTBOX
                                       : only == "inbox" ? OUTBOX_MIGRATE_INBOX
                                                         : OUTBOX_MIGRATE_ALL;
    int outbox_from = 0, outbox_to = 0, inbox_from = 0, inbox_to = 0;
    check(outbox_migrate_versions(&outbox_from, &outbox_to, &inbox_from, &inbox_to, db.get(), what));
    if (opts.json) {
        std::printf("{\"outbox\":{\"from\":%d,\"to\":%d},\"inbox\":{\"from\":%d,\"to\":%d}}\n", outbox_from, outbox_to,
                    inbox_from, inbox_to);
        return 0;
    }
    auto line = [](const char *what_name, const std::string &table, int from, int to) {
        if (from == to) {
            std::printf("%s %s: schema version %d, up to date\n", what_name, table.c_str(), to);
        } else {
            std::printf("%s %s: migrated from version %d to %d\n", what_name, table.c_str(), from, to);
        }
    };
    if (what != OUTBOX_MIGRATE_INBOX) {
        line("outbox", qualified(cfg.get(), "outbox.table"), outbox_from, outbox_to);
    }
    if (what != OUTBOX_MIGRATE_OUTBOX) {
        line("inbox", qualified(cfg.get(), "inbox.table"), inbox_from, inbox_to);
    }
    return 0;
}

outbox_relay *running_relay = nullptr;

extern "C" void on_signal(int) {
    outbox_relay_stop(running_relay); // async-signal-safe; NULL is a no-op
}

struct RelayOptions {
    int batch_size = 0;
    int window = 0;
    int poll_interval_ms = 0;
    bool no_listen = false;
    bool once = false;
    std::string log_format = "text";
    std::string log_level = "info";
    std::string metrics_addr;
    std::string max_lag = "300s";
};

// Where the relay's log lines go: stderr, as text or JSON lines, from a minimum level on.
struct LogSink {
    bool json = false;
    outbox_log_level min_level = OUTBOX_LOG_INFO;
};

std::string json_string(const char *s) {
    cJSON *str = cJSON_CreateString(s);
    char *text = str != nullptr ? cJSON_PrintUnformatted(str) : nullptr;
    std::string out = text != nullptr ? text : "\"\"";
    cJSON_free(text);
    cJSON_Delete(str);
    return out;
}

extern "C" void log_line(outbox_log_level level, const char *msg, void *user_data) {
    static const char *names[] = {"debug", "info", "warn", "error"};
    const auto *sink = static_cast<const LogSink *>(user_data);
    if (level < sink->min_level || level > OUTBOX_LOG_ERROR) {
        return;
    }
    const char *name = names[static_cast<int>(level)];
    if (sink->json) {
        const std::string line =
            "{\"ts\":\"" + timestamp() + "\",\"level\":\"" + name + "\",\"msg\":" + json_string(msg) + "}\n";
        std::fputs(line.c_str(), stderr);
        return;
    }
    // Messages quote event data (aggregate ids, broker replies): escape control characters so no
    // message can start a forged log line of its own.
    std::string text;
    for (const char *p = msg; *p != '\0'; ++p) {
        auto c = static_cast<unsigned char>(*p);
        if (c == '\n') {
            text += "\\n";
        } else if (c < 0x20 || c == 0x7F) {
            char esc[8];
            std::snprintf(esc, sizeof esc, "\\x%02x", c);
            text += esc;
        } else {
            text.push_back(*p);
        }
    }
    std::fprintf(stderr, "%s %-5s %s\n", timestamp().c_str(), name, text.c_str());
}

// "30d", "36h", "90m", "45s" or plain seconds.
int64_t parse_duration(const std::string &text) {
    if (text.empty()) {
        usage("empty duration");
    }
    size_t used = 0;
    long long n = 0;
    try {
        n = std::stoll(text, &used);
    } catch (const std::exception &) {
        usage("not a duration: '" + text + "' (use e.g. 30d, 12h, 90m, 45s)");
    }
    std::string unit = text.substr(used);
    int64_t mult = unit.empty() || unit == "s" ? 1 : unit == "m" ? 60 : unit == "h" ? 3600 : unit == "d" ? 86400 : 0;
    if (mult == 0 || n < 0) {
        usage("not a duration: '" + text + "' (use e.g. 30d, 12h, 90m, 45s)");
    }
    return n * mult;
}

int run_purge_inbox(const CommonOptions &opts, const std::string &older_than, int batch) {
    ConfigPtr cfg = build_config(opts);
    // The default age is inbox.retention_s; the library refuses anything younger.
    const int64_t age =
        older_than.empty() ? std::stoll(config_get(cfg.get(), "inbox.retention_s")) : parse_duration(older_than);
    DbPtr db = open_db(cfg.get());
    int64_t n = 0;
    check(outbox_inbox_purge(&n, db.get(), age, batch));
    if (opts.json) {
        std::printf("{\"deleted\":%lld,\"older_than_s\":%lld}\n", ll(n), ll(age));
    } else {
        std::printf("deleted %lld inbox row(s) processed more than %lld s ago from %s\n", ll(n), ll(age),
                    qualified(cfg.get(), "inbox.table").c_str());
    }
    return 0;
}

struct TailOptions {
    std::string exchange;
    long count = 0;
    int timeout_s = 0;
};

// A temporary queue bound to the exchange (outbox_tail_open); prints each message as it passes.
int run_tail(const CommonOptions &opts, const TailOptions &to) {
    ConfigPtr cfg = build_config(opts);
    outbox_tail *raw = nullptr;
    check(outbox_tail_open(&raw, cfg.get(), to.exchange.empty() ? nullptr : to.exchange.c_str()));
    TailPtr tail(raw);
    std::fprintf(stderr, "tailing exchange %s (queue %s)\n", outbox_tail_name(tail.get(), 0),
                 outbox_tail_name(tail.get(), 1));
    long seen = 0;
    const auto start = std::chrono::steady_clock::now();
    while (to.count == 0 || seen < to.count) {
        if (to.timeout_s > 0 && std::chrono::steady_clock::now() - start > std::chrono::seconds(to.timeout_s)) {
            std::fprintf(stderr, "tail: timed out after %d s with %ld event(s)\n", to.timeout_s, seen);
            return 1;
        }
        outbox_message *m = nullptr;
        const outbox_status st = outbox_tail_next(&m, tail.get(), 200);
        if (st == OUTBOX_ERR_TIMEOUT) {
            continue;
        }
        check(st);
        MessagePtr msg(m);
        ++seen;
        size_t len = 0;
        const char *body = outbox_message_body(msg.get(), &len);
        const std::string text(body, len);
        if (opts.json) {
            std::printf("%s\n", text.c_str());
        } else {
            std::string pretty = text;
            if (cJSON *doc = cJSON_ParseWithLength(body, len)) {
                if (char *p = cJSON_Print(doc)) {
                    pretty = p;
                    cJSON_free(p);
                }
                cJSON_Delete(doc);
            }
            auto prop = [&msg](const char *name) {
                const char *v = outbox_message_property(msg.get(), name);
                return std::string(v != nullptr ? v : "");
            };
            std::printf("--- %s %s (routing key %s)\n%s\n", prop("type").c_str(), prop("message_id").c_str(),
                        prop("routing_key").c_str(), pretty.c_str());
        }
        std::fflush(stdout);
    }
    return 0;
}

// Members of the outbox_stats() JSON object.
std::string age(const cJSON *doc, const char *name) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(doc, name);
    return cJSON_IsNumber(v) ? std::to_string(static_cast<long long>(v->valuedouble)) + " s" : std::string("-");
}
long long count(const cJSON *doc, const char *name) {
    return static_cast<long long>(number(doc, name));
}

int run_stats(const CommonOptions &opts) {
    ConfigPtr cfg = build_config(opts);
    DbPtr db = open_db(cfg.get());
    char *json = nullptr;
    check(outbox_stats(&json, db.get()));
    StringPtr owned(json);
    if (opts.json) {
        std::printf("%s\n", json);
        return 0;
    }
    std::unique_ptr<cJSON, void (*)(cJSON *)> doc(cJSON_Parse(json), cJSON_Delete);
    if (!doc) {
        throw Failure(OUTBOX_ERR_INTERNAL, "outbox_stats returned JSON that does not parse");
    }
    const cJSON *d = doc.get();
    const cJSON *health = cJSON_GetObjectItemCaseSensitive(d, "relay_health");
    std::printf("outbox %s\n", qualified(cfg.get(), "outbox.table").c_str());
    std::printf("  pending                 %lld (%lld due now)\n", count(d, "pending"), count(d, "pending_due"));
    std::printf("  failed                  %lld\n", count(d, "failed"));
    std::printf("  published, last minute  %lld\n", count(d, "published_last_minute"));
    std::printf("  published, last hour    %lld\n", count(d, "published_last_hour"));
    std::printf("  published, all time     ~%lld (estimate: pg_class.reltuples)\n", count(d, "published_estimate"));
    std::printf("  rows in table           ~%lld (estimate: pg_class.reltuples)\n", count(d, "total_estimate"));
    std::printf("  oldest pending age      %s\n", age(d, "oldest_pending_age_s").c_str());
    std::printf("  lag (oldest due)        %.1f s\n", number(d, "lag_s"));
    std::printf("  last published          %s ago\n", age(d, "last_published_age_s").c_str());
    std::printf("  relay health            %s\n", cJSON_IsString(health) ? health->valuestring : "-");
    const cJSON *types = cJSON_GetObjectItemCaseSensitive(d, "per_aggregate_type");
    if (cJSON_GetArraySize(types) > 0) {
        std::printf("  per aggregate type (pending / failed):\n");
        const cJSON *t = nullptr;
        cJSON_ArrayForEach(t, types) {
            const cJSON *name = cJSON_GetObjectItemCaseSensitive(t, "aggregate_type");
            std::printf("    %-21s %lld / %lld\n", cJSON_IsString(name) ? name->valuestring : "", count(t, "pending"),
                        count(t, "failed"));
        }
    }
    return 0;
}

struct RetryOptions {
    int max_retries = 0;
    std::string aggregate_type;
    std::string id;
};

int run_retry_failed(const CommonOptions &opts, const RetryOptions &ro) {
    ConfigPtr cfg = build_config(opts);
    DbPtr db = open_db(cfg.get());
    int64_t n = 0;
    check(outbox_retry_failed(&n, db.get(), ro.aggregate_type.empty() ? nullptr : ro.aggregate_type.c_str(),
                              ro.id.empty() ? nullptr : ro.id.c_str(), ro.max_retries));
    if (opts.json) {
        std::printf("{\"moved\":%lld}\n", ll(n));
    } else {
        std::printf("moved %lld FAILED event(s) back to PENDING in %s\n", ll(n),
                    qualified(cfg.get(), "outbox.table").c_str());
    }
    return 0;
}

// The purge's progress bar on a terminal: the total is the planner's estimate (counting would
// cost what the purge costs), so the bar is approximate; it never runs past the end.
struct PurgeBar {
    int64_t estimate = 0;
    std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
};

extern "C" void purge_progress(int64_t so_far, void *user_data) {
    const auto *bar = static_cast<const PurgeBar *>(user_data);
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - bar->start).count();
    const int64_t total = std::max(bar->estimate, so_far);
    const int width = 30;
    const int filled = total > 0 ? static_cast<int>(so_far * width / total) : width;
    std::string text(static_cast<size_t>(filled), '#');
    text.resize(static_cast<size_t>(width), '.');
    std::printf("\rpurging [%s] %lld of ~%lld, %.0f rows/s ", text.c_str(), ll(so_far), ll(total),
                secs > 0 ? static_cast<double>(so_far) / secs : 0.0);
    std::fflush(stdout);
}

int run_purge(const CommonOptions &opts, const std::string &older_than, int batch) {
    ConfigPtr cfg = build_config(opts);
    const int64_t age = parse_duration(older_than);
    DbPtr db = open_db(cfg.get());
    const bool tty = !opts.json && isatty(STDOUT_FILENO) != 0;
    PurgeBar bar;
    if (tty) {
        check(outbox_purge_estimate(&bar.estimate, db.get(), age));
    }
    int64_t n = 0;
    check(outbox_purge_published_progress(&n, db.get(), age, batch, tty ? purge_progress : nullptr, &bar));
    if (tty) {
        std::printf("\n");
    }
    if (opts.json) {
        std::printf("{\"deleted\":%lld,\"older_than_s\":%lld}\n", ll(n), ll(age));
    } else {
        std::printf("deleted %lld PUBLISHED event(s) published more than %lld s ago from %s\n", ll(n), ll(age),
                    qualified(cfg.get(), "outbox.table").c_str());
    }
    return 0;
}

struct ReplayOptions {
    std::string aggregate;
    std::string since;
    std::string event;
};

int run_replay(const CommonOptions &opts, const ReplayOptions &ro) {
    ConfigPtr cfg = build_config(opts);
    const size_t colon = ro.aggregate.find(':');
    if (colon == std::string::npos || colon == 0 || colon + 1 == ro.aggregate.size()) {
        usage("--aggregate: expected TYPE:ID, got '" + ro.aggregate + "'");
    }
    const std::string type = ro.aggregate.substr(0, colon);
    const std::string id = ro.aggregate.substr(colon + 1);
    DbPtr db = open_db(cfg.get());
    int64_t n = 0;
    int64_t from_seq = 0;
    check(outbox_replay_from(&n, &from_seq, db.get(), cfg.get(), type.c_str(), id.c_str(),
                             ro.event.empty() ? nullptr : ro.event.c_str(),
                             ro.since.empty() ? nullptr : ro.since.c_str()));
    if (opts.json) {
        std::printf("{\"published\":%lld,\"from_seq\":%lld}\n", ll(n), ll(from_seq));
    } else {
        std::printf("replayed %lld event(s) of %s:%s to exchange %s (header outbox-replay=true)\n", ll(n), type.c_str(),
                    id.c_str(), config_get(cfg.get(), "amqp.exchange").c_str());
    }
    return 0;
}

// One step: it records every outcome before it returns, so the report is everything it did.
// "claimed" (the events read) keeps version 1's name, as in outbox_relay_stats: scripts read it.
void print_once(outbox_relay *relay, bool json) {
    outbox_relay_stats st;
    outbox_relay_stats_init(&st);
    check(outbox_relay_step(relay, &st));
    if (json) {
        std::printf("{\"claimed\":%lld,\"published\":%lld,\"failed\":%lld,\"dead\":%lld,\"held_back\":%lld,"
                    "\"unroutable\":%lld,\"nacked\":%lld,\"unconfirmed\":%lld}\n",
                    ll(st.claimed), ll(st.published), ll(st.failed), ll(st.dead), ll(st.held_back), ll(st.unroutable),
                    ll(st.nacked), ll(st.unconfirmed));
    } else {
        std::printf("claimed %lld, published %lld, failed %lld (of which now FAILED %lld), held back %lld\n",
                    ll(st.claimed), ll(st.published), ll(st.failed), ll(st.dead), ll(st.held_back));
    }
}

extern "C" void metrics_step(const outbox_relay_step_info *info, void *user_data) {
    static_cast<Metrics *>(user_data)->on_step(*info);
}

void relay_flags(outbox_config *cfg, const RelayOptions &ro) {
    if (ro.batch_size > 0) {
        config_set(cfg, "relay.batch_size", std::to_string(ro.batch_size));
    }
    if (ro.window > 0) {
        config_set(cfg, "relay.window", std::to_string(ro.window));
    }
    if (ro.poll_interval_ms > 0) {
        config_set(cfg, "relay.poll_interval_ms", std::to_string(ro.poll_interval_ms));
    }
    if (ro.no_listen) {
        config_set(cfg, "relay.listen", "false");
    }
}

int run_relay(const CommonOptions &opts, const RelayOptions &ro) {
    ConfigPtr cfg = build_config(opts);
    relay_flags(cfg.get(), ro);
    LogSink sink;
    sink.json = ro.log_format == "json";
    sink.min_level = ro.log_level == "debug"   ? OUTBOX_LOG_DEBUG
                     : ro.log_level == "warn"  ? OUTBOX_LOG_WARN
                     : ro.log_level == "error" ? OUTBOX_LOG_ERROR
                                               : OUTBOX_LOG_INFO;
    Metrics metrics; // outlives the relay, whose step callback refers to it
    outbox_relay *raw = nullptr;
    check(outbox_relay_new(&raw, cfg.get()));
    RelayPtr relay(raw);
    check(outbox_relay_set_logger(relay.get(), log_line, &sink));
    std::unique_ptr<MetricsServer> metrics_server;
    if (!ro.metrics_addr.empty()) {
        // The callback runs on the relay's thread; the HTTP thread only reads `metrics`.
        check(outbox_relay_set_step_callback(relay.get(), metrics_step, &metrics));
        metrics_server = std::make_unique<MetricsServer>(metrics, cfg.get(), ro.metrics_addr,
                                                         static_cast<double>(parse_duration(ro.max_lag)));
        log_line(OUTBOX_LOG_INFO, ("metrics on http://" + ro.metrics_addr + "/metrics and /healthz").c_str(), &sink);
    }
    if (ro.once) {
        print_once(relay.get(), opts.json);
        return 0;
    }
    running_relay = relay.get();
    struct sigaction sa {};
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, nullptr);
    sigaction(SIGINT, &sa, nullptr);
    std::signal(SIGPIPE, SIG_IGN);
    const std::string starting = "relay " + config_get(cfg.get(), "relay.name") + " starting: exchange " +
                                 config_get(cfg.get(), "amqp.exchange") + ", batch " +
                                 config_get(cfg.get(), "relay.batch_size") + ", window " +
                                 config_get(cfg.get(), "relay.window");
    log_line(OUTBOX_LOG_INFO, starting.c_str(), &sink);
    const outbox_status st = outbox_relay_run(relay.get());
    running_relay = nullptr;
    check(st);
    return 0;
}

// Every subcommand's options, and the subcommand chosen.
struct Commands {
    CommonOptions migrate_opts;
    std::string only = "all";
    CLI::App *migrate = nullptr;
    CommonOptions relay_opts;
    RelayOptions ro;
    CLI::App *relay = nullptr;
    CommonOptions stats_opts;
    CLI::App *stats = nullptr;
    CommonOptions retry_opts;
    RetryOptions rto;
    CLI::App *retry = nullptr;
    CommonOptions purge_opts;
    std::string purge_age;
    int purge_batch = 5000;
    CLI::App *purge = nullptr;
    CommonOptions replay_opts;
    ReplayOptions rpo;
    CLI::App *replay = nullptr;
    CommonOptions tail_opts;
    TailOptions to;
    CLI::App *tail = nullptr;
    CommonOptions purge_inbox_opts;
    std::string inbox_age;
    int inbox_batch = 5000;
    CLI::App *purge_inbox = nullptr;
    ParkedCommands parked;
    ConsoleOptions co;
    CLI::App *console = nullptr;
};

void define(CLI::App &app, Commands &c) {
    c.migrate = app.add_subcommand("migrate", "create or upgrade the outbox and inbox tables (idempotent)");
    add_common(*c.migrate, c.migrate_opts, false);
    c.migrate->add_option("--only", c.only, "which tables: all, outbox or inbox (default all)")
        ->check(CLI::IsMember({"all", "outbox", "inbox"}));

    c.relay = app.add_subcommand(
        "relay", "run the relay daemon: publish committed events to RabbitMQ with confirms until SIGTERM/SIGINT "
                 "(one relay per outbox table is active; others stand by to take over)");
    add_common(*c.relay, c.relay_opts, true);
    c.relay->add_option("--batch-size", c.ro.batch_size, "events read per step (relay.batch_size, default 2000)");
    c.relay->add_option("--window", c.ro.window, "unconfirmed messages in flight (relay.window, default 512)");
    c.relay->add_option("--poll-interval-ms", c.ro.poll_interval_ms,
                        "longest wait between polls of an idle relay (relay.poll_interval_ms, default 100)");
    c.relay->add_flag("--no-listen", c.ro.no_listen, "do not LISTEN for NOTIFY wake-ups; poll only");
    c.relay->add_flag("--once", c.ro.once,
                      "run one step, wait for its outcomes to commit, print what it did (one JSON object with "
                      "--json) and exit");
    c.relay->add_option("--log-format", c.ro.log_format, "text or json (JSON lines on stderr) (default text)")
        ->check(CLI::IsMember({"text", "json"}));
    c.relay->add_option("--log-level", c.ro.log_level, "debug, info, warn or error (default info)")
        ->check(CLI::IsMember({"debug", "info", "warn", "error"}));
    c.relay->add_option("--metrics-addr", c.ro.metrics_addr,
                        "serve Prometheus metrics (/metrics) and a health check (/healthz) on HOST:PORT, "
                        "e.g. 127.0.0.1:9187");
    c.relay->add_option("--max-lag", c.ro.max_lag, "/healthz fails when the lag passes this age (default 300s)");

    c.stats = app.add_subcommand(
        "stats",
        "pending, failed, recently published, lag, per aggregate type and relay health (bounded by the backlog)");
    add_common(*c.stats, c.stats_opts, false);

    c.retry = app.add_subcommand("retry-failed",
                                 "put FAILED events back to PENDING, due now (retry_count and error_message are kept)");
    add_common(*c.retry, c.retry_opts, false);
    c.retry->add_option("--max-retries", c.rto.max_retries, "only events with retry_count below N");
    c.retry->add_option("--aggregate-type", c.rto.aggregate_type, "only events of this aggregate type");
    c.retry->add_option("--id", c.rto.id, "only this event (its OUTBOX_ID)");

    c.purge = app.add_subcommand(
        "purge", "remove events published before an age: drop whole partitions, delete a version-1 table's rows "
                 "in bounded batches (never PENDING or FAILED)");
    add_common(*c.purge, c.purge_opts, false);
    c.purge->add_option("--published-older-than", c.purge_age, "age such as 30d, 12h, 90m, 45s")->required();
    c.purge
        ->add_option("--batch", c.purge_batch,
                     "rows deleted per statement and transaction from a version-1 table kept by an upgrade; "
                     "partitions are dropped whole (default 5000)")
        ->check(CLI::PositiveNumber);

    c.replay = app.add_subcommand(
        "replay", "republish an aggregate's events (any status, in seq order) with header outbox-replay=true");
    add_common(*c.replay, c.replay_opts, true);
    c.replay->add_option("--aggregate", c.rpo.aggregate, "the aggregate, TYPE:ID")->required();
    c.replay->add_option("--since", c.rpo.since, "only events created at or after this ISO timestamp");
    c.replay->add_option("--event", c.rpo.event, "start at this event (its OUTBOX_ID)");

    c.tail = app.add_subcommand("tail", "print events as they pass through the exchange (a temporary queue)");
    c.tail->add_option("--amqp-url", c.tail_opts.amqp_url, "RabbitMQ URL (env OUTBOX_AMQP_URL)");
    c.tail->add_option("--exchange", c.to.exchange, "exchange to watch (default amqp.exchange, corewrite.fanout)");
    c.tail->add_option("--count", c.to.count, "exit after this many events (default: run until interrupted)");
    c.tail->add_option("--timeout", c.to.timeout_s, "fail after this many seconds (default: none)");
    c.tail->add_option("--set", c.tail_opts.sets, "set a configuration key, KEY=VALUE");
    c.tail->add_flag("--json", c.tail_opts.json, "print each event as one JSON line");
    c.tail->footer(keys_help());

    c.purge_inbox = app.add_subcommand(
        "purge-inbox", "remove consumer inbox rows older than the retention window: drop whole partitions "
                       "(as the tables' owner), delete the rest in bounded batches");
    add_common(*c.purge_inbox, c.purge_inbox_opts, false);
    c.purge_inbox->add_option(
        "--older-than", c.inbox_age,
        "age such as 30d, 12h, 90m (default inbox.retention_s, 7d); never below inbox.retention_s");
    c.purge_inbox->add_option("--batch", c.inbox_batch, "rows deleted per statement (default 5000)")
        ->check(CLI::PositiveNumber);
    define_parked(app, c.parked);

    c.console = define_console(app, c.co);
}

int dispatch(const Commands &c) {
    if (*c.migrate) {
        return run_migrate(c.migrate_opts, c.only);
    }
    if (*c.relay) {
        return run_relay(c.relay_opts, c.ro);
    }
    if (*c.purge_inbox) {
        return run_purge_inbox(c.purge_inbox_opts, c.inbox_age, c.inbox_batch);
    }
    if (*c.stats) {
        return run_stats(c.stats_opts);
    }
    if (*c.retry) {
        return run_retry_failed(c.retry_opts, c.rto);
    }
    if (*c.purge) {
        return run_purge(c.purge_opts, c.purge_age, c.purge_batch);
    }
    if (*c.replay) {
        return run_replay(c.replay_opts, c.rpo);
    }
    if (*c.tail) {
        return run_tail(c.tail_opts, c.to);
    }
    if (int rc = run_parked(c.parked); rc >= 0) {
        return rc;
    }
    if (*c.console) {
        return run_console(c.co);
    }
    return 0;
}

} // namespace
} // namespace outbox::cli

int main(int argc, char **argv) {
    using namespace outbox::cli;
    CLI::App app{"outbox " OUTBOX_VERSION_STRING " - transactional outbox for PostgreSQL and RabbitMQ.\n"
                 "Environment: OUTBOX_PG_URL, OUTBOX_AMQP_URL.\n"
                 "Exit status: 0 success, 1 failure (a server, the data), 2 usage error (flags, option values, "
                 "a missing URL)."};
    app.require_subcommand(1);
    app.set_version_flag("--version", std::string(OUTBOX_VERSION_STRING));
    Commands commands;
    define(app, commands);
    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError &e) {
        // --help and --version exit 0; every usage error exits 2, as command-line tools do.
        return app.exit(e) == 0 ? 0 : kUsageExit;
    }
    try {
        return dispatch(commands);
    } catch (const Failure &e) {
        std::fprintf(stderr, "outbox: %s: %s\n", outbox_status_name(e.status()), e.what());
        // A bad option value, a missing URL or an unknown key is a usage error too.
        const bool usage = e.status() == OUTBOX_ERR_INVALID_ARGUMENT || e.status() == OUTBOX_ERR_UNKNOWN_KEY;
        return usage ? kUsageExit : 1;
    } catch (const std::exception &e) {
        std::fprintf(stderr, "outbox: %s\n", e.what());
        return 1;
    }
    return 0;
}
