// Frame decoding: the broker's frames as Events (confirms, returns and deliveries with their
// content, cancel, (un)block) and the broker's closes as errors.
#include "amqp_impl.hpp"

namespace outbox::amqp {

std::optional<Event> Connection::Impl::on_content(const amqp_frame_t &frame) {
    PendingContent &p = *pending;
    if (!p.have_header) {
        if (frame.frame_type != AMQP_FRAME_HEADER) {
            socket_ok = false;
            die(Errc::broker,
                "protocol error: expected a content header, got frame type " + std::to_string(frame.frame_type));
        }
        const auto *props = static_cast<const amqp_basic_properties_t *>(frame.payload.properties.decoded);
        Properties decoded = props != nullptr ? decode_properties(*props) : Properties{};
        std::visit([&](auto &e) { e.props = std::move(decoded); }, p.event);
        p.have_header = true;
        p.body_size = frame.payload.properties.body_size;
        p.body.reserve(static_cast<size_t>(p.body_size));
    } else {
        if (frame.frame_type != AMQP_FRAME_BODY) {
            socket_ok = false;
            die(Errc::broker,
                "protocol error: expected a content body, got frame type " + std::to_string(frame.frame_type));
        }
        const amqp_bytes_t &frag = frame.payload.body_fragment;
        p.body.append(static_cast<const char *>(frag.bytes), frag.len);
        if (p.body.size() > p.body_size) {
            socket_ok = false;
            die(Errc::broker, "protocol error: content body longer than its header announced");
        }
    }
    if (p.body.size() < p.body_size) {
        return std::nullopt;
    }
    Event out = std::visit(
        [&](auto &e) -> Event {
            e.body = std::move(p.body);
            return Event(std::move(e));
        },
        p.event);
    pending.reset();
    return out;
}

std::optional<Event> Connection::Impl::on_frame(const amqp_frame_t &frame) {
    if (frame.channel == 0) {
        if (frame.frame_type != AMQP_FRAME_METHOD) {
            return std::nullopt;
        }
        const amqp_method_t &m = frame.payload.method;
        switch (m.id) {
        case AMQP_CONNECTION_CLOSE_METHOD:
            broker_closed_connection(*static_cast<const amqp_connection_close_t *>(m.decoded), "");
        case AMQP_CONNECTION_BLOCKED_METHOD:
            is_blocked = true;
            return Event(Blocked{str_of(static_cast<const amqp_connection_blocked_t *>(m.decoded)->reason)});
        case AMQP_CONNECTION_UNBLOCKED_METHOD:
            is_blocked = false;
            return Event(Unblocked{});
        default:
            return std::nullopt;
        }
    }
    if (frame.channel != kChannel) {
        return std::nullopt;
    }
    if (pending) {
        return on_content(frame);
    }
    if (frame.frame_type != AMQP_FRAME_METHOD) {
        return std::nullopt; // stray content, e.g. after a consumer was cancelled; nothing to attach it to
    }
    const amqp_method_t &m = frame.payload.method;
    switch (m.id) {
    case AMQP_BASIC_ACK_METHOD: {
        const auto *a = static_cast<const amqp_basic_ack_t *>(m.decoded);
        return Event(Ack{a->delivery_tag, a->multiple != 0});
    }
    case AMQP_BASIC_NACK_METHOD: {
        const auto *n = static_cast<const amqp_basic_nack_t *>(m.decoded);
        return Event(Nack{n->delivery_tag, n->multiple != 0});
    }
    case AMQP_BASIC_RETURN_METHOD: {
        const auto *r = static_cast<const amqp_basic_return_t *>(m.decoded);
        Returned ev;
        ev.reply_code = r->reply_code;
        ev.reply_text = str_of(r->reply_text);
        ev.exchange = str_of(r->exchange);
        ev.routing_key = str_of(r->routing_key);
        pending = PendingContent{std::move(ev), false, 0, {}};
        return std::nullopt;
    }
    case AMQP_BASIC_DELIVER_METHOD: {
        const auto *d = static_cast<const amqp_basic_deliver_t *>(m.decoded);
        Message ev;
        ev.delivery_tag = d->delivery_tag;
        ev.redelivered = d->redelivered != 0;
        ev.exchange = str_of(d->exchange);
        ev.routing_key = str_of(d->routing_key);
        ev.consumer_tag = str_of(d->consumer_tag);
        pending = PendingContent{std::move(ev), false, 0, {}};
        return std::nullopt;
    }
    case AMQP_BASIC_CANCEL_METHOD:
        return Event(Cancelled{str_of(static_cast<const amqp_basic_cancel_t *>(m.decoded)->consumer_tag)});
    case AMQP_CHANNEL_CLOSE_METHOD:
        broker_closed_channel(*static_cast<const amqp_channel_close_t *>(m.decoded), "");
    default:
        return std::nullopt; // late RPC replies and the like
    }
}

} // namespace outbox::amqp
