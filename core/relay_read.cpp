// The read: a step's events (due parked aggregates, then the stream from the frontier, gaps and
// retries again) and the next read made ahead while a full batch is published.
#include "relay.hpp"

#include "envelope.hpp"
#include "stream.hpp"

#include <algorithm>
#include <limits>
#include <string>
#include <utility>
#include <vector>

namespace outbox {

namespace {
// One event row as read_sql and parked_sql return them, from column `c` (the position) on.
RelayItem item_from(const pg::Result &r, int i, int c) {
    RelayItem it;
    it.position = r.get_int(i, c);
    it.row.outbox_id = std::string(r.get(i, c + 1));
    it.row.event_type = std::string(r.get(i, c + 2));
    it.row.aggregate_type = std::string(r.get(i, c + 3));
    it.row.aggregate_id = std::string(r.get(i, c + 4));
    it.row.seq = r.get_int(i, c + 5);
    it.row.operation = std::string(r.get(i, c + 6));
    it.row.payload = std::string(r.get(i, c + 7));
    it.row.previous_payload = r.get_opt(i, c + 8);
    it.row.metadata = std::string(r.get(i, c + 9));
    it.row.user = r.get_opt(i, c + 10);
    set_created(it.row, r.get(i, c + 11));
    it.retry_count = static_cast<int>(r.get_int(i, c + 12));
    return it;
}

// The stream read's events of result rows [from, to), appended in result order (a row without an
// event is the snapshot's row alone).
void convert_rows(const pg::Result &r, int from, int to, std::vector<RelayItem> &out) {
    out.reserve(static_cast<size_t>(r.rows()));
    for (int i = from; i < to; ++i) {
        if (!r.is_null(i, 1)) {
            out.push_back(item_from(r, i, 1));
        }
    }
}

// In position order. The read's two parts (the runs read again, then the events past the frontier)
// each come in that order, so the server is not asked to sort the batch's rows.
void in_position_order(std::vector<RelayItem> &read) {
    const auto by_position = [](const RelayItem &a, const RelayItem &b) { return a.position < b.position; };
    if (!std::is_sorted(read.begin(), read.end(), by_position)) {
        std::sort(read.begin(), read.end(), by_position);
    }
}
} // namespace

// The due parked events: whole aggregates from their first parked event on, in position order.
void Relay::read_parked(pg::Conn &db, std::vector<RelayItem> &items) {
    if (parked_aggs_.empty()) {
        return;
    }
    pg::Result r = db.exec_cached(parked_sql_, {std::to_string(cfg_.relay_batch_size)});
    for (int i = 0; i < r.rows(); ++i) {
        RelayItem it = item_from(r, i, 0);
        it.parked = true;
        items.push_back(std::move(it));
    }
}

Relay::StreamRead Relay::stream_read(int limit) const {
    StreamRead r;
    r.runs = progress_.recheck(static_cast<size_t>(cfg_.relay_batch_size));
    r.firsts = "{";
    r.lasts = "{";
    for (size_t i = 0; i < r.runs.size(); ++i) {
        r.firsts += (i > 0 ? "," : "") + std::to_string(r.runs[i].first);
        r.lasts += (i > 0 ? "," : "") + std::to_string(r.runs[i].second);
    }
    r.firsts += "}";
    r.lasts += "}";
    // Nothing past the frontier while gaps or retries wait outside this read (Progress::covers_rechecks).
    r.past =
        std::to_string(progress_.covers_rechecks(r.runs) ? progress_.frontier() : std::numeric_limits<int64_t>::max());
    r.limit = std::to_string(std::max(limit, 1));
    return r;
}

// The stream: gaps and retries again, then the events past the frontier, in position order (those
// only when every gap and retry is read again). One autocommit statement: an idle relay's poll.
void Relay::read_stream(pg::Conn &db, std::vector<RelayItem> &items, int limit) {
    const int64_t frontier = progress_.frontier();
    const StreamRead want = stream_read(limit);
    pg::Result r;
    std::vector<RelayItem> read;
    int converted = 0;
    if (prefetch_ && !prefetch_->sent && prefetch_->read == want) {
        r = std::move(prefetch_->result);
        read = std::move(prefetch_->items);
        converted = prefetch_->converted;
    } else {
        r = db.exec_cached(read_sql_, want.params());
    }
    prefetch_.reset();
    convert_rows(r, converted, r.rows(), read);
    in_position_order(read);
    const stream::Snapshot snap = stream::parse_snapshot(r.get(0, 0));
    std::vector<int64_t> found_again;
    std::vector<int64_t> fresh;
    const size_t first_item = items.size();
    items.reserve(items.size() + read.size());
    for (RelayItem &it : read) {
        if (it.position <= frontier) {
            found_again.push_back(it.position);
        } else {
            fresh.push_back(it.position);
            if (progress_.done(it.position)) {
                continue; // published or parked before this relay took over
            }
        }
        if (parked_aggs_.count({it.row.aggregate_type, it.row.aggregate_id}) > 0) {
            it.park = true; // behind its aggregate's parked events
        }
        items.push_back(std::move(it));
    }
    // The rechecked runs hold more events than the read's limit (a large write that committed
    // late): they were read up to the last one found, and what lies above it is read next step. So
    // are the events past the frontier, which must not overtake what is not read yet.
    int64_t examined = std::numeric_limits<int64_t>::max();
    if (found_again.size() >= static_cast<size_t>(std::max(limit, 1))) {
        examined = found_again.back();
        items.erase(std::remove_if(items.begin() + static_cast<std::ptrdiff_t>(first_item), items.end(),
                                   [frontier](const RelayItem &it) { return it.position > frontier; }),
                    items.end());
        fresh.clear();
    }
    progress_.observe(want.runs, found_again, fresh, snap, examined);
}

// After a full batch is read: sends the read the next step will make if every event of this batch
// is published (the frontier past them, the same positions read again). A read is only ever
// of events committed by its snapshot, whenever it is made, so an earlier one is as good: the next
// step uses it when its own read would be the same (read_stream), and otherwise reads afresh.
void Relay::send_prefetch(pg::Conn &db, const std::vector<RelayItem> &items) {
    prefetch_.reset();
    if (items.size() < static_cast<size_t>(cfg_.relay_batch_size) || !parked_aggs_.empty() || stopping()) {
        return; // no backlog behind this batch, or the next read depends on how this one ends
    }
    Prefetch p;
    p.read = stream_read(cfg_.relay_batch_size);
    db.send_cached(read_sql_, p.read.params());
    p.sent = true;
    prefetch_ = std::move(p);
}

// Takes the prefetched read's result, so that the connection is free again. On any failure the prefetch
// is dropped: the next step reads afresh (and finds a lost connection itself).
void Relay::collect_prefetch(pg::Conn &db) noexcept {
    if (!prefetch_ || !prefetch_->sent) {
        return;
    }
    try {
        prefetch_->result = db.collect();
        prefetch_->sent = false;
    } catch (const std::exception &) {
        prefetch_.reset();
    }
}

// A slice of the read made ahead, done while the relay would otherwise wait for confirms: what
// arrived is taken in, and once the result is whole, up to kSlice of its rows become items. Returns
// whether there was something to do (more may follow); false when the result has not arrived yet
// or is all converted. On any failure the prefetch is dropped, as collect_prefetch does.
bool Relay::advance_prefetch(pg::Conn &db) noexcept {
    constexpr int kSlice = 256; // about half a millisecond of work: confirms are read between slices
    constexpr int kReads = 16;
    if (!prefetch_) {
        return false;
    }
    if (prefetch_->sent) {
        // What has arrived, without waiting: libpq takes in some 32 KiB a call, and the server's
        // writes wait for the socket to be read.
        for (int i = 0; i < kReads; ++i) {
            if (!db.consume_input()) {
                prefetch_.reset(); // the connection is lost: the next step finds it so
                return false;
            }
            if (!db.busy()) {
                collect_prefetch(db);
                return prefetch_.has_value();
            }
            if (!db.readable_now()) {
                return i > 0; // nothing more yet: wait for the broker (and come back at its next frame)
            }
        }
        return true; // more is waiting: come back at once
    }
    const int rows = prefetch_->result.rows();
    if (prefetch_->converted >= rows) {
        return false;
    }
    try {
        const int to = std::min(rows, prefetch_->converted + kSlice);
        convert_rows(prefetch_->result, prefetch_->converted, to, prefetch_->items);
        prefetch_->converted = to;
    } catch (const std::exception &) {
        prefetch_.reset();
        return false;
    }
    return true;
}

std::vector<RelayItem> Relay::read_batch(pg::Conn &db, RelayStats &st) {
    std::vector<RelayItem> items;
    (void)st;
    read_parked(db, items);
    read_stream(db, items, cfg_.relay_batch_size - static_cast<int>(items.size()));
    return items;
}

// Drops a read made ahead, first taking its result if it is still on its way, so that the
// connection is free for the next statement.
void Relay::discard_prefetch() noexcept {
    if (prefetch_ && prefetch_->sent && pg_) {
        collect_prefetch(*pg_);
    }
    prefetch_.reset();
}

} // namespace outbox
