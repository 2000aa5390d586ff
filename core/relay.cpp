#include "relay.hpp"

#include "connect.hpp"
#include "envelope.hpp"
#include "error.hpp"
#include "retention.hpp"
#include "store.hpp"
#include "stream.hpp"

#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <limits>
#include <map>
#include <set>
#include <unordered_map>
#include <vector>

namespace outbox {
namespace {

using Clock = std::chrono::steady_clock;

int64_t micros_since(Clock::time_point t0) {
    return std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - t0).count();
}

// A PostgreSQL array literal of text elements, every element quoted and escaped.
std::string array_literal(const std::vector<std::string> &items) {
    std::string out = "{";
    for (size_t i = 0; i < items.size(); ++i) {
        if (i > 0) {
            out.push_back(',');
        }
        out.push_back('"');
        for (char c : items[i]) {
            if (c == '"' || c == '\\') {
                out.push_back('\\');
            }
            out.push_back(c);
        }
        out.push_back('"');
    }
    out.push_back('}');
    return out;
}

} // namespace

int64_t backoff_ms(int attempt, int64_t base_ms, int64_t max_ms, std::mt19937_64 &rng) {
    if (attempt < 1) {
        attempt = 1;
    }
    int64_t d = base_ms;
    for (int i = 1; i < attempt && d < max_ms; ++i) {
        d *= 2;
    }
    d = std::min(d, max_ms);
    if (d <= 1) {
        return std::max<int64_t>(d, 0);
    }
    std::uniform_int_distribution<int64_t> jitter(d / 2, d);
    return jitter(rng);
}

Relay::Relay(Config cfg)
    : cfg_(std::move(cfg)), read_sql_(stream::read_sql(cfg_)), parked_sql_(stream::parked_sql(cfg_)),
      record_sql_(stream::record_sql(cfg_)), rng_(std::random_device{}()) {
    cfg_.require_pg_url("the relay");
    cfg_.require_amqp_url("the relay");
    if (pipe2(stop_pipe_, O_CLOEXEC | O_NONBLOCK) != 0) {
        fail(Errc::internal, "cannot create the relay's stop pipe");
    }
}

Relay::~Relay() {
    discard_prefetch();
    drop_amqp();
    drop_pg();
    for (int fd : stop_pipe_) {
        if (fd >= 0) {
            close(fd);
        }
    }
}

void Relay::stop() noexcept {
    stop_.store(true, std::memory_order_relaxed);
    char c = 1;
    // write(2) is async-signal-safe; a full pipe already holds a wake-up.
    ssize_t r = write(stop_pipe_[1], &c, 1);
    (void)r;
}

void Relay::reset_stop() noexcept {
    stop_.store(false, std::memory_order_relaxed);
    char buf[64];
    while (read(stop_pipe_[0], buf, sizeof buf) > 0) {
    }
}

void Relay::log(LogLevel level, const std::string &msg) const {
    if (log_) {
        log_(level, msg);
    }
}

void Relay::ensure_pg() {
    std::optional<pg::Conn> &c = pg_;
    if (c && c->ok()) {
        return;
    }
    if (c) {
        log(LogLevel::warn, "PostgreSQL connection lost; reconnecting");
    }
    drop_pg();
    if (cfg_.pg_url.empty()) {
        fail(Errc::invalid_argument, "no PostgreSQL URL configured (pg.url)");
    }
    c.emplace(pg::Conn::open(cfg_.pg_url, cfg_.pg_connect_timeout_s, cfg_.relay_name));
    // The read is small and frequent: JIT compilation would cost more than it saves. The
    // relay's commits need not wait for the WAL flush: a record lost in a database crash only
    // means the event is published again (at-least-once), and WAL order loses only a suffix of
    // records, so per-aggregate order still holds.
    c->exec_simple("SET jit = off; SET synchronous_commit = off");
    if (cfg_.relay_listen) {
        c->exec_simple("LISTEN \"" + cfg_.notify_channel + "\"");
        listening_ = true;
    }
    pg_up_.store(true, std::memory_order_relaxed);
    log(LogLevel::info, "connected to PostgreSQL " + pg::redact_conninfo(cfg_.pg_url) +
                            (listening_ ? " (listening on " + cfg_.notify_channel + ")" : ""));
}

void Relay::ensure_amqp() {
    if (mq_ && mq_->alive()) {
        return;
    }
    if (mq_) {
        log(LogLevel::warn, "RabbitMQ connection lost; reconnecting");
    }
    drop_amqp();
    amqp::Options o = amqp_options(cfg_, cfg_.relay_name);
    o.first = broker_next_;
    auto conn = std::make_unique<amqp::Connection>(o);
    // After a loss the next connect starts at the next node of the list: a dead node is not tried first.
    broker_next_ = conn->address_index() + 1;
    {
        std::lock_guard<std::mutex> lock(node_mu_);
        amqp_node_ = conn->node();
    }
    if (cfg_.exchange_declare) {
        conn->declare_exchange(cfg_.exchange, cfg_.exchange_type, true, false);
    }
    conn->confirm_select();
    mq_ = std::move(conn);
    blocked_ = false;
    log(LogLevel::info, "connected to RabbitMQ node " + mq_->node() + " (" + amqp::redact_url(cfg_.amqp_url) +
                            "), exchange " + cfg_.exchange);
}

std::string Relay::amqp_node() const {
    std::lock_guard<std::mutex> lock(node_mu_);
    return amqp_node_;
}

void Relay::drop_pg() noexcept {
    if (pg_) {
        pg_.reset();
        listening_ = false;
        active_ = false; // the relay lock went with the connection
        prefetch_.reset();
    }
    pg_up_.store(false, std::memory_order_relaxed);
}

void Relay::drop_amqp() noexcept {
    mq_.reset();
}

// Takes the table's relay lock when this relay does not hold it yet, and then loads what the
// previous holder left: the cursor, what is done above it, and the aggregates with parked events.
// Returns false while another relay holds the lock (this one stands by).
bool Relay::ensure_active() {
    pg::Conn &db = *pg_;
    if (active_) {
        return true;
    }
    if (db.exec(stream::lock_sql, {cfg_.outbox_qualified()}).get(0, 0) != "t") {
        if (!standby_logged_) {
            log(LogLevel::info, "another relay is active on " + cfg_.outbox_qualified() + "; standing by");
            standby_logged_ = true;
        }
        return false;
    }
    pg::Result c = db.exec("SELECT cursor FROM " + stream::relay_table(cfg_) + " WHERE name = 'default'");
    if (c.rows() == 0) {
        fail(Errc::schema, "the outbox relay table has no cursor row; run outbox migrate");
    }
    const int64_t cursor = c.get_int(0, 0);
    pg::Result r = db.exec("SELECT from_position, to_position FROM " + stream::receipts_table(cfg_) +
                               " WHERE to_position > CAST($1 AS bigint) AND from_position > CAST($1 AS bigint) - " +
                               std::to_string(max_receipt_span) + " ORDER BY from_position",
                           {std::to_string(cursor)});
    std::vector<std::pair<int64_t, int64_t>> done;
    for (int i = 0; i < r.rows(); ++i) {
        done.emplace_back(r.get_int(i, 0), r.get_int(i, 1));
    }
    pg::Result p =
        db.exec("SELECT position FROM " + stream::parked_table(cfg_) + " WHERE position > CAST($1 AS bigint)",
                {std::to_string(cursor)});
    std::vector<int64_t> parked;
    for (int i = 0; i < p.rows(); ++i) {
        parked.push_back(p.get_int(i, 0));
    }
    progress_.load(cursor, done, parked);
    stored_cursor_ = cursor;
    reload_parked(db);
    active_ = true;
    standby_logged_ = false;
    log(LogLevel::info, "relay active on " + cfg_.outbox_qualified() + " from position " + std::to_string(cursor));
    return true;
}

void Relay::reload_parked(pg::Conn &db) {
    parked_aggs_.clear();
    pg::Result a = db.exec("SELECT DISTINCT aggregate_type, aggregate_id FROM " + stream::parked_table(cfg_));
    for (int i = 0; i < a.rows(); ++i) {
        parked_aggs_.emplace(std::string(a.get(i, 0)), std::string(a.get(i, 1)));
    }
}

namespace {
// One event row as read_sql and parked_sql return them, from column `c` (the position) on.
RelayItem item_from(const pg::Result &r, int i, int c) {
    RelayItem it;
    it.position = r.get_int(i, c);
    it.row.outbox_id = std::string(r.get(i, c + 1));
    it.row.event_type = std::string(r.get(i, c + 2));
    it.row.aggregate_type = std::string(r.get(i, c + 3));
    it.row.aggregate_id = std::string(r.get(i, c + 4));
    it.row.seq = r.get_int(i, c + 5);
    it.row.operation = std::string(r.get(i, c + 6));
    it.row.payload = std::string(r.get(i, c + 7));
    it.row.previous_payload = r.get_opt(i, c + 8);
    it.row.metadata = std::string(r.get(i, c + 9));
    it.row.user = r.get_opt(i, c + 10);
    it.row.created_at = std::string(r.get(i, c + 11));
    it.row.created_epoch_s = r.get_int(i, c + 12);
    it.retry_count = static_cast<int>(r.get_int(i, c + 13));
    return it;
}
} // namespace

// The due parked events: whole aggregates from their first parked event on, in position order.
void Relay::read_parked(pg::Conn &db, std::vector<RelayItem> &items) {
    if (parked_aggs_.empty()) {
        return;
    }
    pg::Result r = db.exec_cached(parked_sql_, {std::to_string(cfg_.relay_batch_size)});
    for (int i = 0; i < r.rows(); ++i) {
        RelayItem it = item_from(r, i, 0);
        it.parked = true;
        items.push_back(std::move(it));
    }
}

Relay::StreamRead Relay::stream_read(int limit) const {
    StreamRead r;
    r.positions = progress_.recheck(static_cast<size_t>(cfg_.relay_batch_size));
    r.again = "{";
    for (size_t i = 0; i < r.positions.size(); ++i) {
        r.again += (i > 0 ? "," : "") + std::to_string(r.positions[i]);
    }
    r.again += "}";
    // Nothing past the frontier while retries wait outside this read (Progress::covers_retries).
    r.past = std::to_string(progress_.covers_retries(r.positions) ? progress_.frontier()
                                                                  : std::numeric_limits<int64_t>::max());
    r.limit = std::to_string(std::max(limit, 1));
    return r;
}

// The stream: gaps and retries again, then the events past the frontier, in position order (those
// only when every retry is read again). One autocommit statement: an idle relay's poll.
void Relay::read_stream(pg::Conn &db, std::vector<RelayItem> &items, int limit) {
    const int64_t frontier = progress_.frontier();
    const StreamRead want = stream_read(limit);
    const std::vector<int64_t> &again = want.positions;
    pg::Result r;
    if (prefetch_ && !prefetch_->sent && prefetch_->read == want) {
        r = std::move(prefetch_->result);
    } else {
        r = db.exec_cached(read_sql_, {want.again, want.past, want.limit});
    }
    prefetch_.reset();
    const stream::Snapshot snap = stream::parse_snapshot(r.get(0, 0));
    std::vector<int64_t> found_again;
    std::vector<int64_t> fresh;
    for (int i = 0; i < r.rows(); ++i) {
        if (r.is_null(i, 1)) {
            continue; // no event: the snapshot's row alone
        }
        RelayItem it = item_from(r, i, 1);
        if (it.position <= frontier) {
            found_again.push_back(it.position);
        } else {
            fresh.push_back(it.position);
            if (progress_.done(it.position)) {
                continue; // published or parked before this relay took over
            }
        }
        if (parked_aggs_.count({it.row.aggregate_type, it.row.aggregate_id}) > 0) {
            it.park = true; // behind its aggregate's parked events
        }
        items.push_back(std::move(it));
    }
    progress_.observe(again, found_again, fresh, snap);
}

// After a full batch is read: sends the read the next step will make if every event of this batch
// is published (the frontier past them, the same positions read again). A read is only ever
// of events committed by its snapshot, whenever it is made, so an earlier one is as good: the next
// step uses it when its own read would be the same (read_stream), and otherwise reads afresh.
void Relay::send_prefetch(pg::Conn &db, const std::vector<RelayItem> &items) {
    prefetch_.reset();
    if (items.size() < static_cast<size_t>(cfg_.relay_batch_size) || !parked_aggs_.empty() || stopping()) {
        return; // no backlog behind this batch, or the next read depends on how this one ends
    }
    Prefetch p;
    p.read = stream_read(cfg_.relay_batch_size);
    db.send_cached(read_sql_, {p.read.again, p.read.past, p.read.limit});
    p.sent = true;
    prefetch_ = std::move(p);
}

// Takes the prefetched read's result, so that the connection is free again. On any failure the prefetch
// is dropped: the next step reads afresh (and finds a lost connection itself).
void Relay::collect_prefetch(pg::Conn &db) noexcept {
    if (!prefetch_ || !prefetch_->sent) {
        return;
    }
    try {
        prefetch_->result = db.collect();
        prefetch_->sent = false;
    } catch (const std::exception &) {
        prefetch_.reset();
    }
}

std::vector<RelayItem> Relay::read_batch(pg::Conn &db, RelayStats &st) {
    std::vector<RelayItem> items;
    (void)st;
    read_parked(db, items);
    read_stream(db, items, cfg_.relay_batch_size - static_cast<int>(items.size()));
    return items;
}

// Drops a read made ahead, first taking its result if it is still on its way, so that the
// connection is free for the next statement.
void Relay::discard_prefetch() noexcept {
    if (prefetch_ && prefetch_->sent && pg_) {
        collect_prefetch(*pg_);
    }
    prefetch_.reset();
}

// Every 10 s, and as soon as the events read come within a partition of the last one's end, the
// active relay makes the events partitions ahead of the writers (so small partitions filling fast
// do not overflow into the default one). A role that may not (least privilege) leaves it to
// outbox migrate and purge: the default partition holds the events meanwhile, and nothing is lost.
void Relay::maintain_partitions(pg::Conn &db) {
    const auto now = Clock::now();
    const bool near_end = partitions_end_ > 0 && progress_.frontier() + cfg_.outbox_partition_events >= partitions_end_;
    if (now < next_partition_check_ && !near_end) {
        return;
    }
    const bool timed = now >= next_partition_check_;
    next_partition_check_ = now + std::chrono::seconds(10);
    try {
        partitions_end_ = retention::ensure_partitions(db, cfg_);
        if (timed) {
            // Closed partitions' aggregate indexes, built on a connection of the indexer's own.
            if (const std::string warning = indexer_.tick(db, cfg_); !warning.empty()) {
                log(LogLevel::warn, warning);
            }
        }
    } catch (const Error &e) {
        if (!db.ok()) {
            throw;
        }
        partitions_end_ = 0; // until the next check, every 10 s
        db.rollback_quietly();
        log(LogLevel::warn,
            std::string("cannot make the outbox's partitions ahead (outbox migrate or purge will): ") + e.what());
    }
}

// Stage 3: per-aggregate chains in position order. Parked events come first (they are the older
// ones of their aggregates); stream events of an aggregate with parked events are parked unsent.
// A link whose predecessor is missing from the batch is held back. Returns the heads: the items
// ready to send.
std::vector<int> Relay::build_chains(std::vector<RelayItem> &items) {
    std::vector<int> ready;
    std::unordered_map<std::string, int> tail; // aggregate -> last item index in its chain
    for (int i = 0; i < static_cast<int>(items.size()); ++i) {
        RelayItem &item = items[static_cast<size_t>(i)];
        if (item.park) {
            item.outcome = RelayOutcome::held_back;
            continue;
        }
        std::string key = item.row.aggregate_type;
        key.push_back('\0');
        key += item.row.aggregate_id;
        auto it = tail.find(key);
        if (it == tail.end()) {
            tail.emplace(std::move(key), i);
            ready.push_back(i);
        } else if (items[static_cast<size_t>(it->second)].row.seq + 1 == item.row.seq) {
            items[static_cast<size_t>(it->second)].next = i;
            it->second = i;
        } else {
            item.outcome = RelayOutcome::held_back;
        }
    }
    return ready;
}

// Stage 4's state: chains published in parallel, the links of one chain one after another, up to
// relay.window messages in flight, confirms read as they come.
struct Relay::PublishRound {
    PublishRound(std::vector<RelayItem> &batch, std::vector<int> heads, RelayStats &stats)
        : items(batch), ready(std::move(heads)), st(stats) {}

    std::vector<RelayItem> &items;
    std::vector<int> ready; // items whose predecessor is confirmed, in the order they became so
    RelayStats &st;
    size_t next_ready = 0;
    std::map<uint64_t, int> in_flight; // delivery tag -> item
    std::unordered_map<std::string, int> by_id;

    // The broker's answer for one item: a confirmed, unreturned item is published and lets the next
    // link of its chain go; anything else is a failure.
    void resolve(int idx, bool acked, const char *why, bool unroutable_is_failure) {
        RelayItem &it = items[static_cast<size_t>(idx)];
        if (acked && (!it.returned || !unroutable_is_failure)) {
            it.outcome = RelayOutcome::published;
            if (it.next >= 0) {
                ready.push_back(it.next);
            }
            return;
        }
        it.outcome = RelayOutcome::failed;
        if (it.error.empty()) {
            it.error = why;
        }
        if (!acked) {
            ++st.nacked;
        }
    }

    // An ack or nack, single or `multiple` (every outstanding tag up to it).
    void confirm(uint64_t tag, bool multiple, bool acked, bool unroutable_is_failure) {
        const char *why = acked ? "" : "nacked by the broker";
        if (!multiple) {
            auto found = in_flight.find(tag);
            if (found != in_flight.end()) {
                resolve(found->second, acked, why, unroutable_is_failure);
                in_flight.erase(found);
            }
            return;
        }
        auto end = in_flight.upper_bound(tag);
        for (auto i = in_flight.begin(); i != end; ++i) {
            resolve(i->second, acked, why, unroutable_is_failure);
        }
        in_flight.erase(in_flight.begin(), end);
    }
};

// Sends the ready links while the window has room and the broker does not block publishing.
void Relay::send_ready(PublishRound &round, amqp::Connection &mq) {
    while (!blocked_ && !stopping() && round.next_ready < round.ready.size() &&
           round.in_flight.size() < static_cast<size_t>(cfg_.relay_window)) {
        int idx = round.ready[round.next_ready++];
        RelayItem &it = round.items[static_cast<size_t>(idx)];
        std::string body = envelope_body(it.row);
        uint64_t tag = mq.publish(cfg_.exchange, routing_key(it.row), true, envelope_properties(it.row), body);
        it.outcome = RelayOutcome::in_flight;
        round.in_flight.emplace(tag, idx);
        round.by_id.emplace(it.row.outbox_id, idx);
    }
}

// One event from the broker during publishing: a confirm, a return, or a (un)block notice.
void Relay::on_broker_event(PublishRound &round, const amqp::Event &ev) {
    if (const auto *ack = std::get_if<amqp::Ack>(&ev)) {
        round.confirm(ack->tag, ack->multiple, true, cfg_.relay_unroutable_is_failure);
    } else if (const auto *nack = std::get_if<amqp::Nack>(&ev)) {
        round.confirm(nack->tag, nack->multiple, false, cfg_.relay_unroutable_is_failure);
    } else if (const auto *ret = std::get_if<amqp::Returned>(&ev)) {
        auto found = round.by_id.find(ret->props.message_id);
        if (found != round.by_id.end()) {
            RelayItem &it = round.items[static_cast<size_t>(found->second)];
            it.returned = true;
            it.error = "unroutable: " + std::to_string(ret->reply_code) + " " + ret->reply_text +
                       " (no queue bound to exchange " + cfg_.exchange + ")";
            ++round.st.unroutable;
        }
    } else if (std::holds_alternative<amqp::Blocked>(ev)) {
        blocked_ = true;
        round.st.blocked = true;
        log(LogLevel::warn, "RabbitMQ blocked publishing (resource alarm); waiting");
    } else if (std::holds_alternative<amqp::Unblocked>(ev)) {
        blocked_ = false;
        log(LogLevel::info, "RabbitMQ unblocked publishing");
    }
}

// Stage 4: publish and collect confirms until every chain is done, publishing is blocked or stopped,
// or relay.confirm_timeout_ms ran out. Returns the broker's error when the connection was lost
// (confirms received so far are real; everything else stays PENDING), else nothing.
std::optional<std::string> Relay::publish(PublishRound &round) {
    amqp::Connection &mq = *mq_;
    const auto deadline = Clock::now() + std::chrono::milliseconds(cfg_.relay_confirm_timeout_ms);
    try {
        while (true) {
            send_ready(round, mq);
            const bool can_publish = !blocked_ && !stopping();
            const bool chains_left = round.next_ready < round.ready.size();
            if (round.in_flight.empty() && (!chains_left || !can_publish)) {
                break;
            }
            auto now = Clock::now();
            if (now >= deadline) {
                break;
            }
            // Block only when nothing more can be sent; otherwise just drain what has arrived.
            const bool more_to_send =
                can_publish && chains_left && round.in_flight.size() < static_cast<size_t>(cfg_.relay_window);
            int wait_ms =
                more_to_send
                    ? 0
                    : static_cast<int>(std::min<int64_t>(
                          200, std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now).count() + 1));
            for (std::optional<amqp::Event> ev = mq.wait(wait_ms); ev; ev = mq.wait(0)) {
                on_broker_event(round, *ev);
            }
        }
    } catch (const Error &e) {
        drop_amqp();
        return std::string(e.what());
    }
    if (!round.in_flight.empty()) {
        round.st.unconfirmed = static_cast<int64_t>(round.in_flight.size());
        // Late confirms would refer to tags of a batch we no longer track: start afresh.
        log(LogLevel::warn, std::to_string(round.in_flight.size()) + " message(s) not confirmed within " +
                                std::to_string(cfg_.relay_confirm_timeout_ms) + " ms; reconnecting to RabbitMQ");
        drop_amqp();
    }
    return std::nullopt;
}

// Stage 5: records every outcome of the batch and the cursor in one autocommit statement:
// receipts for published stream events; failed stream events, and the later events of their
// aggregates, parked; parked events published (removed) or failed again (backoff, FAILED at
// relay.max_attempts). Events neither published nor parked are read again next step. A failure
// drops the connection, so the next step reloads the stored progress (nothing is skipped).
void Relay::record(pg::Conn &db, std::vector<RelayItem> &items, RelayStats &st) {
    const auto t0 = Clock::now();
    std::vector<int64_t> published;
    std::vector<int64_t> gone;
    std::vector<std::string> park_pos, park_status, park_retries, park_err, park_delay;
    std::vector<std::string> again_pos, again_err, again_delay;
    std::set<std::pair<std::string, std::string>> failed_aggs;
    std::set<std::pair<std::string, std::string>> newly_parked;
    for (RelayItem &it : items) {
        std::pair<std::string, std::string> agg{it.row.aggregate_type, it.row.aggregate_id};
        const bool failed = it.outcome == RelayOutcome::failed;
        if (failed) {
            log(LogLevel::warn, "event " + it.row.outbox_id + " (" + it.row.event_type + " " + it.row.aggregate_type +
                                    ":" + it.row.aggregate_id + ") failed: " + it.error);
        }
        if (it.parked) {
            if (it.outcome == RelayOutcome::published) {
                gone.push_back(it.position);
            } else if (failed) {
                again_pos.push_back(std::to_string(it.position));
                again_err.push_back(it.error);
                again_delay.push_back(std::to_string(
                    backoff_ms(it.retry_count + 1, cfg_.relay_backoff_base_ms, cfg_.relay_backoff_max_ms, rng_)));
            }
            continue;
        }
        if (it.outcome == RelayOutcome::published) {
            published.push_back(it.position);
            continue;
        }
        if (failed || it.park || failed_aggs.count(agg) > 0) {
            park_pos.push_back(std::to_string(it.position));
            park_status.emplace_back("PENDING");
            park_retries.emplace_back(failed ? "1" : "0");
            park_err.push_back(failed ? it.error : std::string());
            park_delay.push_back(
                failed ? std::to_string(backoff_ms(1, cfg_.relay_backoff_base_ms, cfg_.relay_backoff_max_ms, rng_))
                       : "0");
            if (failed) {
                failed_aggs.insert(agg);
            } else {
                ++st.held_back;
            }
            newly_parked.insert(std::move(agg));
            continue;
        }
        if (it.outcome != RelayOutcome::in_flight) {
            ++st.held_back;
        }
        progress_.retry(it.position);
    }
    const int64_t cursor = progress_.advance();
    const bool nothing = published.empty() && gone.empty() && park_pos.empty() && again_pos.empty();
    if (nothing && cursor == stored_cursor_ && !progress_.awaiting_bound()) {
        return;
    }
    std::vector<std::string> from;
    std::vector<std::string> to;
    for (const auto *list : {&published, &gone}) {
        for (const auto &[a, b] : stream::ranges(*list)) {
            from.push_back(std::to_string(a));
            to.push_back(std::to_string(b));
        }
    }
    std::vector<std::string> gone_text;
    for (int64_t p : gone) {
        gone_text.push_back(std::to_string(p));
    }
    try {
        pg::Result r = db.exec_cached(
            record_sql_, {array_literal(from), array_literal(to), array_literal(park_pos), array_literal(park_status),
                          array_literal(park_retries), array_literal(park_err), array_literal(park_delay),
                          array_literal(gone_text), array_literal(again_pos), array_literal(again_err),
                          array_literal(again_delay), std::to_string(cfg_.relay_max_attempts), std::to_string(cursor)});
        st.published += r.get_int(0, 0);
        st.failed += r.get_int(0, 1);
        st.dead += r.get_int(0, 2);
        stored_cursor_ = cursor;
        progress_.set_bound(static_cast<uint64_t>(r.get_int(0, 4)));
        if (!gone.empty()) {
            reload_parked(db);
        }
        parked_aggs_.insert(newly_parked.begin(), newly_parked.end());
    } catch (const Error &) {
        // Not recorded: the events are published again (duplicates, never loss) once the next
        // step has reloaded the stored progress.
        drop_pg();
        throw;
    }
    st.record_us += micros_since(t0);
}

RelayStats Relay::step() {
    RelayStats st;
    const auto t0 = Clock::now();
    ensure_amqp();
    ensure_pg();
    pg::Conn &db = *pg_;
    collect_prefetch(db); // left sent only when the last step ended early, by an exception
    std::vector<RelayItem> items;
    try {
        if (!ensure_active()) {
            st.total_us = micros_since(t0);
            return st;
        }
        maintain_partitions(db);
        items = read_batch(db, st);
    } catch (const Error &) {
        if (!db.ok()) {
            drop_pg();
        }
        throw;
    }
    st.read = static_cast<int64_t>(items.size());
    st.read_us = micros_since(t0);
    if (items.empty()) {
        record(db, items, st); // the cursor may pass gaps that became final
        st.total_us = micros_since(t0);
        return st;
    }
    try {
        send_prefetch(db, items);
    } catch (const Error &) {
        prefetch_.reset(); // the next step reads afresh (and finds a lost connection itself)
    }
    const auto t1 = Clock::now();
    PublishRound round(items, build_chains(items), st);
    const std::optional<std::string> amqp_error = publish(round);
    st.publish_us = micros_since(t1);
    collect_prefetch(db);
    record(db, items, st);
    st.total_us = micros_since(t0);
    if (amqp_error) {
        fail(Errc::broker, "RabbitMQ connection lost during a batch (" + std::to_string(st.published) +
                               " confirmed events were recorded, the rest stay pending): " + *amqp_error);
    }
    return st;
}

void Relay::sleep_interruptible(int ms) {
    const auto deadline = Clock::now() + std::chrono::milliseconds(ms);
    while (!stopping()) {
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
        if (left <= 0) {
            return;
        }
        // Backing off from a PostgreSQL outage must not cost the RabbitMQ connection too: without
        // its heartbeats the broker closes it after 2 x amqp.heartbeat_s, and the first step after
        // the database is back would fail on it (and back off again). wait() sends and checks them.
        if (mq_) {
            try {
                while (auto ev = mq_->wait(0)) {
                    if (std::holds_alternative<amqp::Blocked>(*ev)) {
                        blocked_ = true;
                    } else if (std::holds_alternative<amqp::Unblocked>(*ev)) {
                        blocked_ = false;
                    }
                }
            } catch (const Error &e) {
                log(LogLevel::warn, std::string("RabbitMQ connection lost while backing off: ") + e.what());
                drop_amqp();
            }
        }
        pollfd fds[2];
        nfds_t n = 0;
        fds[n++] = {stop_pipe_[0], POLLIN, 0};
        if (mq_ && mq_->fd() >= 0) {
            fds[n++] = {mq_->fd(), POLLIN, 0};
        }
        poll(fds, n, static_cast<int>(std::min<int64_t>(left, 1000)));
    }
}

void Relay::idle_wait(int timeout_ms) {
    const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
    while (!stopping()) {
        auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
        if (left <= 0) {
            return;
        }
        // Heartbeats and connection.blocked/unblocked are only seen inside wait().
        if (mq_) {
            while (auto ev = mq_->wait(0)) {
                if (std::holds_alternative<amqp::Blocked>(*ev)) {
                    blocked_ = true;
                } else if (std::holds_alternative<amqp::Unblocked>(*ev)) {
                    blocked_ = false;
                }
            }
        }
        // A notification read by libpq during the last step sits in its buffer, where poll()
        // cannot see it: look there first.
        if (listening_ && pg_ && pg_->ok()) {
            if (pg_->take_notifications() && !blocked_) {
                return;
            }
        }
        pollfd fds[3];
        nfds_t n = 0;
        fds[n++] = {stop_pipe_[0], POLLIN, 0};
        int pg_index = -1;
        if (listening_ && pg_ && pg_->ok()) {
            pg_index = static_cast<int>(n);
            fds[n++] = {pg_->socket(), POLLIN, 0};
        }
        if (mq_ && mq_->fd() >= 0) {
            fds[n++] = {mq_->fd(), POLLIN, 0};
        }
        // Wake at least every second to service AMQP heartbeats.
        int rc = poll(fds, n, static_cast<int>(std::min<int64_t>(left, 1000)));
        if (rc < 0 && errno != EINTR) {
            return;
        }
        if (pg_index >= 0 && (fds[pg_index].revents & (POLLIN | POLLERR | POLLHUP)) != 0) {
            if (!pg_->consume_input()) {
                log(LogLevel::warn, "PostgreSQL connection lost while idle");
                return; // the next step reconnects
            }
            if (pg_->take_notifications() && !blocked_) {
                return;
            }
        }
    }
}

void Relay::report(const RelayStats &st, Errc code, const std::string &error, int retry_in_ms) {
    if (observer_) {
        observer_(StepReport{st, code, error, retry_in_ms, pg_connected(), amqp_connected(), amqp_node()});
    }
}

void Relay::run(const std::function<void(const RelayStats &)> &on_step) {
    int backoff = 100;
    // Adaptive polling: while events keep coming the relay looks again within relay.busy_poll_ms,
    // so latency stays low without the writers' NOTIFY (which costs them a commit-time lock).
    // It keeps that pace for relay.linger_ms after the last event, so the gaps of a bursty load
    // do not grow the next event's wait (the p99 latency); after that the interval doubles up to
    // relay.poll_interval_ms, where an idle relay's poll is one statement.
    const int idle_max = std::max(cfg_.relay_poll_interval_ms, 1);
    const int busy_ms = std::min(cfg_.relay_busy_poll_ms, idle_max);
    int poll_ms = busy_ms;
    auto last_work = Clock::now();
    while (!stopping()) {
        try {
            RelayStats st = step();
            backoff = 100;
            if (on_step) {
                on_step(st);
            }
            report(st, Errc::ok, {}, 0);
            if (st.read > 0 || st.published > 0 || st.failed > 0) {
                log(LogLevel::info, "batch: read " + std::to_string(st.read) + ", published " +
                                        std::to_string(st.published) + ", failed " + std::to_string(st.failed) +
                                        ", held back " + std::to_string(st.held_back) + " in " +
                                        std::to_string(st.total_us / 1000) + " ms");
            }
            // A full batch means more is waiting; a blocked broker means wait for unblocked.
            if (st.blocked || blocked_) {
                discard_prefetch(); // no read left on its way while blocked; idle_wait uses the connection
                idle_wait(cfg_.relay_poll_interval_ms);
            } else if (st.read > 0 && st.read < cfg_.relay_batch_size) {
                poll_ms = busy_ms;
                last_work = Clock::now();
                idle_wait(poll_ms);
            } else if (st.read == 0) {
                idle_wait(poll_ms);
                if (Clock::now() - last_work > std::chrono::milliseconds(cfg_.relay_linger_ms)) {
                    poll_ms = static_cast<int>(std::min<int64_t>(int64_t{poll_ms} * 2, idle_max));
                }
            } else {
                poll_ms = busy_ms;
                last_work = Clock::now();
            }
        } catch (const Error &e) {
            if (e.code() == Errc::invalid_argument || e.code() == Errc::schema) {
                // Configuration errors do not heal by retrying fast.
                backoff = std::max(backoff, 5000);
            }
            log(LogLevel::warn, std::string(errc_name(e.code())) + ": " + e.what() + "; retrying in " +
                                    std::to_string(backoff) + " ms");
            if (e.code() == Errc::broker || e.code() == Errc::timeout) {
                drop_amqp();
            }
            report(RelayStats{}, e.code(), e.what(), backoff);
            sleep_interruptible(backoff);
            backoff = std::min(backoff * 2, 30000);
        }
    }
    // Every step recorded its outcomes before it returned. The connection goes, and with it the
    // table's relay lock, so a relay standing by takes over at once.
    drop_pg();
    log(LogLevel::info, "relay stopped");
}

} // namespace outbox
