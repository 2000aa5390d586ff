// The write of one event on a driver's own connection, once for every face: which statements run
// (a savepoint around the INSERT when the event has an idempotency key inside a transaction, the
// key's owner looked up after a reuse) and what a driver's error means (SQLSTATE and constraint
// name: a reused key, a lost connection, an aborted transaction, the rest). The face runs each
// statement on its driver and reports back; the library's own connections take store::write.
#pragma once

#include "config.hpp"
#include "error.hpp"
#include "event.hpp"
#include "store.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace outbox {

enum class WriteStep { none = 0, savepoint = 1, insert = 2, release = 3, rollback_to = 4, lookup = 5 };

// The driver's transaction state before the write, as libpq names them.
enum class DriverTx { idle = 0, in_transaction = 2, aborted = 3 };

class WritePlan {
  public:
    // Validates, names and ids the event (throws Error for bad input: nothing runs then).
    WritePlan(const Config &cfg, Event &ev, DriverTx tx, const std::string &placeholders);

    [[nodiscard]] bool done() const { return step_ == WriteStep::none; }
    [[nodiscard]] WriteStep step() const { return step_; }
    [[nodiscard]] const store::Statement &statement() const { return step_ == WriteStep::insert ? insert_ : stmt_; }

    void exec_done(const std::vector<std::optional<std::string>> &row);
    void exec_failed(const std::string &sqlstate, const std::string &constraint, const std::string &message,
                     bool closed);

    // Once done: the error the write ended with (nullopt: written, the event's seq set).
    [[nodiscard]] const std::optional<Error> &error() const { return error_; }

  private:
    void go(WriteStep step);
    void finish(std::optional<Error> e);
    [[nodiscard]] Error reuse_or_pending() const;
    void after_insert_failed(const std::string &sqlstate, const std::string &constraint, const std::string &message,
                             bool closed);

    const Config &cfg_;
    Event &ev_;
    std::string style_;
    bool savepoint_ = false;
    bool idle_ = false;
    WriteStep step_ = WriteStep::none;
    store::Statement stmt_;
    store::Statement insert_;
    bool key_reused_ = false;       // a unique violation that may be the key's: the lookup says whose
    bool constraint_named_ = false; // the driver named the key's constraint
    std::optional<Error> pending_;  // the error to end with once the savepoint is undone
    std::optional<Error> error_;
    int64_t seq_ = 0;
};

} // namespace outbox
