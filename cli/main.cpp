// The `outbox` command: schema migrations, the relay daemon and operator tools.
#include "common.hpp"
#include "metrics.hpp"

#include "admin.hpp"
#include "amqp.hpp"
#include "connect.hpp"
#include "error.hpp"
#include "inbox.hpp"
#include "json.hpp"
#include "pg.hpp"
#include "relay.hpp"
#include "schema.hpp"

#include <outbox.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <iostream>
#include <memory>
#include <sys/time.h>
#include <unistd.h>

namespace outbox::cli {
namespace {

// Exit status of a usage error (a bad flag or option value, a missing URL); 1 is a failure at run
// time (a server, the data), 0 success.
constexpr int kUsageExit = 2;

int run_migrate(const CommonOptions &opts, const std::string &only) {
    Config cfg = build_config(opts);
    pg::Conn conn = pg::Conn::open(cfg.pg_url, cfg.pg_connect_timeout_s, "outbox-migrate");
    schema::What what = only == "outbox"  ? schema::What::outbox
                        : only == "inbox" ? schema::What::inbox
                                          : schema::What::all;
    schema::Result r = schema::migrate(conn, cfg, what);
    if (opts.json) {
        std::printf("{\"outbox\":{\"from\":%d,\"to\":%d},\"inbox\":{\"from\":%d,\"to\":%d}}\n", r.outbox_from,
                    r.outbox_to, r.inbox_from, r.inbox_to);
        return 0;
    }
    auto line = [](const char *what_name, const std::string &table, int from, int to) {
        if (from == to) {
            std::printf("%s %s: schema version %d, up to date\n", what_name, table.c_str(), to);
        } else {
            std::printf("%s %s: migrated from version %d to %d\n", what_name, table.c_str(), from, to);
        }
    };
    if (what != schema::What::inbox) {
        line("outbox", cfg.schema + "." + cfg.table, r.outbox_from, r.outbox_to);
    }
    if (what != schema::What::outbox) {
        line("inbox", cfg.schema + "." + cfg.inbox_table, r.inbox_from, r.inbox_to);
    }
    return 0;
}

Relay *running_relay = nullptr;

extern "C" void on_signal(int) {
    if (running_relay != nullptr) {
        running_relay->stop(); // async-signal-safe: an atomic store and a write(2)
    }
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

std::string timestamp() {
    timeval tv{};
    gettimeofday(&tv, nullptr);
    std::tm tm{};
    gmtime_r(&tv.tv_sec, &tm);
    char buf[64];
    std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday,
                  tm.tm_hour, tm.tm_min, tm.tm_sec, static_cast<long>(tv.tv_usec / 1000));
    return buf;
}

LogFn make_logger(const std::string &format, LogLevel min_level) {
    static const char *names[] = {"debug", "info", "warn", "error"};
    return [format, min_level](LogLevel level, const std::string &msg) {
        if (level < min_level) {
            return;
        }
        const char *name = names[static_cast<int>(level)];
        if (format == "json") {
            std::string line = "{\"ts\":\"" + timestamp() + "\",\"level\":\"" + name + "\",\"msg\":";
            json::append_string(line, msg);
            line += "}\n";
            std::fputs(line.c_str(), stderr);
        } else {
            // Messages quote event data (aggregate ids, broker replies): escape control
            // characters so no message can start a forged log line of its own.
            std::string text;
            for (char ch : msg) {
                auto c = static_cast<unsigned char>(ch);
                if (c == '\n') {
                    text += "\\n";
                } else if (c < 0x20 || c == 0x7F) {
                    char esc[8];
                    std::snprintf(esc, sizeof esc, "\\x%02x", c);
                    text += esc;
                } else {
                    text.push_back(ch);
                }
            }
            std::fprintf(stderr, "%s %-5s %s\n", timestamp().c_str(), name, text.c_str());
        }
    };
}

// "30d", "36h", "90m", "45s" or plain seconds.
int64_t parse_duration(const std::string &text) {
    if (text.empty()) {
        fail(Errc::invalid_argument, "empty duration");
    }
    size_t used = 0;
    long long n = 0;
    try {
        n = std::stoll(text, &used);
    } catch (const std::exception &) {
        fail(Errc::invalid_argument, "not a duration: '" + text + "' (use e.g. 30d, 12h, 90m, 45s)");
    }
    std::string unit = text.substr(used);
    int64_t mult = unit.empty() || unit == "s" ? 1 : unit == "m" ? 60 : unit == "h" ? 3600 : unit == "d" ? 86400 : 0;
    if (mult == 0 || n < 0) {
        fail(Errc::invalid_argument, "not a duration: '" + text + "' (use e.g. 30d, 12h, 90m, 45s)");
    }
    return n * mult;
}

int run_purge_inbox(const CommonOptions &opts, const std::string &older_than, int batch) {
    Config cfg = build_config(opts);
    int64_t age = older_than.empty() ? cfg.inbox_retention_s : parse_duration(older_than);
    // The library refuses an age below inbox.retention_s (inbox::purge).
    pg::Conn conn = pg::Conn::open(cfg.pg_url, cfg.pg_connect_timeout_s, "outbox-purge-inbox");
    int64_t n = inbox::purge(conn, cfg, age, batch);
    if (opts.json) {
        std::printf("{\"deleted\":%lld,\"older_than_s\":%lld}\n", static_cast<long long>(n),
                    static_cast<long long>(age));
    } else {
        std::printf("deleted %lld inbox row(s) processed more than %lld s ago from %s.%s\n", static_cast<long long>(n),
                    static_cast<long long>(age), cfg.schema.c_str(), cfg.inbox_table.c_str());
    }
    return 0;
}

struct TailOptions {
    std::string exchange;
    long count = 0;
    int timeout_s = 0;
};

// A temporary queue bound to the exchange; prints each event as it passes.
int run_tail(const CommonOptions &opts, const TailOptions &to) {
    Config cfg = build_config(opts, false);
    cfg.require_amqp_url("outbox tail");
    const std::string exchange = to.exchange.empty() ? cfg.exchange : to.exchange;
    amqp::Options o = amqp_options(cfg, "outbox-tail");
    amqp::Connection conn(o);
    conn.declare_exchange(exchange, cfg.exchange_type, true, false);
    std::string queue = conn.declare_queue("", false, true, true);
    conn.bind_queue(queue, exchange, to.exchange.empty() && cfg.exchange_type != "fanout" ? "#" : "");
    conn.consume(queue, true);
    std::fprintf(stderr, "tailing exchange %s (queue %s)\n", exchange.c_str(), queue.c_str());
    long seen = 0;
    const auto start = std::chrono::steady_clock::now();
    while (to.count == 0 || seen < to.count) {
        if (to.timeout_s > 0 && std::chrono::steady_clock::now() - start > std::chrono::seconds(to.timeout_s)) {
            std::fprintf(stderr, "tail: timed out after %d s with %ld event(s)\n", to.timeout_s, seen);
            return 1;
        }
        auto ev = conn.wait(200);
        if (!ev) {
            continue;
        }
        auto *m = std::get_if<amqp::Message>(&*ev);
        if (m == nullptr) {
            continue;
        }
        ++seen;
        if (opts.json) {
            std::printf("%s\n", m->body.c_str());
        } else {
            std::string pretty = m->body;
            if (json::Ptr doc = json::parse(m->body)) {
                char *p = cJSON_Print(doc.get());
                if (p != nullptr) {
                    pretty = p;
                    cJSON_free(p);
                }
            }
            std::printf("--- %s %s (routing key %s)\n%s\n", m->props.type.c_str(), m->props.message_id.c_str(),
                        m->routing_key.c_str(), pretty.c_str());
        }
        std::fflush(stdout);
    }
    return 0;
}

int run_stats(const CommonOptions &opts) {
    Config cfg = build_config(opts);
    pg::Conn conn = pg::Conn::open(cfg.pg_url, cfg.pg_connect_timeout_s, "outbox-stats");
    admin::Stats s = admin::stats(conn, cfg);
    if (opts.json) {
        std::printf("%s\n", admin::stats_json(s).c_str());
        return 0;
    }
    auto age = [](const std::optional<double> &v) {
        return v ? std::to_string(static_cast<long long>(*v)) + " s" : std::string("-");
    };
    std::printf("outbox %s\n", cfg.outbox_qualified().c_str());
    std::printf("  pending                 %lld (%lld due now)\n", static_cast<long long>(s.pending),
                static_cast<long long>(s.pending_due));
    std::printf("  failed                  %lld\n", static_cast<long long>(s.failed));
    std::printf("  published, last minute  %lld\n", static_cast<long long>(s.published_last_minute));
    std::printf("  published, last hour    %lld\n", static_cast<long long>(s.published_last_hour));
    std::printf("  published, all time     ~%lld (estimate: pg_class.reltuples)\n",
                static_cast<long long>(s.published_estimate));
    std::printf("  rows in table           ~%lld (estimate: pg_class.reltuples)\n",
                static_cast<long long>(s.total_estimate));
    std::printf("  oldest pending age      %s\n", age(s.oldest_pending_age_s).c_str());
    std::printf("  lag (oldest due)        %.1f s\n", s.lag_s);
    std::printf("  last published          %s ago\n", age(s.last_published_age_s).c_str());
    std::printf("  relay health            %s\n", s.relay_health.c_str());
    if (!s.per_type.empty()) {
        std::printf("  per aggregate type (pending / failed):\n");
        for (const auto &t : s.per_type) {
            std::printf("    %-21s %lld / %lld\n", t.aggregate_type.c_str(), static_cast<long long>(t.pending),
                        static_cast<long long>(t.failed));
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
    Config cfg = build_config(opts);
    pg::Conn conn = pg::Conn::open(cfg.pg_url, cfg.pg_connect_timeout_s, "outbox-retry-failed");
    int64_t n = admin::retry_failed(conn, cfg, ro.aggregate_type, ro.id, ro.max_retries);
    if (opts.json) {
        std::printf("{\"moved\":%lld}\n", static_cast<long long>(n));
    } else {
        std::printf("moved %lld FAILED event(s) back to PENDING in %s\n", static_cast<long long>(n),
                    cfg.outbox_qualified().c_str());
    }
    return 0;
}

int run_purge(const CommonOptions &opts, const std::string &older_than, int batch) {
    Config cfg = build_config(opts);
    const int64_t age = parse_duration(older_than);
    pg::Conn conn = pg::Conn::open(cfg.pg_url, cfg.pg_connect_timeout_s, "outbox-purge");
    const bool tty = !opts.json && isatty(STDOUT_FILENO) != 0;
    const auto start = std::chrono::steady_clock::now();
    // The total comes from the planner (counting would cost what the purge costs), so the bar is
    // approximate; it never runs past the end.
    const int64_t estimate = tty ? admin::purge_estimate(conn, cfg, age) : 0;
    int64_t n = admin::purge_published(conn, cfg, age, batch, [&](int64_t so_far) {
        if (!tty) {
            return;
        }
        const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        const int64_t total = std::max(estimate, so_far);
        const int width = 30;
        const int filled = total > 0 ? static_cast<int>(so_far * width / total) : width;
        std::string bar(static_cast<size_t>(filled), '#');
        bar.resize(static_cast<size_t>(width), '.');
        std::printf("\rpurging [%s] %lld of ~%lld, %.0f rows/s ", bar.c_str(), static_cast<long long>(so_far),
                    static_cast<long long>(total), secs > 0 ? static_cast<double>(so_far) / secs : 0.0);
        std::fflush(stdout);
    });
    if (tty) {
        std::printf("\n");
    }
    if (opts.json) {
        std::printf("{\"deleted\":%lld,\"older_than_s\":%lld}\n", static_cast<long long>(n),
                    static_cast<long long>(age));
    } else {
        std::printf("deleted %lld PUBLISHED event(s) published more than %lld s ago from %s\n",
                    static_cast<long long>(n), static_cast<long long>(age), cfg.outbox_qualified().c_str());
    }
    return 0;
}

struct ReplayOptions {
    std::string aggregate;
    std::string since;
    std::string event;
};

int run_replay(const CommonOptions &opts, const ReplayOptions &ro) {
    Config cfg = build_config(opts);
    const size_t colon = ro.aggregate.find(':');
    if (colon == std::string::npos || colon == 0 || colon + 1 == ro.aggregate.size()) {
        fail(Errc::invalid_argument, "--aggregate: expected TYPE:ID, got '" + ro.aggregate + "'");
    }
    const std::string type = ro.aggregate.substr(0, colon);
    const std::string id = ro.aggregate.substr(colon + 1);
    pg::Conn conn = pg::Conn::open(cfg.pg_url, cfg.pg_connect_timeout_s, "outbox-replay");
    int64_t from_seq = 0;
    if (!ro.event.empty()) {
        from_seq = admin::seq_of_event(conn, cfg, type, id, ro.event);
    }
    int64_t n = 0;
    if (!ro.since.empty()) {
        const int64_t s = admin::seq_since(conn, cfg, type, id, ro.since);
        from_seq = s == 0 ? -1 : std::max(from_seq, s);
    }
    if (from_seq >= 0) {
        n = admin::replay(conn, cfg, type, id, from_seq);
    }
    if (opts.json) {
        std::printf("{\"published\":%lld,\"from_seq\":%lld}\n", static_cast<long long>(n),
                    static_cast<long long>(std::max<int64_t>(from_seq, 0)));
    } else {
        std::printf("replayed %lld event(s) of %s:%s to exchange %s (header outbox-replay=true)\n",
                    static_cast<long long>(n), type.c_str(), id.c_str(), cfg.exchange.c_str());
    }
    return 0;
}

// One step, then settle, so the report is everything the step did (under a full batch its marks
// commit in the background, and the batch claimed ahead for the next step is released).
void print_once(Relay &relay, bool json) {
    RelayStats st = relay.step();
    RelayStats settled;
    relay.settle(settled);
    st.published += settled.published;
    st.failed += settled.failed;
    st.dead += settled.dead;
    st.mark_us += settled.mark_us;
    const auto ll = [](int64_t v) { return static_cast<long long>(v); };
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

int run_relay(const CommonOptions &opts, const RelayOptions &ro) {
    Config cfg = build_config(opts);
    if (ro.batch_size > 0) {
        cfg.set("relay.batch_size", std::to_string(ro.batch_size));
    }
    if (ro.window > 0) {
        cfg.set("relay.window", std::to_string(ro.window));
    }
    if (ro.poll_interval_ms > 0) {
        cfg.set("relay.poll_interval_ms", std::to_string(ro.poll_interval_ms));
    }
    if (ro.no_listen) {
        cfg.relay_listen = false;
    }
    LogLevel min_level = ro.log_level == "debug"   ? LogLevel::debug
                         : ro.log_level == "warn"  ? LogLevel::warn
                         : ro.log_level == "error" ? LogLevel::error
                                                   : LogLevel::info;
    LogFn logger = make_logger(ro.log_format, min_level);
    Metrics metrics; // outlives the relay, whose logger refers to it
    Relay relay(cfg);
    std::unique_ptr<MetricsServer> metrics_server;
    if (!ro.metrics_addr.empty()) {
        // The logger and on_step run on the relay's thread, so they may ask the relay for its
        // connection state; the HTTP thread only reads `metrics`.
        relay.set_logger([logger, &metrics, &relay](LogLevel level, const std::string &msg) {
            if (level >= LogLevel::warn && msg.find("; retrying in ") != std::string::npos) {
                metrics.on_step_error(msg.substr(0, msg.find("; retrying in ")), relay.pg_connected(),
                                      relay.amqp_connected());
                metrics.set_amqp_node(relay.amqp_node());
            }
            logger(level, msg);
        });
        metrics_server = std::make_unique<MetricsServer>(metrics, cfg, ro.metrics_addr,
                                                         static_cast<double>(parse_duration(ro.max_lag)));
        logger(LogLevel::info, "metrics on http://" + ro.metrics_addr + "/metrics and /healthz");
    } else {
        relay.set_logger(logger);
    }
    if (ro.once) {
        print_once(relay, opts.json);
        return 0;
    }
    running_relay = &relay;
    struct sigaction sa {};
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, nullptr);
    sigaction(SIGINT, &sa, nullptr);
    std::signal(SIGPIPE, SIG_IGN);
    logger(LogLevel::info, "relay " + cfg.relay_name + " starting: exchange " + cfg.exchange + ", batch " +
                               std::to_string(cfg.relay_batch_size) + ", window " + std::to_string(cfg.relay_window));
    if (metrics_server) {
        relay.run([&metrics, &relay](const RelayStats &st) {
            metrics.on_step(st, relay.pg_connected(), relay.amqp_connected());
            metrics.set_amqp_node(relay.amqp_node());
        });
    } else {
        relay.run();
    }
    running_relay = nullptr;
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

    CommonOptions migrate_opts;
    std::string only = "all";
    CLI::App *migrate = app.add_subcommand("migrate", "create or upgrade the outbox and inbox tables (idempotent)");
    add_common(*migrate, migrate_opts, false);
    migrate->add_option("--only", only, "which tables: all, outbox or inbox (default all)")
        ->check(CLI::IsMember({"all", "outbox", "inbox"}));

    CommonOptions relay_opts;
    RelayOptions ro;
    CLI::App *relay = app.add_subcommand(
        "relay", "run the relay daemon: publish committed events to RabbitMQ with confirms until SIGTERM/SIGINT");
    add_common(*relay, relay_opts, true);
    relay->add_option("--batch-size", ro.batch_size, "events claimed per step (relay.batch_size, default 500)");
    relay->add_option("--window", ro.window, "unconfirmed messages in flight (relay.window, default 512)");
    relay->add_option("--poll-interval-ms", ro.poll_interval_ms,
                      "polling fallback interval (relay.poll_interval_ms, default 1000)");
    relay->add_flag("--no-listen", ro.no_listen, "do not LISTEN for NOTIFY wake-ups; poll only");
    relay->add_flag("--once", ro.once,
                    "run one step, wait for its outcomes to commit, print what it did (one JSON object with "
                    "--json) and exit");
    relay->add_option("--log-format", ro.log_format, "text or json (JSON lines on stderr) (default text)")
        ->check(CLI::IsMember({"text", "json"}));
    relay->add_option("--log-level", ro.log_level, "debug, info, warn or error (default info)")
        ->check(CLI::IsMember({"debug", "info", "warn", "error"}));
    relay->add_option("--metrics-addr", ro.metrics_addr,
                      "serve Prometheus metrics (/metrics) and a health check (/healthz) on HOST:PORT, "
                      "e.g. 127.0.0.1:9187");
    relay->add_option("--max-lag", ro.max_lag, "/healthz fails when the lag passes this age (default 300s)");

    CommonOptions stats_opts;
    CLI::App *stats = app.add_subcommand(
        "stats", "pending, failed, recently published, lag, per aggregate type and relay health (index-only, fast)");
    add_common(*stats, stats_opts, false);

    CommonOptions retry_opts;
    RetryOptions rto;
    CLI::App *retry = app.add_subcommand(
        "retry-failed", "put FAILED events back to PENDING, due now (retry_count and error_message are kept)");
    add_common(*retry, retry_opts, false);
    retry->add_option("--max-retries", rto.max_retries, "only events with retry_count below N");
    retry->add_option("--aggregate-type", rto.aggregate_type, "only events of this aggregate type");
    retry->add_option("--id", rto.id, "only this event (its OUTBOX_ID)");

    CommonOptions purge_opts;
    std::string purge_age;
    int purge_batch = 5000;
    CLI::App *purge = app.add_subcommand(
        "purge", "delete PUBLISHED events older than an age, in bounded batches (never PENDING or FAILED)");
    add_common(*purge, purge_opts, false);
    purge->add_option("--published-older-than", purge_age, "age such as 30d, 12h, 90m, 45s")->required();
    purge->add_option("--batch", purge_batch, "rows deleted per statement and transaction (default 5000)")
        ->check(CLI::PositiveNumber);

    CommonOptions replay_opts;
    ReplayOptions rpo;
    CLI::App *replay = app.add_subcommand(
        "replay", "republish an aggregate's events (any status, in seq order) with header outbox-replay=true");
    add_common(*replay, replay_opts, true);
    replay->add_option("--aggregate", rpo.aggregate, "the aggregate, TYPE:ID")->required();
    replay->add_option("--since", rpo.since, "only events created at or after this ISO timestamp");
    replay->add_option("--event", rpo.event, "start at this event (its OUTBOX_ID)");

    CommonOptions tail_opts;
    TailOptions to;
    CLI::App *tail = app.add_subcommand("tail", "print events as they pass through the exchange (a temporary queue)");
    tail->add_option("--amqp-url", tail_opts.amqp_url, "RabbitMQ URL (env OUTBOX_AMQP_URL)");
    tail->add_option("--exchange", to.exchange, "exchange to watch (default amqp.exchange, corewrite.fanout)");
    tail->add_option("--count", to.count, "exit after this many events (default: run until interrupted)");
    tail->add_option("--timeout", to.timeout_s, "fail after this many seconds (default: none)");
    tail->add_option("--set", tail_opts.sets, "set a configuration key, KEY=VALUE");
    tail->add_flag("--json", tail_opts.json, "print each event as one JSON line");
    tail->footer(keys_help());

    CommonOptions purge_inbox_opts;
    std::string inbox_age;
    int inbox_batch = 5000;
    CLI::App *purge_inbox = app.add_subcommand(
        "purge-inbox", "delete consumer inbox rows older than the retention window, in bounded batches");
    add_common(*purge_inbox, purge_inbox_opts, false);
    purge_inbox->add_option("--older-than", inbox_age,
                            "age such as 30d, 12h, 90m (default inbox.retention_s, 7d); never below inbox.retention_s");
    purge_inbox->add_option("--batch", inbox_batch, "rows deleted per statement (default 5000)")
        ->check(CLI::PositiveNumber);

    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError &e) {
        // --help and --version exit 0; every usage error exits 2, as command-line tools do.
        return app.exit(e) == 0 ? 0 : kUsageExit;
    }
    try {
        if (*migrate) {
            return run_migrate(migrate_opts, only);
        }
        if (*relay) {
            return run_relay(relay_opts, ro);
        }
        if (*purge_inbox) {
            return run_purge_inbox(purge_inbox_opts, inbox_age, inbox_batch);
        }
        if (*stats) {
            return run_stats(stats_opts);
        }
        if (*retry) {
            return run_retry_failed(retry_opts, rto);
        }
        if (*purge) {
            return run_purge(purge_opts, purge_age, purge_batch);
        }
        if (*replay) {
            return run_replay(replay_opts, rpo);
        }
        if (*tail) {
            return run_tail(tail_opts, to);
        }
    } catch (const outbox::Error &e) {
        std::fprintf(stderr, "outbox: %s: %s\n", outbox::errc_name(e.code()), e.what());
        // A bad option value, a missing URL or an unknown key is a usage error too.
        const bool usage = e.code() == outbox::Errc::invalid_argument || e.code() == outbox::Errc::unknown_key;
        return usage ? kUsageExit : 1;
    } catch (const std::exception &e) {
        std::fprintf(stderr, "outbox: %s\n", e.what());
        return 1;
    }
    return 0;
}
