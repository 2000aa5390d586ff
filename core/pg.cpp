#include "pg.hpp"

#include <poll.h>

#include "redact.hpp"

#include <cctype>
#include <cstdlib>
#include <cstring>

namespace outbox::pg {

long long Result::get_int(int row, int col) const {
    if (is_null(row, col)) {
        fail(Errc::internal, "unexpected NULL in an integer column");
    }
    return std::strtoll(PQgetvalue(r_.get(), row, col), nullptr, 10);
}

Errc errc_for_sqlstate(std::string_view s) {
    if (s.size() != 5) {
        return Errc::database;
    }
    if (s == "23505") {
        return Errc::duplicate;
    }
    if (s.substr(0, 2) == "08" || s == "57P01" || s == "57P02" || s == "57P03") {
        return Errc::connection; // connection exceptions and admin shutdown / terminate
    }
    if (s == "42P01" || s == "3F000" || s == "42703") {
        return Errc::schema; // undefined table / schema / column: not migrated
    }
    if (s == "25P02" || s == "25P01" || s == "25001" || s == "25006") {
        return Errc::transaction; // aborted transaction, no transaction, read-only
    }
    if (s == "57014") {
        return Errc::timeout; // statement timeout / canceled
    }
    if (s == "53100" || s == "53200") {
        return Errc::no_memory;
    }
    return Errc::database;
}

Error driver_error(const std::string &context, const std::string &sqlstate, const std::string &message, bool closed) {
    Errc code = Errc::database;
    if (!sqlstate.empty()) {
        code = errc_for_sqlstate(sqlstate);
    } else if (closed) {
        code = Errc::connection;
    }
    const std::string hint = sqlstate == "25P02" ? "; the caller's transaction is aborted: roll it back first" : "";
    return Error(code, context + ": " + message + (sqlstate.empty() ? "" : " (SQLSTATE " + sqlstate + ")") + hint,
                 sqlstate);
}

Conn Conn::open(const std::string &conninfo, int connect_timeout_s, const std::string &application_name) {
    // Refused before libpq sees them: a longer string is no connection string, and a NUL would
    // silently cut it short.
    if (conninfo.size() > 64 * 1024) {
        fail(Errc::invalid_argument,
             "PostgreSQL connection string is " + std::to_string(conninfo.size()) + " bytes, over the limit of 65536");
    }
    if (conninfo.find('\0') != std::string::npos) {
        fail(Errc::invalid_argument, "PostgreSQL connection string contains a NUL byte");
    }
    std::string timeout = std::to_string(connect_timeout_s);
    // Defaults first: the expanded conninfo (dbname slot) overrides any of them.
    const char *keys[] = {"connect_timeout",     "application_name", "keepalives", "keepalives_idle",
                          "keepalives_interval", "keepalives_count", "dbname",     nullptr};
    const char *vals[] = {timeout.c_str(), application_name.c_str(), "1", "30", "10", "3", conninfo.c_str(), nullptr};
    PGconn *c = PQconnectdbParams(keys, vals, 1);
    if (c == nullptr) {
        throw std::bad_alloc();
    }
    if (PQstatus(c) != CONNECTION_OK) {
        std::string msg = PQerrorMessage(c);
        PQfinish(c);
        while (!msg.empty() && (msg.back() == '\n' || msg.back() == ' ')) {
            msg.pop_back();
        }
        fail(Errc::connection,
             "cannot connect to PostgreSQL (" + redact_conninfo(conninfo) + "): " + redact::pg_message(conninfo, msg));
    }
    // A library must not write the server's NOTICEs to the application's stderr.
    PQsetNoticeProcessor(
        c, [](void *, const char *) {}, nullptr);
    return Conn(c, true);
}

Conn Conn::wrap(PGconn *conn) {
    if (conn == nullptr) {
        fail(Errc::invalid_argument, "connection is NULL");
    }
    return Conn(conn, false);
}

Conn::Conn(Conn &&o) noexcept
    : c_(o.c_), owned_(o.owned_), prepared_(std::move(o.prepared_)), async_(std::move(o.async_)) {
    o.c_ = nullptr;
}

Conn &Conn::operator=(Conn &&o) noexcept {
    if (this != &o) {
        if (owned_ && c_ != nullptr) {
            PQfinish(c_);
        }
        c_ = o.c_;
        owned_ = o.owned_;
        prepared_ = std::move(o.prepared_);
        async_ = std::move(o.async_);
        o.c_ = nullptr;
    }
    return *this;
}

Conn::~Conn() {
    if (!owned_) {
        end_async(); // a lent connection goes back to its owner in the mode it came in
    }
    if (owned_ && c_ != nullptr) {
        PQfinish(c_);
    }
}

namespace {

// Whether a simple query starts a transaction or ends one by rolling back: where a lost
// connection may be opened again.
bool starts_afresh(const std::string &sql) {
    size_t i = 0;
    while (i < sql.size() && std::isspace(static_cast<unsigned char>(sql[i])) != 0) {
        ++i;
    }
    for (const char *word : {"BEGIN", "START TRANSACTION", "ROLLBACK", "ABORT"}) {
        const size_t n = std::strlen(word);
        if (sql.size() - i < n) {
            continue;
        }
        bool same = true;
        for (size_t k = 0; k < n && same; ++k) {
            same = std::toupper(static_cast<unsigned char>(sql[i + k])) == word[k];
        }
        const char next = i + n < sql.size() ? sql[i + n] : ';';
        if (same && (next == ';' || std::isspace(static_cast<unsigned char>(next)) != 0)) {
            return true;
        }
    }
    return false;
}

} // namespace

void Conn::revive_if_lost() {
    if (!owned_ || c_ == nullptr || PQstatus(c_) == CONNECTION_OK) {
        return;
    }
    prepared_.clear(); // prepared statements died with the session
    end_async();
    PQreset(c_);
    if (PQstatus(c_) != CONNECTION_OK) {
        std::string msg = PQerrorMessage(c_);
        while (!msg.empty() && (msg.back() == '\n' || msg.back() == ' ')) {
            msg.pop_back();
        }
        fail(Errc::connection, "PostgreSQL connection lost, and opening it again failed: " + msg);
    }
}

void Conn::rollback_quietly() noexcept {
    if (ok() && PQtransactionStatus(c_) != PQTRANS_IDLE) {
        PQclear(PQexec(c_, "ROLLBACK"));
    }
}

void Conn::check_usable() const {
    if (c_ == nullptr) {
        fail(Errc::connection, "no PostgreSQL connection");
    }
    if (PQstatus(c_) != CONNECTION_OK) {
        fail(Errc::connection, owned_ ? "PostgreSQL connection is closed or broken (a transaction open on it did not "
                                        "commit through it; BEGIN or ROLLBACK on this handle opens it again)"
                                      : "PostgreSQL connection is closed or broken");
    }
    if (PQisBusy(c_) != 0 || PQpipelineStatus(c_) != PQ_PIPELINE_OFF) {
        fail(Errc::invalid_argument, "PostgreSQL connection is busy with another query");
    }
}

void Conn::raise(PGresult *r, const std::string &context) const {
    if (r == nullptr || PQstatus(c_) != CONNECTION_OK) {
        std::string msg = c_ != nullptr ? PQerrorMessage(c_) : "no connection";
        while (!msg.empty() && (msg.back() == '\n' || msg.back() == ' ')) {
            msg.pop_back();
        }
        fail(Errc::connection, context + ": PostgreSQL connection lost: " + msg);
    }
    const char *state = PQresultErrorField(r, PG_DIAG_SQLSTATE);
    std::string msg = PQresultErrorField(r, PG_DIAG_MESSAGE_PRIMARY) != nullptr
                          ? PQresultErrorField(r, PG_DIAG_MESSAGE_PRIMARY)
                          : PQresultErrorMessage(r);
    std::string code = state != nullptr ? state : "";
    // A missing table or schema is almost always a database that was never migrated: say how.
    const std::string hint = code == "42P01" || code == "3F000"
                                 ? "; are the tables created? run `outbox migrate` (or outbox_migrate())"
                                 : "";
    throw Error(errc_for_sqlstate(code), context + ": " + msg + (code.empty() ? "" : " (SQLSTATE " + code + ")") + hint,
                code);
}

namespace {
// The parameters as libpq takes them: NUL-terminated texts, NULL for SQL NULL.
std::vector<const char *> param_values(const Params &params) {
    std::vector<const char *> values;
    values.reserve(params.size());
    for (const auto &p : params) {
        values.push_back(p ? p->c_str() : nullptr);
    }
    return values;
}
} // namespace

Result Conn::exec(const std::string &sql, const Params &params) {
    check_usable();
    const std::vector<const char *> values = param_values(params);
    PGresult *r =
        PQexecParams(c_, sql.c_str(), static_cast<int>(values.size()), nullptr, values.data(), nullptr, nullptr, 0);
    ExecStatusType st = r != nullptr ? PQresultStatus(r) : PGRES_FATAL_ERROR;
    if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK) {
        Result holder(r);
        raise(r, "query failed");
    }
    return Result(r);
}

Result Conn::query(const std::string &sql, const Params &params) {
    check_usable();
    if (params.size() > 65535) {
        fail(Errc::invalid_argument, std::to_string(params.size()) + " parameters, over PostgreSQL's limit of 65535");
    }
    const std::vector<const char *> values = param_values(params);
    Result res(
        PQexecParams(c_, sql.c_str(), static_cast<int>(values.size()), nullptr, values.data(), nullptr, nullptr, 0));
    const ExecStatusType st = res.raw() != nullptr ? PQresultStatus(res.raw()) : PGRES_FATAL_ERROR;
    if (st == PGRES_COPY_IN || st == PGRES_COPY_OUT) {
        refuse_copy(st);
    }
    if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK && st != PGRES_EMPTY_QUERY) {
        raise_callers(res.raw());
    }
    return res;
}

void Conn::raise_callers(PGresult *r) const {
    std::string msg = r != nullptr ? PQresultErrorMessage(r) : PQerrorMessage(c_);
    while (!msg.empty() && (msg.back() == '\n' || msg.back() == ' ')) {
        msg.pop_back();
    }
    const char *state = r != nullptr ? PQresultErrorField(r, PG_DIAG_SQLSTATE) : nullptr;
    const Errc code = PQstatus(c_) != CONNECTION_OK ? Errc::connection : Errc::database;
    throw Error(code, msg.empty() ? "query failed" : msg, state != nullptr ? state : "");
}

void Conn::refuse_copy(ExecStatusType st) {
    if (st == PGRES_COPY_IN) {
        PQputCopyEnd(c_, "COPY FROM STDIN is not supported here");
    } else {
        char *buf = nullptr;
        while (PQgetCopyData(c_, &buf, 0) > 0) {
            PQfreemem(buf);
        }
    }
    while (PGresult *more = PQgetResult(c_)) {
        PQclear(more);
    }
    if (PQstatus(c_) != CONNECTION_OK) {
        raise_callers(nullptr);
    }
    fail(Errc::database, "COPY is not supported for a statement of the caller's; use libpq on the PGconn");
}

const std::string &Conn::prepare_once(const std::string &sql, int nparams) {
    auto it = prepared_.find(sql);
    if (it == prepared_.end()) {
        std::string name = next_statement_name();
        PGresult *r = PQprepare(c_, name.c_str(), sql.c_str(), nparams, nullptr);
        if (r == nullptr || PQresultStatus(r) != PGRES_COMMAND_OK) {
            Result holder(r);
            raise(r, "prepare failed");
        }
        PQclear(r);
        it = prepared_.emplace(sql, std::move(name)).first;
    }
    return it->second;
}

std::string Conn::next_statement_name() const {
    return "outbox_stmt_" + std::to_string(prepared_.size() + 1);
}

Result Conn::begin_and_exec(const std::string &sql, const Params &params) {
    revive_if_lost();
    check_usable();
    if (PQtransactionStatus(c_) != PQTRANS_IDLE) {
        fail(Errc::transaction, "a transaction is already open on this connection; commit or roll it back first");
    }
    const std::string *name = owned_ ? &prepare_once(sql, static_cast<int>(params.size())) : nullptr;
    const std::vector<const char *> values = param_values(params);
    const int n = static_cast<int>(values.size());
    if (PQenterPipelineMode(c_) != 1) {
        raise(nullptr, "cannot enter pipeline mode");
    }
    bool sent = PQsendQueryParams(c_, "BEGIN", 0, nullptr, nullptr, nullptr, nullptr, 0) == 1;
    sent = sent &&
           (name != nullptr ? PQsendQueryPrepared(c_, name->c_str(), n, values.data(), nullptr, nullptr, 0)
                            : PQsendQueryParams(c_, sql.c_str(), n, nullptr, values.data(), nullptr, nullptr, 0)) == 1;
    sent = sent && PQpipelineSync(c_) == 1;
    // Read both statements' results up to the sync, even after an error, to leave the
    // connection in a known state. The first failure is the one reported.
    Result failure;
    Result out;
    bool failed = !sent;
    int done = 0; // statements whose results ended (a NULL from PQgetResult)
    while (sent) {
        PGresult *r = PQgetResult(c_);
        if (r == nullptr) {
            if (++done > 2 || PQstatus(c_) != CONNECTION_OK) {
                break;
            }
            continue;
        }
        const ExecStatusType st = PQresultStatus(r);
        if (st == PGRES_PIPELINE_SYNC) {
            PQclear(r);
            break;
        }
        if (st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK) {
            if (done == 1) {
                out = Result(r);
            } else {
                PQclear(r);
            }
        } else if (!failed) {
            failed = true;
            failure = Result(r);
        } else {
            PQclear(r);
        }
    }
    PQexitPipelineMode(c_);
    if (failed || out.raw() == nullptr) {
        if (PQstatus(c_) == CONNECTION_OK && PQtransactionStatus(c_) != PQTRANS_IDLE) {
            PQclear(PQexec(c_, "ROLLBACK"));
        }
        raise(failure.raw(), "query failed");
    }
    return out;
}

Result Conn::exec_cached(const std::string &sql, const Params &params) {
    if (!owned_) {
        return exec(sql, params);
    }
    check_usable();
    const std::string &name = prepare_once(sql, static_cast<int>(params.size()));
    const std::vector<const char *> values = param_values(params);
    PGresult *r = PQexecPrepared(c_, name.c_str(), static_cast<int>(values.size()), values.data(), nullptr, nullptr, 0);
    ExecStatusType st = r != nullptr ? PQresultStatus(r) : PGRES_FATAL_ERROR;
    if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK) {
        Result holder(r);
        raise(r, "query failed");
    }
    return Result(r);
}

void Conn::send_cached(const std::string &sql, const Params &params) {
    if (!owned_) {
        fail(Errc::internal, "send_cached needs a connection the library owns");
    }
    check_usable();
    const std::string &name = prepare_once(sql, static_cast<int>(params.size()));
    const std::vector<const char *> values = param_values(params);
    if (PQsendQueryPrepared(c_, name.c_str(), static_cast<int>(values.size()), values.data(), nullptr, nullptr, 0) !=
        1) {
        raise(nullptr, "sending a query failed");
    }
}

Result Conn::collect() {
    Result first(PQgetResult(c_));
    // The rest (none for one statement) up to the end of the query, so the connection is idle.
    while (PGresult *more = PQgetResult(c_)) {
        PQclear(more);
    }
    return checked(std::move(first), "query failed");
}

Result Conn::checked(Result first, const char *context) const {
    const ExecStatusType st = first.raw() != nullptr ? PQresultStatus(first.raw()) : PGRES_FATAL_ERROR;
    if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK) {
        raise(first.raw(), context);
    }
    return first;
}

Io Conn::send_async(const std::string &sql, const Params &params) {
    check_usable();
    const int n = static_cast<int>(params.size());
    auto a = std::make_unique<Async>();
    a->was_nonblocking = PQisnonblocking(c_) != 0;
    if (!a->was_nonblocking && PQsetnonblocking(c_, 1) != 0) {
        raise(nullptr, "sending a query failed");
    }
    async_ = std::move(a);
    try {
        if (!owned_) { // nothing is left prepared on a lent connection (exec_cached)
            const std::vector<const char *> values = param_values(params);
            if (PQsendQueryParams(c_, sql.c_str(), n, nullptr, values.data(), nullptr, nullptr, 0) != 1) {
                raise(nullptr, "sending a query failed");
            }
            return flush_async();
        }
        auto it = prepared_.find(sql);
        if (it != prepared_.end()) {
            return send_prepared_async(it->second, params);
        }
        // Prepared first (prepare_once's name, recorded once it succeeded), executed when that is done.
        async_->preparing = true;
        async_->sql = sql;
        async_->name = next_statement_name();
        async_->params = params;
        if (PQsendPrepare(c_, async_->name.c_str(), sql.c_str(), n, nullptr) != 1) {
            raise(nullptr, "prepare failed");
        }
        return flush_async();
    } catch (...) {
        end_async();
        throw;
    }
}

Io Conn::send_prepared_async(const std::string &name, const Params &params) {
    const std::vector<const char *> values = param_values(params);
    if (PQsendQueryPrepared(c_, name.c_str(), static_cast<int>(values.size()), values.data(), nullptr, nullptr, 0) !=
        1) {
        raise(nullptr, "sending a query failed");
    }
    return flush_async();
}

Io Conn::flush_async() {
    const int r = PQflush(c_);
    if (r < 0) {
        raise(nullptr, "sending a query failed");
    }
    return r > 0 ? Io::write : Io::read;
}

Io Conn::poll_async(Result &out) {
    if (!async_) {
        fail(Errc::invalid_argument, "no statement is in progress on this connection");
    }
    try {
        if (flush_async() == Io::write) {
            return Io::write; // PQflush read what the server sent meanwhile
        }
        if (PQconsumeInput(c_) != 1) {
            raise(nullptr, async_->preparing ? "prepare failed" : "query failed");
        }
        while (PQisBusy(c_) == 0) {
            if (PGresult *r = PQgetResult(c_)) {
                if (async_->first.raw() == nullptr) {
                    async_->first = Result(r);
                } else {
                    PQclear(r); // the rest (none for one statement) up to the end of the query
                }
                continue;
            }
            // The query ended: the connection is idle.
            if (!async_->preparing) {
                Result first = std::move(async_->first);
                end_async();
                out = checked(std::move(first), "query failed");
                return Io::none;
            }
            checked(std::move(async_->first), "prepare failed");
            async_->first = Result();
            async_->preparing = false;
            const std::string &name = prepared_.emplace(std::move(async_->sql), std::move(async_->name)).first->second;
            const Params params = std::move(async_->params);
            if (send_prepared_async(name, params) == Io::write) {
                return Io::write;
            }
        }
        return Io::read;
    } catch (...) {
        end_async();
        throw;
    }
}

void Conn::end_async() noexcept {
    if (!async_) {
        return;
    }
    if (c_ != nullptr && !async_->was_nonblocking) {
        PQsetnonblocking(c_, 0);
    }
    async_.reset();
}

Result Conn::exec_simple(const std::string &sql) {
    if (starts_afresh(sql)) {
        revive_if_lost();
    }
    check_usable();
    PGresult *r = PQexec(c_, sql.c_str());
    ExecStatusType st = r != nullptr ? PQresultStatus(r) : PGRES_FATAL_ERROR;
    if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK && st != PGRES_EMPTY_QUERY) {
        Result holder(r);
        raise(r, "query failed");
    }
    return Result(r);
}

bool Conn::consume_input() {
    return PQconsumeInput(c_) != 0;
}

bool Conn::readable_now() const {
    pollfd pfd{PQsocket(c_), POLLIN, 0};
    return ::poll(&pfd, 1, 0) > 0 && (pfd.revents & (POLLIN | POLLERR | POLLHUP)) != 0;
}

bool Conn::take_notifications() {
    bool any = false;
    while (PGnotify *n = PQnotifies(c_)) {
        any = true;
        PQfreemem(n);
    }
    return any;
}

std::optional<ConninfoOptions> parse_conninfo(const std::string &conninfo) {
    char *err = nullptr;
    PQconninfoOption *opts = PQconninfoParse(conninfo.c_str(), &err);
    PQfreemem(err);
    if (opts == nullptr) {
        return std::nullopt;
    }
    ConninfoOptions out;
    for (const PQconninfoOption *o = opts; o->keyword != nullptr; ++o) {
        out.emplace_back(o->keyword, o->val != nullptr ? std::optional<std::string>(o->val) : std::nullopt);
    }
    PQconninfoFree(opts);
    return out;
}

} // namespace outbox::pg
