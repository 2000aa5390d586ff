// The publish round: per-aggregate chains, then publishing with confirms (up to relay.window in
// flight, a chain's next link after its predecessor's ack), returns and (un)block notices.
#include "relay.hpp"

#include "envelope.hpp"
#include "error.hpp"
#include "relay_internal.hpp"

#include <algorithm>
#include <chrono>
#include <optional>
#include <string>
#include <unordered_map>
#include <variant>
#include <vector>

namespace outbox {

// Stage 3: per-aggregate chains in position order. Parked events come first (they are the older
// ones of their aggregates); stream events of an aggregate with parked events are parked unsent.
// A link whose predecessor is missing from the batch is held back. Returns the heads: the items
// ready to send.
std::vector<int> Relay::build_chains(std::vector<RelayItem> &items) {
    std::vector<int> ready;
    std::unordered_map<std::string, int> tail; // aggregate -> last item index in its chain
    for (int i = 0; i < static_cast<int>(items.size()); ++i) {
        RelayItem &item = items[static_cast<size_t>(i)];
        if (item.park) {
            item.outcome = RelayOutcome::held_back;
            continue;
        }
        std::string key = item.row.aggregate_type;
        key.push_back('\0');
        key += item.row.aggregate_id;
        auto it = tail.find(key);
        if (it == tail.end()) {
            tail.emplace(std::move(key), i);
            ready.push_back(i);
        } else if (items[static_cast<size_t>(it->second)].row.seq + 1 == item.row.seq) {
            items[static_cast<size_t>(it->second)].next = i;
            it->second = i;
        } else {
            item.outcome = RelayOutcome::held_back;
        }
    }
    return ready;
}

// Sends the ready links while the window has room and the broker does not block publishing.
void Relay::send_ready(PublishRound &round, amqp::Connection &mq) {
    while (!blocked_ && !stopping() && round.next_ready < round.ready.size() &&
           round.in_flight.size() < static_cast<size_t>(cfg_.relay_window)) {
        int idx = round.ready[round.next_ready++];
        RelayItem &it = round.items[static_cast<size_t>(idx)];
        std::string body = envelope_body(it.row);
        uint64_t tag = mq.publish(cfg_.exchange, routing_key(it.row), true, envelope_properties(it.row), body);
        it.outcome = RelayOutcome::in_flight;
        round.in_flight.emplace(tag, idx);
        round.by_id.emplace(it.row.outbox_id, idx);
    }
}

// One event from the broker during publishing: a confirm, a return, or a (un)block notice.
void Relay::on_broker_event(PublishRound &round, const amqp::Event &ev) {
    if (const auto *ack = std::get_if<amqp::Ack>(&ev)) {
        round.confirm(ack->tag, ack->multiple, true, cfg_.relay_unroutable_is_failure);
    } else if (const auto *nack = std::get_if<amqp::Nack>(&ev)) {
        round.confirm(nack->tag, nack->multiple, false, cfg_.relay_unroutable_is_failure);
    } else if (const auto *ret = std::get_if<amqp::Returned>(&ev)) {
        auto found = round.by_id.find(ret->props.message_id);
        if (found != round.by_id.end()) {
            RelayItem &it = round.items[static_cast<size_t>(found->second)];
            it.returned = true;
            it.error = "unroutable: " + std::to_string(ret->reply_code) + " " + ret->reply_text +
                       " (no queue bound to exchange " + cfg_.exchange + ")";
            ++round.st.unroutable;
        }
    } else if (std::holds_alternative<amqp::Blocked>(ev)) {
        blocked_ = true;
        round.st.blocked = true;
        log(LogLevel::warn, "RabbitMQ blocked publishing (resource alarm); waiting");
    } else if (std::holds_alternative<amqp::Unblocked>(ev)) {
        blocked_ = false;
        log(LogLevel::info, "RabbitMQ unblocked publishing");
    }
}

// Stage 4: publish and collect confirms until every chain is done, publishing is blocked or stopped,
// or relay.confirm_timeout_ms ran out. Returns the broker's error when the connection was lost
// (confirms received so far are real; everything else stays PENDING), else nothing.
std::optional<std::string> Relay::publish(PublishRound &round) {
    amqp::Connection &mq = *mq_;
    const auto deadline = Clock::now() + std::chrono::milliseconds(cfg_.relay_confirm_timeout_ms);
    try {
        while (true) {
            send_ready(round, mq);
            const bool can_publish = !blocked_ && !stopping();
            const bool chains_left = round.next_ready < round.ready.size();
            if (round.in_flight.empty() && (!chains_left || !can_publish)) {
                break;
            }
            auto now = Clock::now();
            if (now >= deadline) {
                break;
            }
            // Block only when nothing more can be sent; otherwise just drain what has arrived.
            const bool more_to_send =
                can_publish && chains_left && round.in_flight.size() < static_cast<size_t>(cfg_.relay_window);
            int wait_ms =
                more_to_send
                    ? 0
                    : static_cast<int>(std::min<int64_t>(
                          200, std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now).count() + 1));
            for (std::optional<amqp::Event> ev = mq.wait(wait_ms); ev; ev = mq.wait(0)) {
                on_broker_event(round, *ev);
            }
        }
    } catch (const Error &e) {
        drop_amqp();
        return std::string(e.what());
    }
    if (!round.in_flight.empty() && blocked_) {
        round.st.unconfirmed = static_cast<int64_t>(round.in_flight.size());
        // A resource alarm: the broker stopped reading this connection. A new connection would be
        // blocked too, but only after letting a publish through, so this one is kept and the step
        // ends on time; the events stay PENDING (published again once unblocked: duplicates, never
        // loss), and late confirms of these tags match nothing in a later round.
        log(LogLevel::info, std::to_string(round.in_flight.size()) +
                                " message(s) unconfirmed while RabbitMQ blocks publishing; keeping the connection");
    } else if (!round.in_flight.empty()) {
        round.st.unconfirmed = static_cast<int64_t>(round.in_flight.size());
        // Late confirms would refer to tags of a batch we no longer track: start afresh.
        log(LogLevel::warn, std::to_string(round.in_flight.size()) + " message(s) not confirmed within " +
                                std::to_string(cfg_.relay_confirm_timeout_ms) + " ms; reconnecting to RabbitMQ");
        drop_amqp();
    } else if (round.st.nacked > 0) {
        // RabbitMQ 3.10 nacks every publish of a channel that first reached a quorum queue while its
        // leader was lost, for as long as the channel lives; a new channel reaches the new leader.
        log(LogLevel::info, std::to_string(round.st.nacked) + " message(s) nacked; reopening the RabbitMQ connection");
        drop_amqp();
    }
    return std::nullopt;
}

} // namespace outbox
