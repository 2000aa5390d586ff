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
#include <string_view>
#include <unordered_map>
#include <utility>
#include <variant>
#include <vector>

namespace outbox {

// Stage 3: per-aggregate chains in position order, for the round's items from `from` on (a step's
// batch: from 0; the next batch: after the step's). Parked events come first (they are the older
// ones of their aggregates); stream events of an aggregate with parked events are parked unsent.
// A link goes after its aggregate's last earlier item in the round: behind it when that item is
// still to be confirmed, at once when it is confirmed; a link that does not follow it (its seq is
// not the next) or follows a failed or held one is held back. Ready links are queued.
void Relay::chain(PublishRound &round, size_t from) {
    // aggregate -> its last item in the round so far; the keys view the items' own strings, which
    // stay in place while this runs (nothing is added to round.items here).
    using Key = std::pair<std::string_view, std::string_view>;
    struct KeyHash {
        size_t operator()(const Key &k) const noexcept {
            const size_t h = std::hash<std::string_view>{}(k.first);
            return h ^ (std::hash<std::string_view>{}(k.second) + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2));
        }
    };
    std::unordered_map<Key, int, KeyHash> tail;
    tail.reserve(round.items.size());
    auto key_of = [](const RelayItem &item) { return Key(item.row.aggregate_type, item.row.aggregate_id); };
    for (size_t i = 0; i < from; ++i) {
        if (!round.items[i].park) {
            tail[key_of(round.items[i])] = static_cast<int>(i);
        }
    }
    for (size_t i = from; i < round.items.size(); ++i) {
        RelayItem &item = round.items[i];
        if (item.park) {
            item.outcome = RelayOutcome::held_back;
            continue;
        }
        const int idx = static_cast<int>(i);
        auto [it, first] = tail.try_emplace(key_of(item), idx);
        if (first) {
            round.make_ready(idx);
            continue;
        }
        RelayItem &before = round.items[static_cast<size_t>(it->second)];
        it->second = idx;
        const bool follows = before.row.seq + 1 == item.row.seq;
        if (follows && (before.outcome == RelayOutcome::pending || before.outcome == RelayOutcome::in_flight)) {
            before.next = idx;
        } else if (follows && before.outcome == RelayOutcome::published) {
            round.make_ready(idx);
        } else {
            item.outcome = RelayOutcome::held_back;
        }
    }
}

// Whether the next batch can go out now: the step's batch has nothing left to send, the read of
// the next one was made ahead (send_prefetch: a backlog, no parked aggregates), and the broker
// takes more.
bool Relay::can_open_next(const PublishRound &round) const {
    return !round.next_open() && prefetch_ && round.next_ready == round.ready.size() && !blocked_ && !stopping() &&
           round.st->nacked == 0 && round.in_flight.size() < static_cast<size_t>(cfg_.relay_window);
}

// Adds the next batch to the round: the read made ahead, used only when it is the very read the
// next step would make (nothing was recorded since it was sent). Its positions are held (the
// cursor stays below them) until a step records them.
void Relay::open_next(PublishRound &round) noexcept {
    try {
        collect_prefetch(*pg_);
        if (!prefetch_ || !(prefetch_->read == stream_read(cfg_.relay_batch_size))) {
            prefetch_.reset();
            return;
        }
        std::vector<RelayItem> next;
        read_stream(*pg_, next, cfg_.relay_batch_size);
        const size_t from = round.items.size();
        round.items.reserve(from + next.size());
        for (RelayItem &it : next) {
            progress_.hold(it.position);
            round.items.push_back(std::move(it));
        }
        chain(round, from);
    } catch (const std::exception &) {
        prefetch_.reset(); // the next step reads afresh
    }
}

// Gives up the next batch (the broker's connection went, the step's batch did not end cleanly,
// or there is no next step): its events are read again and published again (duplicates, never loss).
void Relay::abandon_next() noexcept {
    if (!round_) {
        return;
    }
    PublishRound &r = *round_;
    const int end = static_cast<int>(r.current_end);
    for (size_t i = r.current_end; i < r.items.size(); ++i) {
        if (!r.items[i].parked) {
            progress_.release(r.items[i].position);
            progress_.retry(r.items[i].position);
        }
    }
    for (auto i = r.in_flight.begin(); i != r.in_flight.end();) {
        i = i->second >= end ? r.in_flight.erase(i) : std::next(i);
    }
    std::vector<int> keep;
    for (size_t i = r.next_ready; i < r.ready.size(); ++i) {
        if (r.ready[i] < end) {
            keep.push_back(r.ready[i]);
        }
    }
    r.ready = std::move(keep);
    r.next_ready = 0;
    r.items.erase(r.items.begin() + end, r.items.end());
    for (RelayItem &it : r.items) {
        if (it.next >= end) {
            it.next = -1;
        }
    }
    if (r.items.empty()) {
        round_.reset();
    }
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
    }
    mq.flush(); // the gathered frames go out together
}

// One event from the broker during publishing: a confirm, a return, or a (un)block notice.
void Relay::on_broker_event(PublishRound &round, const amqp::Event &ev) {
    if (const auto *ack = std::get_if<amqp::Ack>(&ev)) {
        round.confirm(ack->tag, ack->multiple, true, cfg_.relay_unroutable_is_failure);
    } else if (const auto *nack = std::get_if<amqp::Nack>(&ev)) {
        round.confirm(nack->tag, nack->multiple, false, cfg_.relay_unroutable_is_failure);
    } else if (const auto *ret = std::get_if<amqp::Returned>(&ev)) {
        const int found = round.in_flight_with_id(ret->props.message_id);
        if (found >= 0) {
            RelayItem &it = round.items[static_cast<size_t>(found)];
            it.returned = true;
            it.error = "unroutable: " + std::to_string(ret->reply_code) + " " + ret->reply_text +
                       " (no queue bound to exchange " + cfg_.exchange + ")";
            ++round.st->unroutable;
        }
    } else if (std::holds_alternative<amqp::Blocked>(ev)) {
        blocked_ = true;
        round.st->blocked = true;
        log(LogLevel::warn, "RabbitMQ blocked publishing (resource alarm); waiting");
    } else if (std::holds_alternative<amqp::Unblocked>(ev)) {
        blocked_ = false;
        log(LogLevel::info, "RabbitMQ unblocked publishing");
    }
}

// Stage 4: publish and collect confirms until every chain of the step's batch is done, publishing
// is blocked or stopped, or relay.confirm_timeout_ms ran out. With `overlap`, once the batch has
// nothing left to send, the next batch is added and sent while its confirms come in (and left in
// flight when the batch is done). Returns the broker's error when the connection was lost
// (confirms received so far are real; everything else stays PENDING), else nothing.
std::optional<std::string> Relay::publish(PublishRound &round, bool overlap) {
    amqp::Connection &mq = *mq_;
    const auto deadline = Clock::now() + std::chrono::milliseconds(cfg_.relay_confirm_timeout_ms);
    try {
        while (true) {
            send_ready(round, mq);
            if (overlap && can_open_next(round)) {
                open_next(round);
                send_ready(round, mq);
            }
            const bool can_publish = !blocked_ && !stopping();
            const bool chains_left = round.next_ready < round.ready.size();
            if (round.current_done() || (round.in_flight.empty() && !can_publish)) {
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
            // With nothing to send, the next batch's read is made ready a slice at a time instead of
            // blocking, so that opening it later costs the window nothing.
            if (wait_ms > 0 && overlap && pg_ && advance_prefetch(*pg_)) {
                wait_ms = 0;
            }
            for (std::optional<amqp::Event> ev = mq.wait(wait_ms); ev; ev = mq.wait(0)) {
                on_broker_event(round, *ev);
            }
        }
    } catch (const Error &e) {
        drop_amqp();
        return std::string(e.what());
    }
    // Stuck: the step's batch still has messages unconfirmed (the step ends without them).
    const bool stuck = !round.current_done() && !round.in_flight.empty();
    if (stuck && blocked_) {
        round.st->unconfirmed = static_cast<int64_t>(round.in_flight.size());
        // A resource alarm: the broker stopped reading this connection. A new connection would be
        // blocked too, but only after letting a publish through, so this one is kept and the step
        // ends on time; the events stay PENDING (published again once unblocked: duplicates, never
        // loss), and late confirms of these tags match nothing in a later round.
        log(LogLevel::info, std::to_string(round.in_flight.size()) +
                                " message(s) unconfirmed while RabbitMQ blocks publishing; keeping the connection");
    } else if (stuck) {
        round.st->unconfirmed = static_cast<int64_t>(round.in_flight.size());
        // Late confirms would refer to tags of a batch we no longer track: start afresh.
        log(LogLevel::warn, std::to_string(round.in_flight.size()) + " message(s) not confirmed within " +
                                std::to_string(cfg_.relay_confirm_timeout_ms) + " ms; reconnecting to RabbitMQ");
        drop_amqp();
    } else if (round.st->nacked > 0) {
        // RabbitMQ 3.10 nacks every publish of a channel that first reached a quorum queue while its
        // leader was lost, for as long as the channel lives; a new channel reaches the new leader.
        log(LogLevel::info, std::to_string(round.st->nacked) + " message(s) nacked; reopening the RabbitMQ connection");
        drop_amqp();
    }
    return std::nullopt;
}

} // namespace outbox
