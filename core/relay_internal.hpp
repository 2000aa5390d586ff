// What the relay's files share beyond relay.hpp: the step clock and the publish round's state
// (built by step() in relay.cpp, driven by relay_publish.cpp).
#pragma once

#include "relay.hpp"

#include <chrono>
#include <cstdint>
#include <iterator>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

namespace outbox {

using Clock = std::chrono::steady_clock;

inline int64_t micros_since(Clock::time_point t0) {
    return std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - t0).count();
}

// Stage 4's state: chains published in parallel, the links of one chain one after another, up to
// relay.window messages in flight, confirms read as they come. It holds the step's batch (items
// [0, current_end)) and, once the batch has nothing left to send, the next batch (the rest), whose
// links go out while the batch's confirms come in. The step records its batch alone; the next
// batch stays in flight with the round (Relay::round_) and is the next step's batch.
struct Relay::PublishRound {
    explicit PublishRound(std::vector<RelayItem> batch) : items(std::move(batch)), current_end(items.size()) {}

    std::vector<RelayItem> items;
    size_t current_end; // items before it are the step's batch; after it, the next batch
    RelayStats *st = nullptr;
    std::vector<int> ready; // items whose predecessor is confirmed, in the order they became so
    size_t next_ready = 0;
    std::map<uint64_t, int> in_flight; // delivery tag -> item
    int outstanding = 0;               // of the step's batch: items ready and not yet sent, or in flight

    [[nodiscard]] bool current(int idx) const { return static_cast<size_t>(idx) < current_end; }
    [[nodiscard]] bool next_open() const { return current_end < items.size(); }
    // Every item of the step's batch is confirmed, failed or held back.
    [[nodiscard]] bool current_done() const { return outstanding == 0; }

    void make_ready(int idx) {
        ready.push_back(idx);
        if (current(idx)) {
            ++outstanding;
        }
    }

    // The broker's answer for one item: a confirmed, unreturned item is published and lets the next
    // link of its chain go; anything else is a failure.
    void resolve(int idx, bool acked, const char *why, bool unroutable_is_failure) {
        RelayItem &it = items[static_cast<size_t>(idx)];
        if (current(idx)) {
            --outstanding;
        }
        if (acked && (!it.returned || !unroutable_is_failure)) {
            it.outcome = RelayOutcome::published;
            if (it.next >= 0) {
                make_ready(it.next);
            }
            return;
        }
        it.outcome = RelayOutcome::failed;
        if (it.error.empty()) {
            it.error = why;
        }
        if (!acked) {
            it.refused = true;
            ++st->nacked;
        }
    }

    // The item in flight with this message id (a return comes before its message's ack), or -1.
    // A scan of the window: returns are rare, and a map kept per message would cost every publish.
    [[nodiscard]] int in_flight_with_id(const std::string &message_id) const {
        for (const auto &[tag, idx] : in_flight) {
            if (items[static_cast<size_t>(idx)].row.outbox_id == message_id) {
                return idx;
            }
        }
        return -1;
    }

    // An ack or nack, single or `multiple` (every outstanding tag up to it).
    void confirm(uint64_t tag, bool multiple, bool acked, bool unroutable_is_failure) {
        const char *why = acked ? "" : "nacked by the broker";
        if (!multiple) {
            auto found = in_flight.find(tag);
            if (found != in_flight.end()) {
                resolve(found->second, acked, why, unroutable_is_failure);
                in_flight.erase(found);
            }
            return;
        }
        auto end = in_flight.upper_bound(tag);
        for (auto i = in_flight.begin(); i != end; ++i) {
            resolve(i->second, acked, why, unroutable_is_failure);
        }
        in_flight.erase(in_flight.begin(), end);
    }

    // Takes the step's batch out (to be recorded); the next batch becomes the round's whole content,
    // its indexes shifted. Only once the batch is done: nothing of it is ready or in flight.
    std::vector<RelayItem> take_current() {
        const int k = static_cast<int>(current_end);
        std::vector<RelayItem> done(std::make_move_iterator(items.begin()), std::make_move_iterator(items.begin() + k));
        items.erase(items.begin(), items.begin() + k);
        for (RelayItem &it : items) {
            it.next = it.next >= k ? it.next - k : -1;
        }
        std::vector<int> left;
        for (size_t i = next_ready; i < ready.size(); ++i) {
            left.push_back(ready[i] - k);
        }
        ready = std::move(left);
        next_ready = 0;
        for (auto &[tag, idx] : in_flight) {
            idx -= k;
        }
        current_end = 0; // the rest is the next step's batch, made current when that step begins
        outstanding = 0;
        return done;
    }

    // The next step begins: the carried batch becomes its batch.
    void promote(RelayStats &stats) {
        st = &stats;
        current_end = items.size();
        outstanding = static_cast<int>(in_flight.size() + (ready.size() - next_ready));
    }
};

} // namespace outbox
