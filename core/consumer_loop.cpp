#include "consumer_loop.hpp"

#include "error.hpp"
#include "inbox.hpp"

#include <poll.h>

#include <algorithm>

namespace outbox {
namespace {

using Clock = std::chrono::steady_clock;

inbox::Key key_of(const Consumer &c, const Delivery &d) {
    return inbox::Key{c.name(), d.event_id, d.aggregate_type, d.aggregate_id, d.seq};
}

} // namespace

const char *sql_text(SqlKind kind) {
    switch (kind) {
    case SqlKind::begin:
        return "BEGIN";
    case SqlKind::commit:
        return "COMMIT";
    case SqlKind::rollback:
        return "ROLLBACK";
    default:
        return nullptr;
    }
}

ConsumerLoop::ConsumerLoop(Consumer &consumer, LoopConn conn, pg::Conn *lent, LoopOptions options)
    : c_(consumer), conn_(conn), lent_(lent), opt_(std::move(options)), last_message_(Clock::now()),
      // The first look for due retries comes after the first wait for a message, which connects
      // (and, partitioned, joins and heartbeats) first.
      next_claim_(Clock::now() + std::chrono::milliseconds(consumer.config().consumer_retry_poll_ms)) {
    if (conn_ == LoopConn::library_lent && lent_ == nullptr) {
        fail(Errc::invalid_argument, "a lent connection is needed");
    }
    if (opt_.placeholders.empty()) {
        opt_.placeholders = c_.config().placeholders;
    }
    store::with_placeholders({}, opt_.placeholders); // an unknown style is refused here, not mid-run
    opt_.slice_ms = std::clamp(opt_.slice_ms, 1, 5000);
    if (conn_ == LoopConn::face_owned) {
        need_open_ = true; // the face opens its connection when the loop first asks
        st_ = St::open;
    }
}

// A lost connection is judged as the write plan and the dedupe judge it (pg::driver_error); for
// the loop an error without SQLSTATE (the driver's own, not the server's: a socket closed, a
// protocol error) also means the connection is gone. Anything else is the database's error.
Error ConsumerLoop::classify(const std::string &sqlstate, const std::string &message, bool closed) {
    const bool lost =
        sqlstate.empty() || pg::driver_error("outbox consumer", sqlstate, message, closed).code() == Errc::connection;
    return Error(lost ? Errc::connection : Errc::database,
                 message + (sqlstate.empty() ? "" : " (SQLSTATE " + sqlstate + ")"));
}

pg::Conn *ConsumerLoop::lib_conn() {
    switch (conn_) {
    case LoopConn::library_lent:
        return lent_;
    case LoopConn::library_own:
        return own_ ? &*own_ : nullptr;
    default:
        return nullptr;
    }
}

void ConsumerLoop::go(St st) {
    st_ = st;
    kind_ = SqlKind::none;
}

void ConsumerLoop::exec(SqlKind kind, std::string sql) {
    stmt_ = store::Statement{std::move(sql), {}, {}};
    kind_ = kind;
    switch (kind) {
    case SqlKind::begin:
        st_ = St::begin;
        break;
    case SqlKind::dedupe:
        st_ = St::dedupe;
        break;
    case SqlKind::commit:
        st_ = St::commit;
        break;
    default:
        st_ = St::rollback;
        break;
    }
}

LoopAction ConsumerLoop::action() {
    if ((st_ == St::next || st_ == St::wait || st_ == St::open) && c_.stopping()) {
        end(std::nullopt);
    }
    switch (st_) {
    case St::next:
    case St::settle:
        return LoopAction::block;
    case St::begin:
    case St::dedupe:
    case St::commit:
    case St::rollback:
    case St::sql:
        return face() ? LoopAction::exec : LoopAction::block;
    case St::handle:
        return LoopAction::handle;
    case St::wait:
        return LoopAction::wait;
    case St::open:
        return LoopAction::open;
    case St::done:
        break;
    }
    return LoopAction::done;
}

void ConsumerLoop::block() {
    try {
        switch (st_) {
        case St::next:
            take_next();
            return;
        case St::begin:
            begin_library();
            return;
        case St::commit:
            commit_library();
            return;
        case St::rollback:
            rollback_library();
            return;
        case St::settle:
            settle();
            return;
        case St::sql:
            sql_library();
            return;
        default:
            fail(Errc::invalid_argument, "block() called when the loop's next action is not block");
        }
    } catch (const Error &e) {
        if (e.code() == Errc::invalid_argument && st_ != St::next && st_ != St::settle && st_ != St::sql) {
            throw;
        }
        infra_failure(e);
    } catch (const std::exception &e) {
        infra_failure(Error(Errc::internal, e.what()));
    }
}

void ConsumerLoop::take_next() {
    if (conn_ == LoopConn::library_own && !own_) {
        const Config &cfg = c_.config();
        if (cfg.pg_url.empty()) {
            end(Error(Errc::invalid_argument, "the consumer needs pg.url or a database connection"));
            return;
        }
        own_.emplace(pg::Conn::open(cfg.pg_url, cfg.pg_connect_timeout_s, "outbox-consumer " + c_.name()));
        c_.log(LogLevel::info, "consumer " + c_.name() + " connected to PostgreSQL " + pg::redact_conninfo(cfg.pg_url));
    }
    if (claim_due()) {
        return; // a held aggregate's retry first
    }
    int slice = opt_.slice_ms;
    if (opt_.idle_timeout_ms >= 0) {
        const auto idle = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - last_message_).count();
        slice = static_cast<int>(std::clamp<int64_t>(opt_.idle_timeout_ms - idle, 0, slice));
    }
    std::optional<Delivery> d = c_.next(slice);
    failures_ = 0;
    if (!d) {
        const auto idle = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - last_message_).count();
        if (opt_.idle_timeout_ms >= 0 && idle >= opt_.idle_timeout_ms) {
            end(std::nullopt);
        }
        return;
    }
    last_message_ = Clock::now();
    cur_ = std::move(*d);
    from_held_ = false;
    first_time_ = false;
    outcome_ = Outcome::handled;
    reason_.clear();
    after_.reset();
    if (face()) {
        exec(SqlKind::begin, sql_text(SqlKind::begin));
    } else {
        go(St::begin);
    }
}

// A library connection: BEGIN and the dedupe in one round trip; a duplicate commits here.
void ConsumerLoop::begin_library() {
    pg::Conn &conn = *lib_conn();
    const bool order = c_.config().inbox_order_check;
    try {
        cur_->dedupe = inbox::begin_and_dedupe(conn, c_.config(), key_of(c_, *cur_), order, c_.config().consumer_park);
    } catch (const Error &e) {
        if (conn.tx_status() != PQTRANS_IDLE) {
            conn.rollback_quietly();
        }
        db_lost_ = !conn.ok();
        finish(Outcome::not_processed, e.what(), e);
        return;
    }
    after_dedupe();
}

// COMMIT of a handler's effect. The server refusing it (a deferred constraint, a serialization
// failure) with the connection up is the effect's failure and counts as the handler's; a
// connection lost at COMMIT is not.
void ConsumerLoop::commit_library() {
    pg::Conn &conn = *lib_conn();
    try {
        conn.exec_simple(sql_text(SqlKind::commit));
    } catch (const Error &e) {
        if (conn.tx_status() != PQTRANS_IDLE) {
            conn.rollback_quietly();
        }
        if (conn.ok() && first_time_) {
            finish(Outcome::handler_failed, std::string("COMMIT failed: ") + e.what(), std::nullopt);
            return;
        }
        db_lost_ = !conn.ok();
        finish(Outcome::not_processed, e.what(), e);
        return;
    }
    finish(first_time_ ? Outcome::handled : Outcome::duplicate, "", std::nullopt);
}

void ConsumerLoop::rollback_library() {
    pg::Conn &conn = *lib_conn();
    conn.rollback_quietly(); // never reopens a lost connection
    if (!conn.ok()) {
        lost_in_transaction();
    }
    after_rollback();
}

// The connection went away under the delivery: not the handler's failure, no attempt counted.
void ConsumerLoop::lost_in_transaction() {
    db_lost_ = true;
    if (outcome_ == Outcome::handler_failed) {
        outcome_ = Outcome::not_processed;
        reason_ = "PostgreSQL connection lost in the handler: " + reason_;
    }
    if (!after_) {
        after_ = Error(Errc::connection, reason_);
    }
}

void ConsumerLoop::rollback_then(Outcome outcome, const std::string &reason, std::optional<Error> after) {
    outcome_ = outcome;
    reason_ = reason;
    after_ = std::move(after);
    if (face()) {
        exec(SqlKind::rollback, sql_text(SqlKind::rollback));
    } else {
        go(St::rollback);
    }
}

void ConsumerLoop::finish(Outcome outcome, const std::string &reason, std::optional<Error> after) {
    outcome_ = outcome;
    reason_ = reason;
    after_ = std::move(after);
    go(St::settle);
}

void ConsumerLoop::settle() {
    // A held event's head came from PostgreSQL, not the broker: nothing to settle there. A handler
    // may have settled its message itself: its choice stands.
    if (!from_held_ && !c_.was_settled(*cur_)) {
        c_.settle(*cur_, outcome_, reason_.empty() ? std::string("handler failed") : reason_, nullptr);
    }
    if (outcome_ == Outcome::handled) {
        ++handled_;
    }
    if (from_held_ && outcome_ != Outcome::not_processed) {
        next_claim_ = Clock::now(); // the aggregate's next event (or another due one) at once
    }
    from_held_ = false;
    cur_.reset();
    if (after_) {
        Error e = *after_;
        after_.reset();
        infra_failure(e);
        return;
    }
    if (aborted_ || (opt_.limit > 0 && handled_ >= opt_.limit)) {
        end(std::nullopt);
        return;
    }
    go(St::next);
}

void ConsumerLoop::exec_done(const std::vector<std::optional<std::string>> &row) {
    switch (st_) {
    case St::begin: {
        auto st = inbox::render(c_.config(), key_of(c_, *cur_), c_.config().inbox_order_check,
                                c_.config().consumer_park);
        stmt_ =
            store::with_placeholders(store::Statement{std::move(st.sql), std::move(st.params), {}}, opt_.placeholders);
        kind_ = SqlKind::dedupe;
        st_ = St::dedupe;
        return;
    }
    case St::dedupe: {
        if (row.empty() || !row[0]) {
            exec_failed("", "the dedupe statement returned no row", false);
            return;
        }
        const char *previous = row.size() > 1 && row[1] ? row[1]->c_str() : nullptr;
        const char *held = row.size() > 3 && row[3] ? row[3]->c_str() : nullptr;
        cur_->dedupe =
            inbox::interpret_text(key_of(c_, *cur_), row[0]->c_str(), previous, c_.config().inbox_order_check, held);
        after_dedupe();
        return;
    }
    case St::commit:
        finish(first_time_ ? Outcome::handled : Outcome::duplicate, "", std::nullopt);
        return;
    case St::rollback:
        after_rollback();
        return;
    case St::sql:
        sql_done(row);
        return;
    default:
        fail(Errc::invalid_argument, "exec_done() called when the loop's next action is not exec");
    }
}

void ConsumerLoop::exec_failed(const std::string &sqlstate, const std::string &message, bool closed) {
    Error err = classify(sqlstate, message, closed);
    const bool lost = err.code() == Errc::connection;
    const std::string what = err.what();
    switch (st_) {
    case St::begin:
    case St::dedupe:
        if (lost) {
            db_lost_ = true;
            finish(Outcome::not_processed, what, err);
        } else {
            rollback_then(Outcome::not_processed, what, err);
        }
        return;
    case St::commit:
        if (!lost && first_time_) {
            rollback_then(Outcome::handler_failed, "COMMIT failed: " + what, std::nullopt);
        } else if (lost) {
            db_lost_ = true;
            finish(Outcome::not_processed, what, err);
        } else {
            rollback_then(Outcome::not_processed, what, err);
        }
        return;
    case St::rollback:
        // Not even ROLLBACK goes through: the connection is gone.
        lost_in_transaction();
        go(St::settle);
        return;
    case St::sql:
        sql_failed(err);
        return;
    default:
        fail(Errc::invalid_argument, "exec_failed() called when the loop's next action is not exec");
    }
}

void ConsumerLoop::handler_done(HandlerResult result, const std::string &reason) {
    if (st_ != St::handle) {
        fail(Errc::invalid_argument, "handler_done() called when the loop's next action is not handle");
    }
    failure_ = result == HandlerResult::permanent ? held::Failure::permanent : held::Failure::transient;
    if (result == HandlerResult::ok && from_held_) {
        sql(Ph::release, SqlKind::statement, held::release(c_.config(), c_.name(), held_agg_, cur_->event_id));
        return;
    }
    if (result == HandlerResult::ok) {
        if (face()) {
            exec(SqlKind::commit, sql_text(SqlKind::commit));
        } else {
            go(St::commit);
        }
        return;
    }
    rollback_then(Outcome::handler_failed, reason.empty() ? std::string("handler failed") : reason, std::nullopt);
}

void ConsumerLoop::waited() {
    if (st_ == St::wait) {
        go(need_open_ ? St::open : St::next);
    }
}

void ConsumerLoop::opened(bool ok, const std::string &message) {
    if (st_ != St::open) {
        fail(Errc::invalid_argument, "opened() called when the loop's next action is not open");
    }
    if (ok) {
        need_open_ = false;
        go(St::next);
        return;
    }
    infra_failure(Error(Errc::connection, "cannot connect to PostgreSQL: " + message));
}

void ConsumerLoop::abort(const std::string &reason) {
    aborted_ = true;
    switch (st_) {
    case St::next:
    case St::wait:
    case St::open:
        end(std::nullopt);
        return;
    case St::begin:
    case St::dedupe:
    case St::handle:
    case St::commit:
    case St::sql:
        rollback_then(Outcome::not_processed, reason, std::nullopt);
        return;
    case St::rollback:
        outcome_ = Outcome::not_processed;
        reason_ = reason;
        return;
    case St::settle:
    case St::done:
        return;
    }
}

// Something other than the handler failed (broker, database, a lost connection): the delivery
// in hand was settled already (or goes back with the broker connection); wait, then go on,
// reconnecting what was lost. A connection lent to the loop cannot be reopened here: that ends it.
void ConsumerLoop::infra_failure(const Error &e) {
    cur_.reset();
    if (e.code() == Errc::invalid_argument) {
        end(e);
        return;
    }
    if (lib_conn() != nullptr && !lib_conn()->ok()) {
        db_lost_ = true;
    }
    if (db_lost_) {
        db_lost_ = false;
        switch (conn_) {
        case LoopConn::library_lent:
        case LoopConn::face_lent:
            end(e);
            return;
        case LoopConn::library_own:
            own_.reset();
            break;
        case LoopConn::face_owned:
            need_open_ = true;
            break;
        }
    }
    if (!c_.broker_alive() || (e.code() != Errc::connection && e.code() != Errc::database)) {
        c_.drop(); // next() connects again (the next address first); unacked messages return to the queue
    }
    wait_ms_ = c_.retry_delay_ms(++failures_, std::string(errc_name(e.code())) + ": " + e.what());
    go(St::wait);
}

void ConsumerLoop::end(std::optional<Error> e) {
    error_ = std::move(e);
    cur_.reset();
    go(St::done);
}

void run_blocking(ConsumerLoop &loop, Consumer &consumer, const Consumer::Handler &handler) {
    for (;;) {
        switch (loop.action()) {
        case LoopAction::block:
            loop.block();
            break;
        case LoopAction::handle:
            try {
                handler(*loop.connection(), loop.delivery());
            } catch (const PermanentFailure &e) {
                loop.handler_done(HandlerResult::permanent, e.what());
                break;
            } catch (const std::exception &e) {
                loop.handler_done(HandlerResult::failed, e.what());
                break;
            } catch (...) {
                loop.handler_done(HandlerResult::failed, "handler failed");
                break;
            }
            loop.handler_done(HandlerResult::ok, "");
            break;
        case LoopAction::wait:
            for (int waited = 0; waited < loop.wait_ms() && !consumer.stopping(); waited += 50) {
                poll(nullptr, 0, 50);
            }
            loop.waited();
            break;
        case LoopAction::done:
            if (loop.error()) {
                throw *loop.error();
            }
            return;
        default:
            fail(Errc::internal, "a library connection's loop asked for a face's action");
        }
    }
}

} // namespace outbox
