#include "run.hpp"

#include <cstdio>
#include <cstdlib>

namespace bench {

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
    if (f.attempts > 0) {
        line += "; CPU stolen " + steal_pct(f.steal) + " / " + steal_pct(f.baseline_steal) + ", " +
                std::to_string(f.attempts) + " attempt(s)" + (f.judging.empty() ? "" : ", " + f.judging);
    }
    progress(line);
    run.figures.push_back(std::move(f));
}

Row *find_row(Run &run, const std::string &key) {
    for (auto &r : run.rows) {
        if (r.key == key) {
            return &r;
        }
    }
    return nullptr;
}

void judge(Figure &f, const Judging &how, bool pass, double steal, double baseline_steal) {
    record_sides(f, how, steal, baseline_steal);
    f.verdict = how.verdict(pass);
}

void record_sides(Figure &f, const Judging &how, double steal, double baseline_steal) {
    f.attempts = how.attempts;
    f.steal = steal;
    f.baseline_steal = baseline_steal;
    f.attempt_steals = how.worst;
    f.judging = how.note;
}

Row retried(Row r, int attempt) {
    if (attempt > 1) {
        r.what += " (attempt " + std::to_string(attempt) + " of its figure's judging)";
        if (r.extra.empty()) {
            r.extra = Json::object();
        }
        r.extra.integer("attempt", attempt);
    }
    return r;
}

std::vector<double> steals(const std::vector<Row> &rows) {
    std::vector<double> out;
    out.reserve(rows.size());
    for (const auto &r : rows) {
        out.push_back(r.steal);
    }
    return out;
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

// The headers the relay sets on a generated event (no trace context in its metadata):
// outbox-aggregate-type, outbox-aggregate-id, outbox-seq and outbox-partition-key.
constexpr int kRelayHeaders = 4;

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
               got.delivery_mode == 2 && got.timestamp == g.created_epoch_s(i) && got.headers == kRelayHeaders &&
               got.routing_key == g.routing_key(i),
           who + ": properties and routing key as the relay sets them (type " + got.type + ", app_id " + got.app_id +
               ", content_type " + got.content_type + ", delivery_mode " + std::to_string(got.delivery_mode) +
               ", timestamp " + std::to_string(got.timestamp) + ", " + std::to_string(got.headers) +
               " header(s), routing key " + got.routing_key + ")");
    run.body_bytes = static_cast<int>(got.body.size());
}

void expect_queue_holds(Run &run, Amqp &admin, long n, const std::string &who) {
    const uint32_t q = admin.count(run.queue);
    expect(run, q == static_cast<uint32_t>(n),
           who + ": the queue holds " + std::to_string(n) + " messages (" + std::to_string(q) + ")");
}

std::string rate_with_steal(const Row &r) {
    return rate_str(r.rate()) + (r.steal >= 0 ? " (CPU stolen " + fixed(100.0 * r.steal, 0) + "%)" : "");
}

void reset_outbox(Pg &pg, const Run &run) {
    // Storage version 2: the events and the relay's receipts and parked events; the cursor stays
    // (positions only grow, so the next backlog lies above it).
    pg.exec("TRUNCATE " + table_of(run, "outbox_events") + ", " + table_of(run, "outbox_receipts") + ", " +
            table_of(run, "outbox_parked") + ", " + table_of(run, "outbox_keys") + ", " +
            table_of(run, "outbox_aggregates"));
}

void drop_event_partitions(Pg &pg, const Run &run) {
    for (const char *table : {"outbox_events", "outbox_receipts"}) {
        auto parts =
            pg.query("SELECT CAST(inhrelid AS regclass) FROM pg_inherits WHERE inhparent = CAST($1 AS regclass)"
                     " AND NOT CAST(inhrelid AS regclass)::text ~ '_(default|dflt)\"?$'",
                     {table_of(run, table)});
        for (int i = 0; i < parts->rows(); ++i) {
            pg.exec("DROP TABLE " + parts->get(i, 0));
        }
    }
}

std::string table_of(const Run &run, const char *name) {
    return "\"" + run.schema + "\"." + name;
}

std::string source_rev() {
    const char *rev = std::getenv("OUTBOX_SOURCE_REV");
    return rev != nullptr && *rev != '\0' ? rev : "unknown (run outside bench/run)";
}

} // namespace bench
