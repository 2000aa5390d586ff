// outbox_db_query() and its rows: the caller's own statement, run by core (pg::Conn::query).
#include "capi.hpp"

#include <cstdlib>
#include <memory>
#include <optional>

using outbox::capi::guard;

namespace {
// Whether a cell is in the result (false for a NULL handle).
bool in_range(const outbox_rows *rows, size_t row, size_t col) {
    return rows != nullptr && row < static_cast<size_t>(rows->res.rows()) &&
           col < static_cast<size_t>(rows->res.cols());
}
} // namespace

extern "C" {

outbox_status outbox_db_query(outbox_rows **out, outbox_db *db, const char *sql, const char *const *params,
                              size_t nparams) {
    OUTBOX_REQUIRE(out);
    *out = nullptr;
    OUTBOX_REQUIRE(db);
    OUTBOX_REQUIRE(sql);
    if (nparams > 0) {
        OUTBOX_REQUIRE(params);
    }
    return guard([&] {
        outbox::pg::Params values;
        values.reserve(nparams);
        for (size_t i = 0; i < nparams; ++i) {
            values.push_back(params[i] != nullptr ? std::optional<std::string>(params[i]) : std::nullopt);
        }
        auto rows = std::make_unique<outbox_rows>();
        rows->res = db->conn.query(sql, values);
        *out = rows.release();
    });
}

void outbox_rows_free(outbox_rows *rows) {
    delete rows;
}

size_t outbox_rows_count(const outbox_rows *rows) {
    return rows != nullptr ? static_cast<size_t>(rows->res.rows()) : 0;
}

size_t outbox_rows_columns(const outbox_rows *rows) {
    return rows != nullptr ? static_cast<size_t>(rows->res.cols()) : 0;
}

const char *outbox_rows_value(const outbox_rows *rows, size_t row, size_t col, size_t *len) {
    if (len != nullptr) {
        *len = 0;
    }
    if (!in_range(rows, row, col) || rows->res.is_null(static_cast<int>(row), static_cast<int>(col))) {
        return nullptr;
    }
    const std::string_view v = rows->res.get(static_cast<int>(row), static_cast<int>(col));
    if (len != nullptr) {
        *len = v.size();
    }
    return v.data();
}

int64_t outbox_rows_affected(const outbox_rows *rows) {
    const char *n = rows != nullptr ? rows->res.cmd_tuples() : nullptr;
    return n != nullptr && *n != '\0' ? std::strtoll(n, nullptr, 10) : -1;
}

const char *outbox_rows_command(const outbox_rows *rows) {
    return rows != nullptr ? rows->res.cmd_status() : nullptr;
}

int outbox_libpq_version(void) {
    return PQlibVersion();
}

} // extern "C"
