#include "range_partitions.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>

namespace outbox::ranges {
namespace {

int64_t bound_after(const std::string &expr, const char *word) {
    const size_t at = expr.find(word);
    if (at == std::string::npos) {
        return 0;
    }
    const char *p = expr.c_str() + at + std::strlen(word);
    while (*p == '\'') {
        ++p; // PostgreSQL may print the bound quoted: FROM ('1764028800000')
    }
    return std::strtoll(p, nullptr, 10);
}

} // namespace

std::vector<RangePartition> list(pg::Conn &conn, const std::string &parent) {
    pg::Result r = conn.exec("SELECT c.relname, pg_get_expr(c.relpartbound, c.oid) FROM pg_inherits i"
                             " JOIN pg_class c ON c.oid = i.inhrelid WHERE i.inhparent = CAST($1 AS regclass)",
                             {parent});
    std::vector<RangePartition> out;
    for (int i = 0; i < r.rows(); ++i) {
        const std::string expr = std::string(r.get(i, 1));
        if (expr.find("DEFAULT") != std::string::npos) {
            continue;
        }
        RangePartition p;
        p.name = std::string(r.get(i, 0));
        p.before = expr.find("MINVALUE") != std::string::npos;
        p.from = p.before ? 0 : bound_after(expr, "FROM (");
        p.to = bound_after(expr, "TO (");
        out.push_back(std::move(p));
    }
    std::sort(out.begin(), out.end(), [](const RangePartition &a, const RangePartition &b) {
        return a.before != b.before ? a.before : a.from < b.from;
    });
    return out;
}

int64_t floor_to(int64_t v, int64_t width) {
    return v >= 0 ? v / width * width : -((-v + width - 1) / width) * width;
}

} // namespace outbox::ranges
