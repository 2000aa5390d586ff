// libpq behind RAII. Errors become outbox::Error with a code chosen from the SQLSTATE, so the
// layers above can tell a duplicate from a broken connection from a missing table.
#pragma once

#include "error.hpp"

#include <libpq-fe.h>

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace outbox::pg {

class Result {
  public:
    Result() = default;
    explicit Result(PGresult *r) : r_(r) {}
    [[nodiscard]] int rows() const { return PQntuples(r_.get()); }
    [[nodiscard]] int cols() const { return PQnfields(r_.get()); }
    [[nodiscard]] bool is_null(int row, int col) const { return PQgetisnull(r_.get(), row, col) != 0; }
    [[nodiscard]] std::string_view get(int row, int col) const {
        return {PQgetvalue(r_.get(), row, col), static_cast<size_t>(PQgetlength(r_.get(), row, col))};
    }
    [[nodiscard]] std::optional<std::string> get_opt(int row, int col) const {
        if (is_null(row, col)) {
            return std::nullopt;
        }
        return std::string(get(row, col));
    }
    [[nodiscard]] long long get_int(int row, int col) const;
    [[nodiscard]] int column(const char *name) const { return PQfnumber(r_.get(), name); }
    [[nodiscard]] const char *cmd_tuples() const { return PQcmdTuples(r_.get()); }
    // The command tag ("SELECT 2", "INSERT 0 1"); "" for an empty query.
    [[nodiscard]] const char *cmd_status() const { return PQcmdStatus(r_.get()); }
    [[nodiscard]] PGresult *raw() const { return r_.get(); }

  private:
    struct Clear {
        void operator()(PGresult *r) const noexcept { PQclear(r); }
    };
    std::unique_ptr<PGresult, Clear> r_;
};

// Text-format parameters; std::nullopt is SQL NULL.
using Params = std::vector<std::optional<std::string>>;

// What a statement sent without waiting (Conn::send_async) waits for on the connection's socket.
enum class Io {
    none,  // nothing: it is finished
    read,  // the socket readable
    write, // part of it is still unsent: the socket writable (or readable: libpq reads what it must)
};

class Conn {
  public:
    // Opens a connection the library owns. Adds connect_timeout/keepalives/application_name
    // defaults that the conninfo can override.
    static Conn open(const std::string &conninfo, int connect_timeout_s = 10,
                     const std::string &application_name = "outbox");
    // Borrows a caller's connection: never closed, committed or rolled back by the library.
    static Conn wrap(PGconn *conn);

    Conn(Conn &&) noexcept;
    Conn &operator=(Conn &&) noexcept;
    Conn(const Conn &) = delete;
    Conn &operator=(const Conn &) = delete;
    ~Conn();

    // Runs one statement with parameters; throws Error on any failure.
    Result exec(const std::string &sql, const Params &params = {});
    // As exec(), but on a connection the library owns the statement is prepared once and reused,
    // which saves parsing and planning a complex statement on every call. A lent connection is
    // the caller's: nothing is left prepared on it (a DISCARD ALL there would break us).
    Result exec_cached(const std::string &sql, const Params &params);
    // Runs the caller's own statement (not one the library wrote) with text parameters; an empty
    // statement is no error. A failure throws Error(connection) when the connection is lost, else
    // Error(database) whatever the SQLSTATE (a unique violation in the caller's SQL is not a reused
    // idempotency key): the server's message as libpq gives it, with its SQLSTATE. A COPY is
    // refused (database) and ended, leaving the connection usable.
    Result query(const std::string &sql, const Params &params);
    // Runs a simple (possibly multi-statement) query without parameters.
    Result exec_simple(const std::string &sql);
    // exec_cached() in two halves on an owned connection: send() sends the statement and returns
    // at once, so the server runs it while the caller does other work; collect() waits for its
    // result (throwing as exec_cached would). Nothing else may use the connection in between.
    void send_cached(const std::string &sql, const Params &params);
    Result collect();
    // exec_cached() for a caller that waits in an event loop of its own: send_async() sends the
    // statement without blocking and says what to wait for on socket(); poll_async(), once that
    // happened, reads what arrived and returns Io::none with the statement's result in `out` when
    // it is there, throwing as exec_cached() would (the connection is then idle again). On an owned
    // connection the statement is prepared first when it is not yet (the first time: a round trip
    // of its own, also without blocking). The connection is in libpq's non-blocking mode in
    // between, and busy: nothing else may use it until poll_async() returned Io::none or threw.
    Io send_async(const std::string &sql, const Params &params);
    Io poll_async(Result &out);
    // BEGIN and then one statement (as exec_cached), sent together in one pipeline: one round
    // trip instead of two. The connection must be idle (Errc::transaction otherwise). On success
    // the transaction is open; on failure it has been rolled back.
    Result begin_and_exec(const std::string &sql, const Params &params);

    [[nodiscard]] PGTransactionStatusType tx_status() const { return PQtransactionStatus(c_); }
    [[nodiscard]] bool ok() const { return c_ != nullptr && PQstatus(c_) == CONNECTION_OK; }
    [[nodiscard]] bool owned() const { return owned_; }
    [[nodiscard]] PGconn *raw() const { return c_; }
    [[nodiscard]] int socket() const { return PQsocket(c_); }
    [[nodiscard]] int backend_pid() const { return PQbackendPID(c_); }

    // Reads what the server sent meanwhile (after poll() saw the socket readable); false when the
    // connection is lost.
    bool consume_input();
    // Whether a statement sent (send_cached) still waits for input: collect() would block.
    [[nodiscard]] bool busy() const { return PQisBusy(c_) != 0; }
    // Whether the server's socket has input waiting now (a poll that does not wait).
    [[nodiscard]] bool readable_now() const;
    // Takes the notifications (LISTEN) libpq has buffered, where poll() cannot see them; true when
    // there was at least one.
    bool take_notifications();

    // Sends ROLLBACK when the connection is up, ignoring its outcome: the clean-up after a failure,
    // which must not throw over the error being handled. Never reopens a lost connection.
    void rollback_quietly() noexcept;

    // Throws Error(connection) when the connection is closed or broken (saying how an owned one is
    // opened again), Error(invalid_argument) when it is busy with another query.
    void check_usable() const;
    // Throws the Error matching a failed result (or a broken connection when r is null).
    [[noreturn]] void raise(PGresult *r, const std::string &context) const;

  private:
    Conn(PGconn *c, bool owned) : c_(c), owned_(owned) {}
    // An owned connection found broken where a statement starts afresh (BEGIN, ROLLBACK,
    // begin_and_exec) is opened again with its own conninfo (PQreset), so a multi-host conninfo
    // with target_session_attrs=read-write reaches the promoted primary. Never elsewhere: what ran
    // in a transaction that was open when the connection went is gone, and must not go on silently
    // outside it.
    void revive_if_lost();
    const std::string &prepare_once(const std::string &sql, int nparams);
    // The name the next statement prepare_once() prepares gets.
    [[nodiscard]] std::string next_statement_name() const;
    // A statement's first result, once the query ended: returned when it succeeded, else raised.
    Result checked(Result first, const char *context) const;
    // send_async()'s: the execution of the prepared statement; what to wait for.
    Io send_prepared_async(const std::string &name, const Params &params);
    Io flush_async();
    // Ends the statement in progress: back to blocking mode as it was.
    void end_async() noexcept;
    // query()'s failures: see there.
    [[noreturn]] void raise_callers(PGresult *r) const;
    [[noreturn]] void refuse_copy(ExecStatusType st);
    PGconn *c_ = nullptr;
    bool owned_ = false;
    std::unordered_map<std::string, std::string> prepared_; // SQL text -> statement name
    // The statement send_async() sent, until poll_async() has its result.
    struct Async {
        bool was_nonblocking = false; // the connection's mode before (a lent connection's is the caller's)
        bool preparing = false;       // the statement is being prepared: executed next
        std::string sql, name;        // while preparing: the statement, its name
        Params params;                // while preparing: its parameters
        Result first;                 // the query's first result, kept until it ends
    };
    std::unique_ptr<Async> async_;
};

// The options of a conninfo (URL or key=value) as libpq parses it: every keyword libpq knows, with
// its value when the conninfo gives one; nullopt when libpq cannot parse it.
using ConninfoOptions = std::vector<std::pair<std::string, std::optional<std::string>>>;
std::optional<ConninfoOptions> parse_conninfo(const std::string &conninfo);

// Errc for an SQLSTATE (e.g. 23505 -> duplicate, 08xxx -> connection, 42P01 -> schema).
Errc errc_for_sqlstate(std::string_view sqlstate);

// A caller's driver failed on a statement the library rendered: the library's error for it. The
// SQLSTATE's status; without one, connection when the driver says its connection is gone, else
// database. "<context>: <message> (SQLSTATE s)", with a hint for an aborted transaction.
Error driver_error(const std::string &context, const std::string &sqlstate, const std::string &message, bool closed);

// A connection string with any password removed, for messages and logs.
std::string redact_conninfo(const std::string &conninfo);

// Runs fn() in a transaction of its own when the connection is idle (committed after, rolled back
// on an exception), or else in the caller's open transaction, which the caller ends.
template <typename Fn> auto in_transaction(Conn &conn, Fn fn) {
    const bool own = conn.tx_status() == PQTRANS_IDLE;
    if (own) {
        conn.exec_simple("BEGIN");
    }
    try {
        auto r = fn();
        if (own) {
            conn.exec_simple("COMMIT");
        }
        return r;
    } catch (...) {
        if (own) {
            conn.rollback_quietly();
        }
        throw;
    }
}

} // namespace outbox::pg
