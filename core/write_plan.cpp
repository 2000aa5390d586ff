#include "write_plan.hpp"

#include "identifiers.hpp"
#include "pg.hpp"
#include "schema.hpp"

namespace outbox {
namespace {

const char *const kSavepoint = "SAVEPOINT outbox_write";
const char *const kRelease = "RELEASE SAVEPOINT outbox_write";
const char *const kRollbackTo = "ROLLBACK TO SAVEPOINT outbox_write";

Error driver_error(const std::string &sqlstate, const std::string &message, bool closed) {
    return pg::driver_error("outbox write", sqlstate, message, closed);
}

} // namespace

WritePlan::WritePlan(const Config &cfg, Event &ev, DriverTx tx, const std::string &placeholders)
    : cfg_(cfg), ev_(ev), style_(placeholders.empty() ? cfg.placeholders : placeholders) {
    insert_ = store::render_write(cfg, ev_, style_); // validates, names and ids the event
    ev_.written = false;                             // not until the INSERT went through
    if (tx == DriverTx::aborted) {
        finish(Error(Errc::transaction, "the caller's transaction is aborted; roll it back before writing"));
        return;
    }
    idle_ = tx == DriverTx::idle;
    savepoint_ = ev_.idempotency_key.has_value() && !idle_;
    go(savepoint_ ? WriteStep::savepoint : WriteStep::insert);
}

void WritePlan::go(WriteStep step) {
    step_ = step;
    switch (step) {
    case WriteStep::savepoint:
        stmt_ = store::Statement{kSavepoint, {}, {}};
        break;
    case WriteStep::insert: // statement() hands out insert_ itself (no copy on the hot path)
        break;
    case WriteStep::release:
        stmt_ = store::Statement{kRelease, {}, {}};
        break;
    case WriteStep::rollback_to:
        stmt_ = store::Statement{kRollbackTo, {}, {}};
        break;
    case WriteStep::lookup:
        stmt_ = store::with_placeholders(store::Statement{"SELECT outbox_id FROM " +
                                                              ident::qualified(cfg_.schema, cfg_.table + "_keys") +
                                                              " WHERE idempotency_key = $1",
                                                          {*ev_.idempotency_key},
                                                          {}},
                                         style_);
        break;
    case WriteStep::none:
        stmt_ = store::Statement{};
        break;
    }
}

void WritePlan::finish(std::optional<Error> e) {
    error_ = std::move(e);
    if (!error_) {
        ev_.seq = seq_;
        ev_.written = true;
    }
    go(WriteStep::none);
}

void WritePlan::exec_done(const std::vector<std::optional<std::string>> &row) {
    switch (step_) {
    case WriteStep::savepoint:
        go(WriteStep::insert);
        return;
    case WriteStep::insert:
        if (row.empty() || !row[0]) {
            finish(Error(Errc::internal, "outbox write: the INSERT returned no sequence number"));
            return;
        }
        seq_ = std::stoll(*row[0]);
        if (savepoint_) {
            go(WriteStep::release);
        } else {
            finish(std::nullopt);
        }
        return;
    case WriteStep::release:
        if (pending_ && key_reused_) {
            go(WriteStep::lookup); // the savepoint undone, the transaction is usable: whose key?
        } else {
            finish(pending_);
        }
        return;
    case WriteStep::rollback_to:
        go(WriteStep::release);
        return;
    case WriteStep::lookup:
        if (row.empty() || !row[0]) {
            // No event holds the key: the violation was another unique constraint's.
            finish(reuse_or_pending());
            return;
        }
        finish(Error(Errc::duplicate, "idempotency_key is already used by event " + *row[0]));
        return;
    case WriteStep::none:
        fail(Errc::invalid_argument, "the write is done: nothing ran");
    }
}

void WritePlan::exec_failed(const std::string &sqlstate, const std::string &constraint, const std::string &message,
                            bool closed) {
    switch (step_) {
    case WriteStep::insert:
        after_insert_failed(sqlstate, constraint, message, closed);
        return;
    case WriteStep::savepoint:
        if (sqlstate == "25P01") { // no transaction after all (a driver that could not tell): the INSERT alone
            savepoint_ = false;
            idle_ = true;
            go(WriteStep::insert);
            return;
        }
        finish(driver_error(sqlstate, message, closed));
        return;
    case WriteStep::release:
    case WriteStep::rollback_to: // the caller's transaction is theirs to roll back now
        finish(pending_ ? reuse_or_pending() : driver_error(sqlstate, message, closed));
        return;
    case WriteStep::lookup:
        finish(reuse_or_pending());
        return;
    case WriteStep::none:
        fail(Errc::invalid_argument, "the write is done: nothing ran");
    }
}

// The INSERT failed: a unique violation of the key's constraint (or of one the driver does not name,
// when the event has a key) is a reused key, whose owner the lookup names; anything else is the
// driver's error. With a savepoint, it is undone first, so the caller's transaction stays usable.
void WritePlan::after_insert_failed(const std::string &sqlstate, const std::string &constraint,
                                    const std::string &message, bool closed) {
    pending_ = driver_error(sqlstate, message, closed);
    const bool lost = pending_->code() == Errc::connection;
    constraint_named_ = !constraint.empty() && constraint == schema::idempotency_index(cfg_);
    key_reused_ = pending_->code() == Errc::duplicate && ev_.idempotency_key.has_value() &&
                  (constraint.empty() || constraint_named_);
    if (lost) {
        finish(pending_);
    } else if (savepoint_) {
        go(WriteStep::rollback_to);
    } else if (key_reused_ && idle_) {
        go(WriteStep::lookup); // the failed INSERT was its own transaction: the connection is idle
    } else {
        finish(reuse_or_pending());
    }
}

// Without the lookup's answer: a reuse of the key when the driver named its constraint, else the
// driver's own error.
Error WritePlan::reuse_or_pending() const {
    if (key_reused_ && constraint_named_) {
        return Error(Errc::duplicate, "idempotency_key is already used");
    }
    return *pending_;
}

} // namespace outbox
