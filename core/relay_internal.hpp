// What the relay's files share beyond relay.hpp: the step clock and the publish round's state
// (built by step() in relay.cpp, driven by relay_publish.cpp).
#pragma once

#include "relay.hpp"

#include <chrono>
#include <cstdint>
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
// relay.window messages in flight, confirms read as they come.
struct Relay::PublishRound {
    PublishRound(std::vector<RelayItem> &batch, std::vector<int> heads, RelayStats &stats)
        : items(batch), ready(std::move(heads)), st(stats) {}

    std::vector<RelayItem> &items;
    std::vector<int> ready; // items whose predecessor is confirmed, in the order they became so
    RelayStats &st;
    size_t next_ready = 0;
    std::map<uint64_t, int> in_flight; // delivery tag -> item
    std::unordered_map<std::string, int> by_id;

    // The broker's answer for one item: a confirmed, unreturned item is published and lets the next
    // link of its chain go; anything else is a failure.
    void resolve(int idx, bool acked, const char *why, bool unroutable_is_failure) {
        RelayItem &it = items[static_cast<size_t>(idx)];
        if (acked && (!it.returned || !unroutable_is_failure)) {
            it.outcome = RelayOutcome::published;
            if (it.next >= 0) {
                ready.push_back(it.next);
            }
            return;
        }
        it.outcome = RelayOutcome::failed;
        if (it.error.empty()) {
            it.error = why;
        }
        if (!acked) {
            it.refused = true;
            ++st.nacked;
        }
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
};

} // namespace outbox
