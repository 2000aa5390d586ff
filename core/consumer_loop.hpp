// The exactly-once consumer loop, once for every face: a step machine. For each delivery it
// begins a transaction, records the event in the inbox, has the handler run (first time only),
// commits, then settles (ack, requeue or dead-letter); it reconnects to the broker, and to the
// database where it may, with backoff. Whoever drives it (Consumer::run, the C API's
// outbox_consumer_run, the Python, asyncio and Node faces) asks action() what to do next, does
// it, and reports back. The loop runs the statements itself on a connection of the library's;
// on a face's own driver connection it hands them out (exec) and the face reports the outcome.
#pragma once

#include "consumer.hpp"
#include "held.hpp"
#include "pg.hpp"
#include "store.hpp"

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace outbox {

// What the driver of a loop does next.
enum class LoopAction {
    block = 1,  // call block() where blocking is fine (a worker thread in async faces)
    exec = 2,   // run statement() on the face's connection, then exec_done() or exec_failed()
    handle = 3, // call the handler with delivery() (and, library connections, connection()), then handler_done()
    wait = 4,   // wait wait_ms() (less when stopped meanwhile), then waited()
    open = 5,   // (face-owned connection) open the database connection anew, then opened()
    done = 6,   // finished: error() says why when it did not end by stop, limit or idle time
};

// Which statement exec hands out, for faces whose driver has its own call for some (commit()).
// statement: another of the loop's (core/held.hpp), its first row reported like the dedupe's.
enum class SqlKind { none = 0, begin = 1, dedupe = 2, commit = 3, rollback = 4, statement = 5 };
// The text of a transaction statement (begin, commit, rollback); nullptr for the others.
const char *sql_text(SqlKind kind);

// Whose database connection the loop's transactions run on.
enum class LoopConn {
    library_own = 0,  // the loop opens one from pg.url (and again after a loss)
    library_lent = 1, // a connection of the library's lent by the caller: never reopened
    face_lent = 2,    // the face's driver connection, lent: a loss ends the loop
    face_owned = 3,   // the face's driver connection, its own: after a loss the face opens it again
};

struct LoopOptions {
    int64_t limit = 0;        // done after this many events were handled (0: no limit)
    int idle_timeout_ms = -1; // done after this long without a message (-1: never)
    std::string placeholders; // face connections: the statements' placeholder style (empty: config's)
    int slice_ms = 200;       // longest blocking wait for a message, so stop and signals are prompt
};

// How a handler ended, as the driver reports it: failed is a transient failure (retried), permanent
// one that can never succeed (its aggregate is parked at once). consumer.on_failure=requeue treats
// both alike.
enum class HandlerResult { ok = 0, failed = 1, permanent = 2 };

class ConsumerLoop {
  public:
    ConsumerLoop(Consumer &consumer, LoopConn conn, pg::Conn *lent, LoopOptions options);
    ConsumerLoop(const ConsumerLoop &) = delete;
    ConsumerLoop &operator=(const ConsumerLoop &) = delete;

    // The next action (stop requests are taken here, between deliveries).
    LoopAction action();

    // block: waits for the next message, runs a library connection's statements, settles.
    void block();

    // exec: the statement (placeholders as configured) and which one it is.
    [[nodiscard]] const store::Statement &statement() const { return stmt_; }
    [[nodiscard]] SqlKind sql_kind() const { return kind_; }
    // The statement ran; `row` is its first row as text (the dedupe statement returns one).
    void exec_done(const std::vector<std::optional<std::string>> &row);
    // It failed. `sqlstate` empty when the driver has none; `closed`: the driver says its
    // connection is gone. The loop decides what that means (connection lost or not).
    void exec_failed(const std::string &sqlstate, const std::string &message, bool closed);

    // handle: the delivery, and a library connection's transaction (nullptr on a face's).
    [[nodiscard]] const Delivery &delivery() const { return *cur_; }
    [[nodiscard]] pg::Conn *connection() { return lib_conn(); }
    void handler_done(HandlerResult result, const std::string &reason);

    // wait
    [[nodiscard]] int wait_ms() const { return wait_ms_; }
    void waited();

    // open
    void opened(bool ok, const std::string &message);

    // The driver gives up (Ctrl-C, a cancelled task): the delivery in hand goes back to the queue
    // uncounted, rolled back first; then done. The driver keeps going until done.
    void abort(const std::string &reason);

    // done: the error the loop ended with (nullopt: stopped, limit reached, idle).
    [[nodiscard]] const std::optional<Error> &error() const { return error_; }
    [[nodiscard]] int64_t handled() const { return handled_; }

    // Whether a driver error means the connection is gone (no SQLSTATE, class 08, shutdown).
    static Error classify(const std::string &sqlstate, const std::string &message, bool closed);

  private:
    enum class St { next, begin, dedupe, handle, commit, rollback, settle, wait, open, done, sql };
    // The steps of the parking flows (core/held.hpp), each a statement run in St::sql.
    enum class Ph { none, park, park_commit, hold_begin, hold, hold_commit, claim_begin, claim, claim_end,
                    held_dedupe, release, release_commit, fail_begin, failed, failed_commit };

    [[nodiscard]] bool face() const { return conn_ == LoopConn::face_lent || conn_ == LoopConn::face_owned; }
    pg::Conn *lib_conn();
    void go(St st);
    void take_next();
    void begin_library();
    void commit_library();
    void rollback_library();
    void settle();
    void finish(Outcome outcome, const std::string &reason, std::optional<Error> after);
    void rollback_then(Outcome outcome, const std::string &reason, std::optional<Error> after);
    void lost_in_transaction();
    void infra_failure(const Error &e);
    void end(std::optional<Error> e);
    void exec(SqlKind kind, std::string sql);
    // The parking flows (consumer_held.cpp).
    void sql(Ph ph, SqlKind kind, store::Statement st);
    void sql_library();
    void sql_done(const std::vector<std::optional<std::string>> &row);
    void sql_failed(const Error &err);
    void after_dedupe();
    void after_rollback();
    bool claim_due();
    void claimed(const std::vector<std::optional<std::string>> &row);
    void hold_failure();
    void log_held(const char *state, bool head);

    Consumer &c_;
    LoopConn conn_;
    pg::Conn *lent_;
    std::optional<pg::Conn> own_;
    LoopOptions opt_;
    St st_ = St::next;
    std::optional<Delivery> cur_;
    store::Statement stmt_;
    SqlKind kind_ = SqlKind::none;
    bool first_time_ = false;
    Ph ph_ = Ph::none;
    bool from_held_ = false; // the delivery in hand is a held aggregate's head (a retry or redrive)
    held::Failure failure_ = held::Failure::transient;
    held::Aggregate held_agg_;
    std::string held_state_;
    int64_t held_attempts_ = 0;
    bool held_more_ = false; // the release left more events of the aggregate held
    Outcome outcome_ = Outcome::handled;
    std::string reason_;
    std::optional<Error> after_; // what to do once the delivery in hand is settled
    bool aborted_ = false;
    bool need_open_ = false;
    bool db_lost_ = false; // the database connection was found lost under the delivery in hand
    int failures_ = 0;
    int wait_ms_ = 0;
    int64_t handled_ = 0;
    std::chrono::steady_clock::time_point last_message_;
    std::chrono::steady_clock::time_point next_claim_; // when the loop next looks for due held aggregates
    std::optional<Error> error_;
};

// Drives a loop on a library connection to the end, calling `handler` for each delivery:
// Consumer::run and outbox_consumer_run. Waits sleep in short slices so stop() is prompt.
// Throws the error the loop ended with.
void run_blocking(ConsumerLoop &loop, Consumer &consumer, const Consumer::Handler &handler);

} // namespace outbox
