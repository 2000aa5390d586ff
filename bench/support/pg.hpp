// PostgreSQL through libpq, for the harness's own setup, checks and the seed-style loop: a failed
// statement is an exception (die) naming it.
#pragma once

#include "util.hpp"

#include <libpq-fe.h>

#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

namespace bench {

class PgResult {
  public:
    explicit PgResult(PGresult *r) : r_(r) {}
    ~PgResult() { PQclear(r_); }
    PgResult(const PgResult &) = delete;
    PgResult &operator=(const PgResult &) = delete;
    [[nodiscard]] int rows() const { return PQntuples(r_); }
    [[nodiscard]] std::string get(int row, int col) const { return PQgetvalue(r_, row, col); }
    [[nodiscard]] long long get_ll(int row, int col) const { return std::atoll(PQgetvalue(r_, row, col)); }
    [[nodiscard]] PGresult *raw() const { return r_; }

  private:
    PGresult *r_;
};

class Pg {
  public:
    explicit Pg(const std::string &url) : c_(PQconnectdb(url.c_str())) {
        if (PQstatus(c_) != CONNECTION_OK) {
            std::string msg = PQerrorMessage(c_);
            PQfinish(c_);
            die("PostgreSQL: cannot connect: " + msg);
        }
    }
    ~Pg() { PQfinish(c_); }
    Pg(const Pg &) = delete;
    Pg &operator=(const Pg &) = delete;

    PGconn *raw() { return c_; }

    void exec(const std::string &sql) { check(PQexec(c_, sql.c_str()), sql); }
    std::unique_ptr<PgResult> query(const std::string &sql, const std::vector<std::string> &params = {}) {
        std::vector<const char *> values;
        values.reserve(params.size());
        for (const auto &p : params) {
            values.push_back(p.c_str());
        }
        return check(
            PQexecParams(c_, sql.c_str(), static_cast<int>(values.size()), nullptr, values.data(), nullptr, nullptr, 0),
            sql);
    }
    void prepare(const char *name, const std::string &sql, int nparams) {
        check(PQprepare(c_, name, sql.c_str(), nparams, nullptr), sql);
    }
    std::unique_ptr<PgResult> exec_prepared(const char *name, const std::vector<const char *> &values) {
        return check(PQexecPrepared(c_, name, static_cast<int>(values.size()), values.data(), nullptr, nullptr, 0),
                     name);
    }

    // COPY ... FROM STDIN; `fill` appends text-format rows to its buffer and returns false when done.
    template <class F> void copy_in(const std::string &sql, F &&fill) {
        check(PQexec(c_, sql.c_str()), sql, PGRES_COPY_IN);
        std::string buf;
        bool more = true;
        while (more) {
            buf.clear();
            while (more && buf.size() < (1U << 20)) {
                more = fill(buf);
            }
            if (!buf.empty() && PQputCopyData(c_, buf.data(), static_cast<int>(buf.size())) != 1) {
                die(std::string("COPY: ") + PQerrorMessage(c_));
            }
        }
        if (PQputCopyEnd(c_, nullptr) != 1) {
            die(std::string("COPY end: ") + PQerrorMessage(c_));
        }
        check(PQgetResult(c_), sql);
        while (PGresult *r = PQgetResult(c_)) {
            PQclear(r);
        }
    }

  private:
    std::unique_ptr<PgResult> check(PGresult *r, const std::string &what, ExecStatusType expect = PGRES_COMMAND_OK) {
        auto res = std::make_unique<PgResult>(r);
        ExecStatusType st = PQresultStatus(r);
        if (st != expect && st != PGRES_TUPLES_OK && st != PGRES_COMMAND_OK) {
            die("PostgreSQL: " + std::string(PQerrorMessage(c_)) + " (in: " + what.substr(0, 200) + ")");
        }
        return res;
    }
    PGconn *c_;
};

} // namespace bench
