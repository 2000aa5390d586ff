// The outcome record: one autocommit statement per step for receipts, parked events, retries with
// backoff and the cursor.
#include "relay.hpp"

#include "error.hpp"
#include "relay_internal.hpp"
#include "stream.hpp"

#include <algorithm>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace outbox {
namespace {

// A PostgreSQL array literal of text elements, every element quoted and escaped.
std::string array_literal(const std::vector<std::string> &items) {
    std::string out = "{";
    for (size_t i = 0; i < items.size(); ++i) {
        if (i > 0) {
            out.push_back(',');
        }
        out.push_back('"');
        for (char c : items[i]) {
            if (c == '"' || c == '\\') {
                out.push_back('\\');
            }
            out.push_back(c);
        }
        out.push_back('"');
    }
    out.push_back('}');
    return out;
}

} // namespace

int64_t backoff_ms(int attempt, int64_t base_ms, int64_t max_ms, std::mt19937_64 &rng) {
    if (attempt < 1) {
        attempt = 1;
    }
    int64_t d = base_ms;
    for (int i = 1; i < attempt && d < max_ms; ++i) {
        d *= 2;
    }
    d = std::min(d, max_ms);
    if (d <= 1) {
        return std::max<int64_t>(d, 0);
    }
    std::uniform_int_distribution<int64_t> jitter(d / 2, d);
    return jitter(rng);
}

// The delay before retrying an event that failed its attempt `attempt`: relay.nack_retry_ms after a
// nack, else the doubling backoff.
int64_t Relay::retry_delay_ms(int attempt, bool refused) {
    if (refused) {
        return cfg_.relay_nack_retry_ms;
    }
    return backoff_ms(attempt, cfg_.relay_backoff_base_ms, cfg_.relay_backoff_max_ms, rng_);
}

// Stage 5: records every outcome of the batch and the cursor in one autocommit statement:
// receipts for published stream events; failed stream events, and the later events of their
// aggregates, parked; parked events published (removed) or failed again (backoff, FAILED at
// relay.max_attempts). Events neither published nor parked are read again next step. A failure
// drops the connection, so the next step reloads the stored progress (nothing is skipped).
void Relay::record(pg::Conn &db, std::vector<RelayItem> &items, RelayStats &st) {
    const auto t0 = Clock::now();
    std::vector<int64_t> published;
    std::vector<int64_t> gone;
    std::vector<std::string> park_pos, park_status, park_retries, park_err, park_delay;
    std::vector<std::string> again_pos, again_err, again_delay, again_inc;
    std::set<std::pair<std::string, std::string>> failed_aggs;
    std::set<std::pair<std::string, std::string>> newly_parked;
    for (RelayItem &it : items) {
        if (!it.parked) {
            progress_.release(it.position); // a batch a previous step left in flight
        }
        std::pair<std::string, std::string> agg{it.row.aggregate_type, it.row.aggregate_id};
        const bool failed = it.outcome == RelayOutcome::failed;
        // A nack is the broker's refusal (a quorum queue electing its leader, a full queue), not the
        // event's fault: retried after relay.nack_retry_ms, no attempt counted (publish() logs them).
        const bool refused = failed && it.refused;
        if (failed && !refused) {
            log(LogLevel::warn, "event " + it.row.outbox_id + " (" + it.row.event_type + " " + it.row.aggregate_type +
                                    ":" + it.row.aggregate_id + ") failed: " + it.error);
        }
        if (it.parked) {
            if (it.outcome == RelayOutcome::published) {
                gone.push_back(it.position);
            } else if (failed) {
                again_pos.push_back(std::to_string(it.position));
                again_err.push_back(it.error);
                again_delay.push_back(std::to_string(retry_delay_ms(it.retry_count + 1, refused)));
                again_inc.emplace_back(refused ? "0" : "1");
            }
            continue;
        }
        if (it.outcome == RelayOutcome::published) {
            published.push_back(it.position);
            continue;
        }
        if (failed || it.park || failed_aggs.count(agg) > 0) {
            park_pos.push_back(std::to_string(it.position));
            park_status.emplace_back("PENDING");
            park_retries.emplace_back(failed && !refused ? "1" : "0");
            park_err.push_back(failed ? it.error : std::string());
            park_delay.push_back(failed ? std::to_string(retry_delay_ms(1, refused)) : "0");
            if (failed) {
                failed_aggs.insert(agg);
            } else {
                ++st.held_back;
            }
            newly_parked.insert(std::move(agg));
            continue;
        }
        if (it.outcome != RelayOutcome::in_flight) {
            ++st.held_back;
        }
        progress_.retry(it.position);
    }
    const int64_t cursor = progress_.advance();
    const bool nothing = published.empty() && gone.empty() && park_pos.empty() && again_pos.empty();
    if (nothing && cursor == stored_cursor_ && !progress_.awaiting_bound()) {
        return;
    }
    std::vector<std::string> from;
    std::vector<std::string> to;
    for (const auto *list : {&published, &gone}) {
        for (const auto &[a, b] : stream::ranges(*list)) {
            from.push_back(std::to_string(a));
            to.push_back(std::to_string(b));
        }
    }
    std::vector<std::string> gone_text;
    for (int64_t p : gone) {
        gone_text.push_back(std::to_string(p));
    }
    try {
        pg::Result r = db.exec_cached(
            record_sql_,
            {array_literal(from), array_literal(to), array_literal(park_pos), array_literal(park_status),
             array_literal(park_retries), array_literal(park_err), array_literal(park_delay), array_literal(gone_text),
             array_literal(again_pos), array_literal(again_err), array_literal(again_delay),
             std::to_string(cfg_.relay_max_attempts), std::to_string(cursor), array_literal(again_inc)});
        st.published += r.get_int(0, 0);
        st.failed += r.get_int(0, 1);
        st.dead += r.get_int(0, 2);
        stored_cursor_ = cursor;
        progress_.set_bound(static_cast<uint64_t>(r.get_int(0, 4)));
        if (!gone.empty()) {
            reload_parked(db);
        }
        parked_aggs_.insert(newly_parked.begin(), newly_parked.end());
    } catch (const Error &) {
        // Not recorded: the events are published again (duplicates, never loss) once the next
        // step has reloaded the stored progress.
        drop_pg();
        throw;
    }
    st.record_us += micros_since(t0);
}

} // namespace outbox
