#include "stream.hpp"

#include "error.hpp"
#include "identifiers.hpp"

#include <algorithm>
#include <charconv>

namespace outbox::stream {

Snapshot parse_snapshot(std::string_view text) {
    Snapshot s;
    const auto number = [&text](size_t &at) {
        uint64_t v = 0;
        const char *begin = text.data() + at;
        const char *end = text.data() + text.size();
        auto [p, ec] = std::from_chars(begin, end, v);
        if (ec != std::errc() || p == begin) {
            fail(Errc::internal, "unexpected snapshot text from PostgreSQL: " + std::string(text));
        }
        at = static_cast<size_t>(p - text.data());
        return v;
    };
    size_t at = 0;
    s.xmin = number(at);
    if (at >= text.size() || text[at] != ':') {
        fail(Errc::internal, "unexpected snapshot text from PostgreSQL: " + std::string(text));
    }
    ++at;
    s.xmax = number(at);
    if (at >= text.size() || text[at] != ':') {
        fail(Errc::internal, "unexpected snapshot text from PostgreSQL: " + std::string(text));
    }
    ++at;
    while (at < text.size()) {
        s.max_running = std::max(s.max_running, number(at));
        if (at < text.size() && text[at] == ',') {
            ++at;
        }
    }
    return s;
}

void Progress::load(int64_t cursor, const std::vector<std::pair<int64_t, int64_t>> &done_ranges,
                    const std::vector<int64_t> &parked) {
    cursor_ = cursor;
    frontier_ = cursor;
    gaps_.clear();
    retry_.clear();
    held_.clear();
    done_.clear();
    for (const auto &[first, last] : done_ranges) {
        for (int64_t p = std::max(first, cursor + 1); p <= last; ++p) {
            done_.insert(p);
        }
    }
    for (int64_t p : parked) {
        if (p > cursor) {
            done_.insert(p);
        }
    }
}

Runs Progress::recheck(size_t limit) const {
    Runs out;
    auto g = gaps_.begin();
    auto r = retry_.begin();
    while (out.size() < limit && (g != gaps_.end() || r != retry_.end())) {
        if (r == retry_.end() || (g != gaps_.end() && g->first < *r)) {
            out.emplace_back(g->first, g->second.last);
            ++g;
        } else {
            out.emplace_back(*r, *r);
            ++r;
        }
    }
    return out;
}

size_t Progress::gaps() const {
    size_t n = 0;
    for (const auto &[first, run] : gaps_) {
        n += static_cast<size_t>(run.last - first + 1);
    }
    return n;
}

bool Progress::covers_rechecks(const Runs &rechecked) const {
    size_t n = 0;
    for (const auto &[first, last] : rechecked) {
        auto g = gaps_.find(first);
        n += (g != gaps_.end() && g->second.last == last) || (first == last && retry_.count(first) > 0) ? 1 : 0;
    }
    return n == retry_.size() + gaps_.size();
}

bool Progress::done(int64_t position) const {
    return position <= cursor_ || done_.count(position) > 0;
}

void Progress::add_gaps(int64_t first, int64_t last) {
    // Positions done before a restart are not gaps: the run is cut around them.
    for (auto d = done_.lower_bound(first); first <= last; ++d) {
        const int64_t end = d == done_.end() || *d > last ? last : *d - 1;
        if (first <= end) {
            gaps_[first] = GapRun{end, 0}; // its bound comes with the next record (set_bound)
        }
        if (d == done_.end() || *d > last) {
            break;
        }
        first = *d + 1;
    }
}

// A gap's position was read: its event committed late. The run is split around it.
void Progress::fill_gap(int64_t position) {
    auto g = gaps_.upper_bound(position);
    if (g == gaps_.begin()) {
        return;
    }
    --g;
    const int64_t first = g->first;
    const GapRun run = g->second;
    if (position > run.last) {
        return;
    }
    gaps_.erase(g);
    if (first < position) {
        gaps_[first] = GapRun{position - 1, run.bound};
    }
    if (position < run.last) {
        gaps_[position + 1] = GapRun{run.last, run.bound};
    }
}

// A gap still missing is final once every transaction running at the read that noticed it has
// ended; only what this read examined (up to `examined`) is known to be missing.
void Progress::drop_final_gaps(const Runs &rechecked, uint64_t xmin, int64_t examined) {
    for (const auto &[first, last] : rechecked) {
        for (auto g = gaps_.lower_bound(first); g != gaps_.end() && g->first <= last;) {
            if (g->second.bound == 0 || g->second.bound > xmin || g->first > examined) {
                ++g;
            } else if (g->second.last > examined) {
                const GapRun rest{g->second.last, g->second.bound};
                g = gaps_.erase(g);
                gaps_[examined + 1] = rest;
            } else {
                g = gaps_.erase(g);
            }
        }
    }
}

void Progress::observe(const Runs &rechecked, const std::vector<int64_t> &found_again,
                       const std::vector<int64_t> &fresh, const Snapshot &snap, int64_t examined) {
    for (int64_t p : found_again) {
        fill_gap(p);
        retry_.erase(p);
    }
    drop_final_gaps(rechecked, snap.xmin, examined);
    // A retry was a visible event: missing now (where the read looked), it was deleted (through the
    // outbox view), so there is nothing left to publish and it must not hold the cursor back.
    for (const auto &[first, last] : rechecked) {
        if (first == last && first <= examined && retry_.count(first) > 0 &&
            !std::binary_search(found_again.begin(), found_again.end(), first)) {
            retry_.erase(first);
        }
    }
    int64_t prev = frontier_;
    for (int64_t p : fresh) {
        if (p > prev + 1) {
            add_gaps(prev + 1, p - 1);
        }
        prev = std::max(prev, p);
    }
    frontier_ = prev;
}

void Progress::set_bound(uint64_t xid) {
    for (auto &g : gaps_) {
        if (g.second.bound == 0) {
            g.second.bound = xid;
        }
    }
}

bool Progress::awaiting_bound() const {
    return std::any_of(gaps_.begin(), gaps_.end(), [](const auto &g) { return g.second.bound == 0; });
}

int64_t Progress::advance() {
    int64_t lowest = frontier_ + 1;
    if (!gaps_.empty()) {
        lowest = std::min(lowest, gaps_.begin()->first);
    }
    if (!retry_.empty()) {
        lowest = std::min(lowest, *retry_.begin());
    }
    if (!held_.empty()) {
        lowest = std::min(lowest, *held_.begin());
    }
    cursor_ = std::max(cursor_, lowest - 1);
    done_.erase(done_.begin(), done_.upper_bound(cursor_));
    return cursor_;
}

std::vector<std::pair<int64_t, int64_t>> ranges(const std::vector<int64_t> &positions) {
    std::vector<std::pair<int64_t, int64_t>> out;
    for (int64_t p : positions) {
        if (!out.empty() && out.back().second + 1 == p && p - out.back().first < max_receipt_span) {
            out.back().second = p;
        } else {
            out.emplace_back(p, p);
        }
    }
    return out;
}

namespace {
std::string part(const Config &cfg, const char *suffix) {
    return ident::qualified(cfg.schema, cfg.table + suffix);
}

// The event columns the relay needs, from alias `e`, as read_sql and parked_sql return them.
std::string event_columns() {
    return "e.position, e.outbox_id, e.event_type, e.aggregate_type, e.aggregate_id, e.seq, e.operation, e.payload,"
           " e.previous_payload, e.metadata, e.actor, date_part('epoch', e.created_at)"; // set_created()
}
} // namespace

std::string events_table(const Config &cfg) {
    return part(cfg, "_events");
}
std::string relay_table(const Config &cfg) {
    return part(cfg, "_relay");
}
std::string receipts_table(const Config &cfg) {
    return part(cfg, "_receipts");
}
std::string parked_table(const Config &cfg) {
    return part(cfg, "_parked");
}
std::string keys_table(const Config &cfg) {
    return part(cfg, "_keys");
}
std::string position_sequence(const Config &cfg) {
    return part(cfg, "_position_seq");
}
std::string v1_table(const Config &cfg) {
    return part(cfg, "_v1");
}

std::string read_sql(const Config &cfg) {
    const std::string t = events_table(cfg);
    // pg_current_snapshot() is the statement's own snapshot: the one the rows were read with.
    return "SELECT s.snap, " + event_columns() +
           ", 0 FROM (SELECT CAST(pg_current_snapshot() AS text) AS snap) s"
           // Each run through the position index (LATERAL: a range scan per run, whatever its width).
           " LEFT JOIN LATERAL ((SELECT r.* FROM unnest(CAST($1 AS bigint[]), CAST($4 AS bigint[])) AS g(first, last)"
           " CROSS JOIN LATERAL (SELECT * FROM " +
           t +
           " WHERE position BETWEEN g.first AND g.last ORDER BY position LIMIT CAST($3 AS integer)) r"
           " ORDER BY r.position LIMIT CAST($3 AS integer))"
           " UNION ALL (SELECT * FROM " +
           t + " WHERE position > CAST($2 AS bigint) ORDER BY position LIMIT CAST($3 AS integer))) e ON true";
    // No ORDER BY: each part comes in position order, and the relay puts them in order itself
    // (read_stream); sorting a batch of whole rows was a fifth of the server's cost of a read.
}

std::string parked_sql(const Config &cfg) {
    const std::string p = parked_table(cfg);
    return "SELECT " + event_columns() + ", e.retry_count FROM " + p +
           " e JOIN (SELECT DISTINCT ON (aggregate_type, aggregate_id) aggregate_type, aggregate_id, status,"
           " next_attempt_at FROM " +
           p +
           " ORDER BY aggregate_type, aggregate_id, position) h"
           " ON h.aggregate_type = e.aggregate_type AND h.aggregate_id = e.aggregate_id"
           " WHERE h.status = 'PENDING' AND h.next_attempt_at <= now() ORDER BY e.position LIMIT CAST($1 AS integer)";
}

std::string record_sql(const Config &cfg) {
    const std::string p = parked_table(cfg);
    // $1/$2 receipt ranges; $3..$7 events parked now (position, status, retry_count, error, delay
    // ms); $8 parked events published (removed); $9..$11 and $14 parked events failed again
    // (position, error, delay ms, attempts counted: 0 for a nack); $12 max attempts; $13 the cursor.
    return "WITH r AS (INSERT INTO " + receipts_table(cfg) +
           " (from_position, to_position) SELECT * FROM unnest(CAST($1 AS bigint[]), CAST($2 AS bigint[]))"
           " ON CONFLICT (from_position) DO NOTHING RETURNING to_position - from_position + 1 AS n),"
           " newly AS (INSERT INTO " +
           p +
           " (position, outbox_id, event_type, aggregate_type, aggregate_id, seq, operation, payload,"
           " previous_payload, metadata, actor, created_at, idempotency_key, status, retry_count, error_message,"
           " next_attempt_at) SELECT e.position, e.outbox_id, e.event_type, e.aggregate_type, e.aggregate_id, e.seq,"
           " e.operation, e.payload, e.previous_payload, e.metadata, e.actor, e.created_at, e.idempotency_key,"
           " CASE WHEN f.retries >= CAST($12 AS integer) THEN 'FAILED' ELSE f.status END, f.retries, f.err,"
           " now() + f.delay_ms * interval '1 millisecond' FROM " +
           events_table(cfg) +
           " e JOIN unnest(CAST($3 AS bigint[]), CAST($4 AS text[]), CAST($5 AS integer[]), CAST($6 AS text[]),"
           " CAST($7 AS bigint[])) AS f(position, status, retries, err, delay_ms) ON e.position = f.position"
           " ON CONFLICT (position) DO NOTHING RETURNING status = 'FAILED' AS dead, retry_count > 0 AS failed),"
           " gone AS (DELETE FROM " +
           p +
           " WHERE position = ANY(CAST($8 AS bigint[])) RETURNING 1),"
           " again AS (UPDATE " +
           p +
           " t SET retry_count = t.retry_count + f.inc, error_message = f.err,"
           " next_attempt_at = now() + f.delay_ms * interval '1 millisecond',"
           " status = CASE WHEN t.retry_count + f.inc >= CAST($12 AS integer) THEN 'FAILED' ELSE 'PENDING' END"
           " FROM unnest(CAST($9 AS bigint[]), CAST($10 AS text[]), CAST($11 AS bigint[]), CAST($14 AS integer[]))"
           " AS f(position, err, delay_ms, inc)"
           " WHERE t.position = f.position AND t.status = 'PENDING' RETURNING t.status = 'FAILED' AS dead, f.inc > 0 "
           "AS failed),"
           " c AS (UPDATE " +
           relay_table(cfg) +
           " SET cursor = GREATEST(cursor, CAST($13 AS bigint)), updated_at = now() WHERE name = 'default' RETURNING 1)"
           " SELECT (SELECT COALESCE(sum(n), 0) FROM r),"
           " (SELECT count(*) FROM newly WHERE failed) + (SELECT count(*) FROM again WHERE failed),"
           " (SELECT count(*) FROM newly WHERE dead) + (SELECT count(*) FROM again WHERE dead),"
           " (SELECT count(*) FROM c), CAST(pg_current_xact_id() AS text)";
}

} // namespace outbox::stream
