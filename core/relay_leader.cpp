// The leadership lock: one relay per table is active (a session advisory lock); the one that takes
// it loads the progress the previous holder left (cursor, receipts, parked events).
#include "relay.hpp"

#include "error.hpp"
#include "stream.hpp"

#include <string>
#include <utility>
#include <vector>

namespace outbox {

// Takes the table's relay lock when this relay does not hold it yet, and then loads what the
// previous holder left: the cursor, what is done above it, and the aggregates with parked events.
// Returns false while another relay holds the lock (this one stands by).
bool Relay::ensure_active() {
    pg::Conn &db = *pg_;
    if (active_) {
        return true;
    }
    if (db.exec(stream::lock_sql, {cfg_.outbox_qualified()}).get(0, 0) != "t") {
        if (!standby_logged_) {
            log(LogLevel::info, "another relay is active on " + cfg_.outbox_qualified() + "; standing by");
            standby_logged_ = true;
        }
        return false;
    }
    pg::Result c = db.exec("SELECT cursor FROM " + stream::relay_table(cfg_) + " WHERE name = 'default'");
    if (c.rows() == 0) {
        fail(Errc::schema, "the outbox relay table has no cursor row; run outbox migrate");
    }
    const int64_t cursor = c.get_int(0, 0);
    pg::Result r = db.exec("SELECT from_position, to_position FROM " + stream::receipts_table(cfg_) +
                               " WHERE to_position > CAST($1 AS bigint) AND from_position > CAST($1 AS bigint) - " +
                               std::to_string(max_receipt_span) + " ORDER BY from_position",
                           {std::to_string(cursor)});
    std::vector<std::pair<int64_t, int64_t>> done;
    for (int i = 0; i < r.rows(); ++i) {
        done.emplace_back(r.get_int(i, 0), r.get_int(i, 1));
    }
    pg::Result p =
        db.exec("SELECT position FROM " + stream::parked_table(cfg_) + " WHERE position > CAST($1 AS bigint)",
                {std::to_string(cursor)});
    std::vector<int64_t> parked;
    for (int i = 0; i < p.rows(); ++i) {
        parked.push_back(p.get_int(i, 0));
    }
    progress_.load(cursor, done, parked);
    stored_cursor_ = cursor;
    reload_parked(db);
    active_ = true;
    standby_logged_ = false;
    log(LogLevel::info, "relay active on " + cfg_.outbox_qualified() + " from position " + std::to_string(cursor));
    return true;
}

void Relay::reload_parked(pg::Conn &db) {
    parked_aggs_.clear();
    pg::Result a = db.exec("SELECT DISTINCT aggregate_type, aggregate_id FROM " + stream::parked_table(cfg_));
    for (int i = 0; i < a.rows(); ++i) {
        parked_aggs_.emplace(std::string(a.get(i, 0)), std::string(a.get(i, 1)));
    }
}

} // namespace outbox
