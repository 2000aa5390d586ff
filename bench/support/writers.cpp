#include "writers.hpp"

#include "events.hpp"

#include <algorithm>
#include <chrono>
#include <thread>

namespace bench {

WriterConn::~WriterConn() {
    outbox_event_free(ev);
    outbox_db_close(db);
    outbox_config_free(cfg_);
}

std::string WriterConn::open(const Run &run, bool notify,
                             const std::vector<std::pair<const char *, std::string>> &fields) {
    if (outbox_config_new(&cfg_) != OUTBOX_OK ||
        outbox_config_set(cfg_, "outbox.schema", run.schema.c_str()) != OUTBOX_OK ||
        outbox_config_set(cfg_, "relay.notify_channel", run.channel.c_str()) != OUTBOX_OK ||
        outbox_config_set(cfg_, "write.notify", notify ? "true" : "false") != OUTBOX_OK) {
        return std::string("config: ") + outbox_last_error();
    }
    if (outbox_db_open(&db, run.pg_url.c_str(), cfg_) != OUTBOX_OK) {
        return std::string("outbox_db_open: ") + outbox_last_error();
    }
    if (outbox_event_new(&ev) != OUTBOX_OK) {
        return std::string("event: ") + outbox_last_error();
    }
    for (const auto &[k, v] : fields) {
        if (outbox_event_set(ev, k, v.c_str()) != OUTBOX_OK) {
            return std::string("event: ") + outbox_last_error();
        }
    }
    return "";
}

void StartLine::arrive_and_wait() {
    ready_.fetch_add(1);
    while (!go_.load()) {
        std::this_thread::yield();
    }
}

void StartLine::wait_for(int threads) const {
    while (ready_.load() < threads) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
}

namespace {

struct PacedPlan {
    double rate = 0;
    long cap = 0;
    Clock::time_point t0{}, deadline{}; // set by the starter before it releases the writers
};

// Writer w of n: events w, w + n, ... of the plan; an error goes to `err`.
void paced_writer(WriterConn &c, const PacedPlan &plan, const IdOf &id_of, const IdOf &event_id_of, int w, int n,
                  PacedWrites &pw, std::string &err) {
    std::string agg, eid;
    for (long k = w; k < plan.cap; k += n) {
        if (plan.rate > 0) {
            std::this_thread::sleep_until(
                plan.t0 + std::chrono::nanoseconds(static_cast<int64_t>(static_cast<double>(k) * 1e9 / plan.rate)));
        } else if (Clock::now() >= plan.deadline) {
            break;
        }
        id_of(agg, k);
        if (event_id_of) {
            event_id_of(eid, k);
            if (outbox_event_set(c.ev, "event_id", eid.c_str()) != OUTBOX_OK) {
                err = std::string("event_id: ") + outbox_last_error();
                return;
            }
        }
        if (outbox_event_set(c.ev, "aggregate_id", agg.c_str()) != OUTBOX_OK ||
            outbox_db_exec(c.db, "BEGIN") != OUTBOX_OK || outbox_write(c.db, c.ev) != OUTBOX_OK ||
            outbox_db_exec(c.db, "COMMIT") != OUTBOX_OK) {
            err = std::string("write: ") + outbox_last_error();
            return;
        }
        pw.commit_ns[static_cast<size_t>(k)] = now_ns();
        if (g_interrupted.load()) {
            err = "interrupted";
            return;
        }
    }
}

} // namespace

PacedWrites paced_writes(const Run &run, const Options &o, bool notify, double rate, double seconds, long cap,
                         const IdOf &id_of, const IdOf &event_id_of) {
    PacedWrites pw;
    pw.commit_ns.assign(static_cast<size_t>(cap), 0);
    std::vector<std::string> errors(static_cast<size_t>(o.writers));
    StartLine start;
    PacedPlan plan;
    plan.rate = rate;
    plan.cap = cap;
    Generator pl;
    pl.payload_bytes = o.w_payload_bytes;
    std::string payload;
    pl.payload(payload, 0);
    std::vector<std::thread> threads;
    threads.reserve(static_cast<size_t>(o.writers));
    for (int w = 0; w < o.writers; ++w) {
        threads.emplace_back([&, w] {
            auto &err = errors[static_cast<size_t>(w)];
            WriterConn c;
            err = c.open(run, notify, {{"aggregate_type", "PRD"}, {"operation", "PUT"}, {"payload", payload}});
            if (!err.empty()) {
                err.insert(0, "writer setup: ");
            } else {
                start.arrive_and_wait();
                paced_writer(c, plan, id_of, event_id_of, w, o.writers, pw, err);
            }
            if (!err.empty()) {
                start.give_up();
            }
        });
    }
    start.wait_for(o.writers);
    plan.t0 = Clock::now() + std::chrono::milliseconds(20);
    plan.deadline = plan.t0 + std::chrono::nanoseconds(static_cast<int64_t>(seconds * 1e9));
    start.release();
    for (auto &t : threads) {
        t.join();
    }
    for (const auto &e : errors) {
        if (!e.empty()) {
            die("writer failed: " + e);
        }
    }
    int64_t last = 0;
    for (long k = 0; k < cap; ++k) {
        const int64_t c = pw.commit_ns[static_cast<size_t>(k)];
        if (c != 0) {
            ++pw.written;
            last = std::max(last, c);
        }
    }
    pw.t0_ns = ns_of(plan.t0);
    pw.seconds = pw.written > 0 ? static_cast<double>(last - pw.t0_ns) / 1e9 : 0;
    return pw;
}

} // namespace bench
