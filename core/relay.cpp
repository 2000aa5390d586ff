#include "relay.hpp"

#include "connect.hpp"
#include "envelope.hpp"
#include "error.hpp"
#include "store.hpp"

#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <map>
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

std::string mark_sql(const Config &cfg) {
    const std::string t = cfg.outbox_qualified();
    // One statement per step records every outcome: published ids, and failures with their
    // message and backoff. `status = 'PENDING'` guards against an operator having changed a row.
    return "WITH ok AS (UPDATE " + t +
           " SET status = 'PUBLISHED', published_at = now(), error_message = NULL"
           " WHERE outbox_id = ANY(CAST($1 AS uuid[])) AND status = 'PENDING' RETURNING 1),"
           " bad AS (UPDATE " +
           t +
           " t SET retry_count = t.retry_count + 1, error_message = f.err,"
           " next_attempt_at = now() + f.delay_ms * interval '1 millisecond',"
           " status = CASE WHEN t.retry_count + 1 >= CAST($4 AS integer) THEN 'FAILED' ELSE 'PENDING' END"
           " FROM unnest(CAST($2 AS uuid[]), CAST($3 AS text[]), CAST($5 AS bigint[])) AS f(id, err, delay_ms)"
           " WHERE t.outbox_id = f.id AND t.status = 'PENDING' RETURNING t.status = 'FAILED' AS dead)"
           " SELECT (SELECT count(*) FROM ok), (SELECT count(*) FROM bad), (SELECT count(*) FROM bad WHERE dead)";
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
    : cfg_(std::move(cfg)), visit_sql_(store::visit_sql(cfg_)), claim_sql_(store::claim_sql(cfg_)),
      mark_sql_(mark_sql(cfg_)), rng_(std::random_device{}()) {
    cfg_.require_pg_url("the relay");
    cfg_.require_amqp_url("the relay");
    if (pipe2(stop_pipe_, O_CLOEXEC | O_NONBLOCK) != 0) {
        fail(Errc::internal, "cannot create the relay's stop pipe");
    }
}

Relay::~Relay() {
    discard_prefetch();
    drop_amqp();
    drop_pg(0);
    drop_pg(1);
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

void Relay::ensure_pg(int slot) {
    std::optional<pg::Conn> &c = pg_[slot];
    if (c && c->ok()) {
        return;
    }
    if (c) {
        log(LogLevel::warn, "PostgreSQL connection lost; reconnecting");
    }
    drop_pg(slot);
    if (cfg_.pg_url.empty()) {
        fail(Errc::invalid_argument, "no PostgreSQL URL configured (pg.url)");
    }
    c.emplace(pg::Conn::open(cfg_.pg_url, cfg_.pg_connect_timeout_s, cfg_.relay_name));
    // The claim is small and frequent: JIT compilation would cost more than it saves. The
    // relay's commits need not wait for the WAL flush: a mark lost in a database crash only
    // means the event is published again (at-least-once), and WAL order loses only a suffix of
    // marks, so per-aggregate order still holds.
    c->exec_simple("SET jit = off; SET synchronous_commit = off");
    if (slot == 0 && cfg_.relay_listen) {
        c->exec_simple("LISTEN \"" + cfg_.notify_channel + "\"");
        listening_ = true;
    }
    pg_up_.store(true, std::memory_order_relaxed);
    if (slot == 0) {
        log(LogLevel::info, "connected to PostgreSQL " + pg::redact_conninfo(cfg_.pg_url) +
                                (listening_ ? " (listening on " + cfg_.notify_channel + ")" : ""));
    }
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

void Relay::drop_pg(int slot) noexcept {
    if (pg_[slot]) {
        pg_[slot].reset();
        if (slot == 0) {
            listening_ = false;
        }
    }
    pg_up_.store(pg_[0].has_value() || pg_[1].has_value(), std::memory_order_relaxed);
}

// Only while no claim or mark runs in the background: it reads and resets both slots.
void Relay::drop_broken_pg() noexcept {
    for (int slot = 0; slot < 2; ++slot) {
        if (pg_[slot] && !pg_[slot]->ok()) {
            drop_pg(slot);
        }
    }
}

void Relay::drop_amqp() noexcept {
    mq_.reset();
}

std::vector<RelayItem> Relay::claim(pg::Conn &db) {
    std::vector<RelayItem> items;
    try {
        // The visits run outside a transaction: an idle relay's poll is then one statement. The
        // claim below re-checks each head under its row lock, so nothing relies on their snapshot.
        // Visit aggregates from the cursor and take the due heads: first as many as a batch
        // holds, widening while too few are due (failed heads in backoff are skipped), and
        // wrapping around once at the end of the index.
        const int batch = cfg_.relay_batch_size;
        const int max_visit = std::max(8 * batch, 64);
        int scan = std::max(batch, 16);
        int visited = 0;
        std::vector<std::string> types;
        std::vector<std::string> ids;
        std::vector<std::string> seqs;
        std::unordered_map<std::string, bool> taken;
        bool wrapped = cursor_type_.empty() && cursor_id_.empty();
        while (true) {
            pg::Result v = db.exec_cached(visit_sql_, {cursor_type_, cursor_id_, std::to_string(scan)});
            int i = 0;
            for (; i < v.rows() && static_cast<int>(types.size()) < batch; ++i) {
                std::string key = std::string(v.get(i, 0)) + '\0' + std::string(v.get(i, 1));
                if (v.get(i, 3) == "t" && taken.emplace(key, true).second) {
                    types.emplace_back(v.get(i, 0));
                    ids.emplace_back(v.get(i, 1));
                    seqs.emplace_back(v.get(i, 2));
                }
            }
            if (static_cast<int>(types.size()) >= batch) {
                cursor_type_ = std::string(v.get(i - 1, 0));
                cursor_id_ = std::string(v.get(i - 1, 1));
                break;
            }
            visited += v.rows();
            if (v.rows() < scan) { // reached the end of the index
                cursor_type_.clear();
                cursor_id_.clear();
                if (wrapped) {
                    break;
                }
                wrapped = true;
                continue;
            }
            cursor_type_ = std::string(v.get(v.rows() - 1, 0));
            cursor_id_ = std::string(v.get(v.rows() - 1, 1));
            if (visited >= max_visit) {
                break; // bounded work per step; the next step goes on from the cursor
            }
            scan = std::min(scan * 4, max_visit - visited);
        }
        if (types.empty()) {
            return items; // nothing due, and no transaction was opened
        }
        db.exec_simple("BEGIN");
        pg::Result r = db.exec_cached(
            claim_sql_, {array_literal(types), array_literal(ids), array_literal(seqs), std::to_string(batch)});
        items.reserve(static_cast<size_t>(r.rows()));
        for (int i = 0; i < r.rows(); ++i) {
            RelayItem it;
            it.row.outbox_id = std::string(r.get(i, 0));
            it.row.event_type = std::string(r.get(i, 1));
            it.row.aggregate_type = std::string(r.get(i, 2));
            it.row.aggregate_id = std::string(r.get(i, 3));
            it.row.seq = r.get_int(i, 4);
            it.row.operation = std::string(r.get(i, 5));
            it.row.payload = std::string(r.get(i, 6));
            it.row.previous_payload = r.get_opt(i, 7);
            it.row.metadata = std::string(r.get(i, 8));
            it.row.user = r.get_opt(i, 9);
            it.row.created_at = std::string(r.get(i, 10));
            it.row.created_epoch_s = r.get_int(i, 11);
            it.retry_count = static_cast<int>(r.get_int(i, 12));
            items.push_back(std::move(it));
        }
    } catch (const Error &e) {
        db.rollback_quietly();
        throw;
    }
    return items;
}

void Relay::discard_prefetch() noexcept {
    if (prefetch_.valid()) {
        try {
            Batch b = prefetch_.get();
            if (pg_[b.slot]) {
                pg_[b.slot]->rollback_quietly(); // release the claimed events at once
            }
        } catch (...) {
        }
    }
    // Marks of confirmed events are let finish: they are true, and spare a republish.
    if (marking_.valid()) {
        try {
            (void)marking_.get();
        } catch (...) {
        }
    }
}

Relay::MarkResult Relay::mark(pg::Conn &db, const MarkArgs &args) {
    const auto t0 = Clock::now();
    MarkResult m;
    try {
        if (!args.empty) {
            pg::Result r = db.exec_cached(mark_sql_, {args.ok_ids, args.bad_ids, args.bad_errors,
                                                      std::to_string(cfg_.relay_max_attempts), args.bad_delays});
            m.published = r.get_int(0, 0);
            m.failed = r.get_int(0, 1);
            m.dead = r.get_int(0, 2);
        }
        db.exec_simple("COMMIT");
    } catch (const Error &) {
        // Not marked: the events stay PENDING and are published again (duplicates, never loss).
        db.rollback_quietly();
        throw;
    }
    m.mark_us = micros_since(t0);
    return m;
}

void Relay::add_marks(RelayStats &st, const MarkResult &m) {
    st.published += m.published;
    st.failed += m.failed;
    st.dead += m.dead;
    st.mark_us += m.mark_us;
}

// Collects the marks committing in the background, if any; a failure drops the broken connection.
void Relay::flush_marks(RelayStats &st) {
    if (!marking_.valid()) {
        return;
    }
    try {
        add_marks(st, marking_.get());
    } catch (const Error &) {
        if (!prefetch_.valid()) {
            drop_broken_pg();
        }
        throw;
    }
}

void Relay::settle(RelayStats &st) {
    if (prefetch_.valid()) {
        Batch b;
        try {
            b = prefetch_.get(); // it waited for the marks it was claimed behind
        } catch (const Error &) {
            drop_broken_pg();
            throw;
        }
        add_marks(st, b.prior);
        if (pg_[b.slot]) {
            pg_[b.slot]->rollback_quietly(); // release the batch claimed ahead: due again
        }
    }
    flush_marks(st);
}

// Stage 1 of a step: the batch claimed in the background during the previous step, or one claimed
// now. When no batch will be claimed behind this one, the previous batch's marks are collected first,
// so that every outcome is committed when the step returns and a claim sees their aggregates' next
// events as heads.
Relay::Batch Relay::take_batch(RelayStats &st) {
    Batch cur;
    bool have = false;
    if (prefetch_.valid()) {
        try {
            cur = prefetch_.get();
        } catch (const Error &) {
            if (marking_.valid()) {
                try {
                    (void)marking_.get();
                } catch (...) {
                }
            }
            drop_broken_pg();
            throw;
        }
        add_marks(st, cur.prior);
        have = !cur.items.empty();
        if (!have) {
            commit_empty(cur.slot);
        }
    }
    const bool overlap = have && static_cast<int>(cur.items.size()) >= cfg_.relay_batch_size && !stopping() &&
                         (!marking_.valid() || marking_slot_ == 1 - cur.slot);
    if (!overlap) {
        flush_marks(st);
    }
    if (!have) {
        cur.slot = 0;
        ensure_pg(0);
        try {
            cur.items = claim(*pg_[0]);
        } catch (const Error &) {
            if (!pg_[0]->ok()) {
                drop_pg(0);
            }
            throw;
        }
    }
    return cur;
}

// Stage 2: a full batch means more work is likely waiting, so the next batch is claimed on the other
// connection while this one is published, and PostgreSQL and RabbitMQ work at the same time. Its
// events stay locked until the next step publishes them (or a stop rolls them back).
void Relay::claim_ahead(const Batch &cur) {
    if (static_cast<int>(cur.items.size()) < cfg_.relay_batch_size || stopping()) {
        return;
    }
    const int other = 1 - cur.slot;
    if (marking_.valid()) {
        // The other connection still commits the previous batch's marks: claim once they are in,
        // so the claim sees those aggregates' next events as heads.
        pg::Conn *next = &*pg_[other];
        prefetch_ = std::async(std::launch::async, [this, next, other, m = std::move(marking_)]() mutable {
            MarkResult prior = m.get();
            return Batch{other, claim(*next), prior};
        });
    } else {
        ensure_pg(other);
        pg::Conn *next = &*pg_[other];
        prefetch_ = std::async(std::launch::async, [this, next, other] { return Batch{other, claim(*next), {}}; });
    }
}

// Stage 3: per-aggregate chains. Rows come heads first (depth 0), then depth 1, ... so the first row
// seen of an aggregate is its head; each item points to the next of its aggregate. A link whose
// predecessor is missing from the batch is held back. Returns the heads: the items ready to send.
std::vector<int> Relay::build_chains(std::vector<RelayItem> &items) {
    std::vector<int> ready;
    std::unordered_map<std::string, int> tail; // aggregate -> last item index in its chain
    for (int i = 0; i < static_cast<int>(items.size()); ++i) {
        const EventRow &row = items[static_cast<size_t>(i)].row;
        std::string key = row.aggregate_type;
        key.push_back('\0');
        key += row.aggregate_id;
        auto it = tail.find(key);
        if (it == tail.end()) {
            tail.emplace(std::move(key), i);
            ready.push_back(i);
        } else if (items[static_cast<size_t>(it->second)].row.seq + 1 == row.seq) {
            items[static_cast<size_t>(it->second)].next = i;
            it->second = i;
        } else {
            items[static_cast<size_t>(i)].outcome = RelayOutcome::held_back;
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
    void settle(int idx, bool acked, const char *why, bool unroutable_is_failure) {
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
                settle(found->second, acked, why, unroutable_is_failure);
                in_flight.erase(found);
            }
            return;
        }
        auto end = in_flight.upper_bound(tag);
        for (auto i = in_flight.begin(); i != end; ++i) {
            settle(i->second, acked, why, unroutable_is_failure);
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

// Stage 5, first half: every outcome of the batch as the one mark statement wants it; failures get
// their backoff and are logged, links never sent count as held back.
Relay::MarkArgs Relay::mark_args(const std::vector<RelayItem> &items, RelayStats &st) {
    std::vector<std::string> ok_ids;
    std::vector<std::string> bad_ids;
    std::vector<std::string> bad_errors;
    std::vector<std::string> bad_delays;
    for (const RelayItem &it : items) {
        switch (it.outcome) {
        case RelayOutcome::published:
            ok_ids.push_back(it.row.outbox_id);
            break;
        case RelayOutcome::failed:
            bad_ids.push_back(it.row.outbox_id);
            bad_errors.push_back(it.error);
            bad_delays.push_back(std::to_string(
                backoff_ms(it.retry_count + 1, cfg_.relay_backoff_base_ms, cfg_.relay_backoff_max_ms, rng_)));
            log(LogLevel::warn, "event " + it.row.outbox_id + " (" + it.row.event_type + " " + it.row.aggregate_type +
                                    ":" + it.row.aggregate_id + ") failed: " + it.error);
            break;
        case RelayOutcome::pending:
        case RelayOutcome::held_back:
            ++st.held_back;
            break;
        case RelayOutcome::in_flight:
            break;
        }
    }
    MarkArgs args;
    args.empty = ok_ids.empty() && bad_ids.empty();
    if (!args.empty) {
        args.ok_ids = array_literal(ok_ids);
        args.bad_ids = array_literal(bad_ids);
        args.bad_errors = array_literal(bad_errors);
        args.bad_delays = array_literal(bad_delays);
    }
    return args;
}

// Stage 5: mark every outcome in one statement and commit. When the next batch is claimed already,
// the marks commit in the background while it is published. Per-aggregate order holds: the next
// batch cannot hold these aggregates (their events were locked when it was claimed), and the claim
// after it waits for them.
void Relay::mark_batch(const Batch &cur, RelayStats &st, bool amqp_failed) {
    MarkArgs args = mark_args(cur.items, st);
    pg::Conn &db = *pg_[cur.slot];
    if (prefetch_.valid() && !amqp_failed && !stopping()) {
        marking_slot_ = cur.slot;
        marking_ = std::async(std::launch::async, [this, conn = &db, a = std::move(args)] { return mark(*conn, a); });
        return;
    }
    try {
        add_marks(st, mark(db, args));
    } catch (const Error &) {
        if (!db.ok()) {
            drop_pg(cur.slot);
        }
        throw;
    }
}

// Ends a step that claimed nothing: its claim transaction, if one was opened, is committed.
void Relay::commit_empty(int slot) {
    try {
        if (pg_[slot]->tx_status() == PQTRANS_INTRANS) {
            pg_[slot]->exec_simple("COMMIT");
        }
    } catch (const Error &) {
        if (!pg_[slot]->ok()) {
            drop_pg(slot);
        }
        throw;
    }
}

RelayStats Relay::step() {
    RelayStats st;
    const auto t0 = Clock::now();
    ensure_amqp();
    Batch cur = take_batch(st);
    claim_ahead(cur);
    st.claimed = static_cast<int64_t>(cur.items.size());
    st.claim_us = micros_since(t0);
    if (cur.items.empty()) {
        commit_empty(cur.slot);
        st.total_us = micros_since(t0);
        return st;
    }
    const auto t1 = Clock::now();
    PublishRound round(cur.items, build_chains(cur.items), st);
    const std::optional<std::string> amqp_error = publish(round);
    st.publish_us = micros_since(t1);
    mark_batch(cur, st, amqp_error.has_value());
    st.total_us = micros_since(t0);
    if (amqp_error) {
        fail(Errc::broker, "RabbitMQ connection lost during a batch (" + std::to_string(st.published) +
                               " confirmed events were marked, the rest stay pending): " + *amqp_error);
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
        if (listening_ && pg_[0] && pg_[0]->ok()) {
            if (pg_[0]->take_notifications() && !blocked_) {
                return;
            }
        }
        pollfd fds[3];
        nfds_t n = 0;
        fds[n++] = {stop_pipe_[0], POLLIN, 0};
        int pg_index = -1;
        if (listening_ && pg_[0] && pg_[0]->ok()) {
            pg_index = static_cast<int>(n);
            fds[n++] = {pg_[0]->socket(), POLLIN, 0};
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
            if (!pg_[0]->consume_input()) {
                log(LogLevel::warn, "PostgreSQL connection lost while idle");
                return; // the next step reconnects
            }
            if (pg_[0]->take_notifications() && !blocked_) {
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
            // A step that claims nothing may still collect the marks of the previous batch.
            if (st.claimed > 0 || st.published > 0 || st.failed > 0) {
                log(LogLevel::info, "batch: claimed " + std::to_string(st.claimed) + ", published " +
                                        std::to_string(st.published) + ", failed " + std::to_string(st.failed) +
                                        ", held back " + std::to_string(st.held_back) + " in " +
                                        std::to_string(st.total_us / 1000) + " ms");
            }
            // A full batch means more is waiting; a blocked broker means wait for unblocked.
            if (st.blocked || blocked_) {
                discard_prefetch(); // no claim held while blocked; idle_wait uses the connections
                idle_wait(cfg_.relay_poll_interval_ms);
            } else if (st.claimed > 0 && st.claimed < cfg_.relay_batch_size) {
                poll_ms = busy_ms;
                last_work = Clock::now();
                idle_wait(poll_ms);
            } else if (st.claimed == 0) {
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
    discard_prefetch(); // claimed but not yet published: back to PENDING, nothing half-done
    log(LogLevel::info, "relay stopped");
}

} // namespace outbox
