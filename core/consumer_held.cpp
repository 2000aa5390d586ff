// The consumer loop's parking flows (core/held.hpp), with consumer.on_failure=park:
//  - a live delivery whose aggregate is held is kept behind the head, committed, acknowledged;
//  - a live delivery whose handler failed is rolled back, then its aggregate is held with it as the
//    head (a transaction of its own), then the message is acknowledged;
//  - between deliveries, every consumer.retry_poll_ms, a due held aggregate is claimed (locked) and
//    its head goes through the dedupe and the handler in one transaction that also releases it;
//    failing again, it is rolled back and its attempts and error recorded (parked when spent).
// Each statement runs in St::sql: on a face's connection through exec, on a library one in block().
#include "consumer_loop.hpp"

#include "error.hpp"
#include "inbox.hpp"

#include <cstdlib>
#include <limits>

namespace outbox {
namespace {

using Clock = std::chrono::steady_clock;
constexpr const char *nil_uuid = "00000000-0000-0000-0000-000000000000";

store::Statement tx(SqlKind kind) {
    return store::Statement{sql_text(kind), {}, {}};
}

std::string agg_name(const held::Aggregate &a) {
    return a.type.empty() ? "event " + a.id : a.type + ":" + a.id;
}

} // namespace

void ConsumerLoop::sql(Ph ph, SqlKind kind, store::Statement st) {
    ph_ = ph;
    kind_ = kind;
    st_ = St::sql;
    const bool params = kind == SqlKind::statement || kind == SqlKind::dedupe;
    stmt_ = face() && params ? store::with_placeholders(std::move(st), opt_.placeholders) : std::move(st);
}

void ConsumerLoop::sql_library() {
    pg::Conn &conn = *lib_conn();
    std::vector<std::optional<std::string>> row;
    try {
        if (kind_ == SqlKind::statement || kind_ == SqlKind::dedupe) {
            pg::Result r = conn.exec(stmt_.sql, stmt_.params);
            for (int c = 0; r.rows() > 0 && c < r.cols(); ++c) {
                row.push_back(r.get_opt(0, c));
            }
        } else {
            conn.exec_simple(stmt_.sql);
        }
    } catch (const Error &e) {
        sql_failed(conn.ok() ? e : Error(Errc::connection, e.what()));
        return;
    }
    sql_done(row);
}

bool ConsumerLoop::claim_due() {
    const Config &cfg = c_.config();
    if (!cfg.consumer_park || Clock::now() < next_claim_) {
        return false;
    }
    next_claim_ = Clock::now() + std::chrono::milliseconds(cfg.consumer_retry_poll_ms);
    cur_.reset();
    from_held_ = true;
    first_time_ = false;
    outcome_ = Outcome::duplicate;
    reason_.clear();
    after_.reset();
    sql(Ph::claim_begin, SqlKind::begin, tx(SqlKind::begin));
    return true;
}

// The claim's row: the due aggregate and its head (all NULL when none is due).
void ConsumerLoop::claimed(const std::vector<std::optional<std::string>> &row) {
    if (row.size() < 7 || !row[0] || !row[1]) {
        sql(Ph::claim_end, SqlKind::commit, tx(SqlKind::commit));
        return;
    }
    held_agg_ = {*row[0], *row[1]};
    held_state_ = row[2].value_or(held::retrying);
    held_attempts_ = row[3] ? std::strtoll(row[3]->c_str(), nullptr, 10) : 0;
    Delivery d;
    if (!row[4] || !row[5] || !row[6]) { // nothing held any more (all skipped): live again
        d.event_id = nil_uuid;
        cur_ = std::move(d);
        sql(Ph::release, SqlKind::statement, held::release(c_.config(), c_.name(), held_agg_, nil_uuid));
        return;
    }
    const std::string why =
        parse_delivery(held::decode_message(*row[5], *row[6]), std::numeric_limits<size_t>::max(), d);
    if (!why.empty()) { // it was an event when it was held: this is a stored message gone bad
        d.event_id = *row[4];
        cur_ = std::move(d);
        failure_ = held::Failure::permanent;
        rollback_then(Outcome::handler_failed, "the held message is not an event: " + why, std::nullopt);
        return;
    }
    d.delivery_count = held_attempts_;
    cur_ = std::move(d);
    const Config &cfg = c_.config();
    auto st = inbox::render(cfg, {c_.name(), cur_->event_id, cur_->aggregate_type, cur_->aggregate_id, cur_->seq},
                            cfg.inbox_order_check);
    sql(Ph::held_dedupe, SqlKind::dedupe, store::Statement{std::move(st.sql), std::move(st.params), {}});
}

void ConsumerLoop::after_dedupe() {
    first_time_ = cur_->dedupe.first_time;
    if (cur_->dedupe.held) {
        sql(Ph::park, SqlKind::statement, held::park_behind(c_.config(), c_.name(), *cur_));
    } else if (from_held_ && !first_time_) { // processed before it was held: only released
        sql(Ph::release, SqlKind::statement, held::release(c_.config(), c_.name(), held_agg_, cur_->event_id));
    } else if (first_time_) {
        go(St::handle);
    } else if (face()) {
        exec(SqlKind::commit, sql_text(SqlKind::commit));
    } else {
        go(St::commit);
    }
}

// A handler's failure, rolled back: with parking on, it is recorded in PostgreSQL instead of
// going back to the broker (unless the database went away: then it is nobody's attempt).
void ConsumerLoop::after_rollback() {
    if (c_.config().consumer_park && outcome_ == Outcome::handler_failed && !after_ && !db_lost_ && cur_) {
        hold_failure();
        return;
    }
    go(St::settle);
}

void ConsumerLoop::hold_failure() {
    if (from_held_) {
        held_attempts_ += 1;
        held_state_ = held::state_after(c_.config(), failure_, held_attempts_, held_state_ == held::redriving);
        sql(Ph::fail_begin, SqlKind::begin, tx(SqlKind::begin));
    } else {
        sql(Ph::hold_begin, SqlKind::begin, tx(SqlKind::begin));
    }
}

void ConsumerLoop::sql_done(const std::vector<std::optional<std::string>> &row) {
    const Config &cfg = c_.config();
    switch (ph_) {
    case Ph::park:
        sql(Ph::park_commit, SqlKind::commit, tx(SqlKind::commit));
        return;
    case Ph::park_commit:
        c_.log(LogLevel::debug, "consumer " + c_.name() + ": event " + cur_->event_id + " held behind its aggregate " +
                                    agg_name(held::aggregate_of(*cur_)));
        finish(Outcome::held, "", std::nullopt);
        return;
    case Ph::hold_begin:
        sql(Ph::hold, SqlKind::statement, held::hold(cfg, c_.name(), *cur_, failure_, reason_));
        return;
    case Ph::hold:
        held_agg_ = held::aggregate_of(*cur_);
        held_attempts_ = 1;
        held_state_ = !row.empty() && row[0] ? *row[0] : std::string();
        sql(Ph::hold_commit, SqlKind::commit, tx(SqlKind::commit));
        return;
    case Ph::claim_begin:
        sql(Ph::claim, SqlKind::statement, held::claim(cfg, c_.name()));
        return;
    case Ph::claim:
        claimed(row);
        return;
    case Ph::claim_end:
        from_held_ = false;
        go(St::next);
        return;
    case Ph::held_dedupe: {
        const char *previous = row.size() > 1 && row[1] ? row[1]->c_str() : nullptr;
        if (row.empty() || !row[0]) {
            sql_failed(Error(Errc::database, "the dedupe statement returned no row"));
            return;
        }
        cur_->dedupe = inbox::interpret_text({c_.name(), cur_->event_id, cur_->aggregate_type, cur_->aggregate_id,
                                              cur_->seq},
                                             row[0]->c_str(), previous, cfg.inbox_order_check);
        after_dedupe();
        return;
    }
    case Ph::release:
        held_more_ = !row.empty() && row[0] && (*row[0] == "t" || *row[0] == "true" || *row[0] == "1");
        sql(Ph::release_commit, SqlKind::commit, tx(SqlKind::commit));
        return;
    case Ph::fail_begin:
        sql(Ph::failed, SqlKind::statement,
            held::failed(cfg, c_.name(), held_agg_, held_state_.c_str(), held_attempts_,
                         held::backoff_ms(cfg, held_attempts_), reason_));
        return;
    case Ph::failed:
        sql(Ph::failed_commit, SqlKind::commit, tx(SqlKind::commit));
        return;
    case Ph::hold_commit:
    case Ph::failed_commit:
        log_held(held_state_.empty() ? nullptr : held_state_.c_str(), ph_ == Ph::failed_commit);
        finish(Outcome::held, reason_, std::nullopt);
        return;
    case Ph::release_commit:
        // A state change at info (the aggregate is live again); each held event handled at debug.
        c_.log(held_more_ ? LogLevel::debug : LogLevel::info,
               "consumer " + c_.name() + ": event " + cur_->event_id + " of held aggregate " + agg_name(held_agg_) +
                   (first_time_ ? " handled" : " was processed before") +
                   (held_more_ ? "; its next held event is due now" : "; the aggregate is live again"));
        finish(first_time_ ? Outcome::handled : Outcome::duplicate, "", std::nullopt);
        return;
    case Ph::none:
        break;
    }
    fail(Errc::internal, "the consumer loop ran a statement outside its parking flows");
}

// A statement of the parking flows failed: nothing of the flow is kept (rolled back); a live
// delivery goes back to the queue uncounted. A COMMIT refused with the connection up (a deferred
// constraint of the handler's) is the handler's failure, as for a live delivery.
void ConsumerLoop::sql_failed(const Error &err) {
    const bool lost = err.code() == Errc::connection;
    if (ph_ == Ph::release_commit && !lost && first_time_) {
        rollback_then(Outcome::handler_failed, std::string("COMMIT failed: ") + err.what(), std::nullopt);
        return;
    }
    if (lost) {
        db_lost_ = true;
        finish(Outcome::not_processed, err.what(), err);
        return;
    }
    rollback_then(Outcome::not_processed, err.what(), err);
}

void ConsumerLoop::log_held(const char *state, bool head) {
    const std::string who = "consumer " + c_.name() + ": event " + (cur_ ? cur_->event_id : std::string()) + " of " +
                            agg_name(held_agg_);
    if (state == nullptr) {
        c_.log(LogLevel::info, who + " failed and is held behind its aggregate's head (held meanwhile): " + reason_);
    } else if (std::string(state) == held::parked) {
        c_.log(LogLevel::warn, who + " failed " + std::to_string(held_attempts_) + " time(s)" +
                                   (failure_ == held::Failure::permanent ? " (permanent)" : "") +
                                   "; aggregate parked until an operator redrives or skips it: " + reason_);
    } else {
        c_.log(LogLevel::info, who + " failed (attempt " + std::to_string(held_attempts_) + "), retrying in " +
                                   std::to_string(held::backoff_ms(c_.config(), held_attempts_)) + " ms" +
                                   (head ? "" : "; the aggregate's later events wait behind it") + ": " + reason_);
    }
}

} // namespace outbox
