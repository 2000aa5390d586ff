// A face's driver for the C ABI tests of the library's step machines (outbox_loop_*,
// outbox_write_plan_*): runs a statement the library hands out on a plain libpq PGconn the library
// never sees, and gives back its first row or its error, as a Python, Node or PHP face would.
#pragma once

#include <libpq-fe.h>
#include <outbox.h>

#include <string>
#include <vector>

namespace outbox_test {

struct Outcome {
    bool ok = false;
    std::vector<std::string> values; // the first row's values (ok)
    std::vector<bool> nulls;
    std::string sqlstate, constraint, message; // the error (not ok)
    bool closed = false;

    // The first row as the step machines take it (valid while this Outcome lives).
    std::vector<const char *> row() const {
        std::vector<const char *> out;
        for (size_t i = 0; i < values.size(); ++i) {
            out.push_back(nulls[i] ? nullptr : values[i].c_str());
        }
        return out;
    }
    const char *opt(const std::string &s) const { return s.empty() ? nullptr : s.c_str(); }
};

inline Outcome run_statement(PGconn *conn, const outbox_statement *st) {
    std::vector<const char *> params;
    for (size_t i = 0; i < outbox_statement_param_count(st); ++i) {
        params.push_back(outbox_statement_param(st, i));
    }
    PGresult *r = PQexecParams(conn, outbox_statement_sql(st), static_cast<int>(params.size()), nullptr, params.data(),
                               nullptr, nullptr, 0);
    Outcome o;
    const auto rs = PQresultStatus(r);
    o.ok = rs == PGRES_COMMAND_OK || rs == PGRES_TUPLES_OK;
    if (o.ok && rs == PGRES_TUPLES_OK && PQntuples(r) > 0) {
        for (int j = 0; j < PQnfields(r); ++j) {
            o.nulls.push_back(PQgetisnull(r, 0, j) != 0);
            o.values.emplace_back(PQgetisnull(r, 0, j) ? "" : PQgetvalue(r, 0, j));
        }
    } else if (!o.ok) {
        auto field = [&](int code) {
            const char *v = r != nullptr ? PQresultErrorField(r, code) : nullptr;
            return std::string(v != nullptr ? v : "");
        };
        o.sqlstate = field(PG_DIAG_SQLSTATE);
        o.constraint = field(PG_DIAG_CONSTRAINT_NAME);
        o.message = PQerrorMessage(conn);
        o.closed = PQstatus(conn) != CONNECTION_OK;
    }
    PQclear(r);
    return o;
}

} // namespace outbox_test
