// Publishing on a plain TCP connection without a system call per frame: basic.publish, its content
// header and body frames encoded into one buffer (with librabbitmq's own encoders), written when a
// wait or another call needs the connection, or when enough has gathered. librabbitmq 0.11 sends
// each frame of a publish with a send() of its own, and its socket interface is private, so the
// frames are framed here (AMQP 0-9-1, section 4.2.3: type, channel, size, payload, frame-end).
#include "amqp_impl.hpp"

#include <poll.h>
#include <sys/socket.h>

#include <cerrno>
#include <chrono>

namespace outbox::amqp {
namespace {

constexpr size_t kFrameHeader = 7; // type, channel, payload size
constexpr uint8_t kFrameEnd = 0xCE;
// The room first offered to a content header: the relay's properties take a few hundred bytes, and
// every byte offered is zero-filled by the resize (a whole frame_max, 128 KiB, per message, once
// the relay's largest memset). A header that needs more is encoded again with the frame's room.
constexpr size_t kHeaderRoom = 2048;

void put16(uint8_t *p, uint16_t v) {
    p[0] = static_cast<uint8_t>(v >> 8);
    p[1] = static_cast<uint8_t>(v);
}
void put32(uint8_t *p, uint32_t v) {
    put16(p, static_cast<uint16_t>(v >> 16));
    put16(p + 2, static_cast<uint16_t>(v));
}
void put64(uint8_t *p, uint64_t v) {
    put32(p, static_cast<uint32_t>(v >> 32));
    put32(p + 4, static_cast<uint32_t>(v));
}

// Appends one frame whose payload `fill(into, room)` writes (returning its length, or < 0 when it
// does not fit in `room`); on failure nothing is appended.
template <class Fill> bool append_frame(std::string &out, uint8_t type, size_t room, Fill &&fill) {
    const size_t at = out.size();
    out.resize(at + kFrameHeader + room + 1);
    auto *f = reinterpret_cast<uint8_t *>(out.data()) + at;
    const int n = fill(f + kFrameHeader, room);
    if (n < 0) {
        out.resize(at);
        return false;
    }
    f[0] = type;
    put16(f + 1, kChannel);
    put32(f + 3, static_cast<uint32_t>(n));
    f[kFrameHeader + static_cast<size_t>(n)] = kFrameEnd;
    out.resize(at + kFrameHeader + static_cast<size_t>(n) + 1);
    return true;
}

} // namespace

bool Connection::Impl::encode_publish(const std::string &exchange, const std::string &routing_key, bool mandatory,
                                      amqp_basic_properties_t &props, std::string_view body) {
    const auto frame_max = static_cast<size_t>(amqp_get_frame_max(conn()));
    if (frame_max <= kFrameHeader + 1 + 12) {
        return false;
    }
    const size_t room = frame_max - kFrameHeader - 1; // the largest payload of a frame
    const size_t start = outgoing.size();
    amqp_basic_publish_t m{};
    m.exchange = bytes_of(exchange);
    m.routing_key = bytes_of(routing_key);
    m.mandatory = mandatory ? 1 : 0;
    const bool method = append_frame(
        outgoing, AMQP_FRAME_METHOD, std::min<size_t>(room, 4 + 2 + 256 + 256 + 1), [&](uint8_t *p, size_t n) {
            put32(p, AMQP_BASIC_PUBLISH_METHOD);
            const int r = amqp_encode_method(AMQP_BASIC_PUBLISH_METHOD, &m, amqp_bytes_t{n - 4, p + 4});
            return r < 0 ? r : r + 4;
        });
    const auto encode_header = [&](uint8_t *p, size_t n) {
        put16(p, AMQP_BASIC_CLASS);
        put16(p + 2, 0); // weight
        put64(p + 4, body.size());
        const int r = amqp_encode_properties(AMQP_BASIC_CLASS, &props, amqp_bytes_t{n - 12, p + 12});
        return r < 0 ? r : r + 12;
    };
    const bool header =
        method && (append_frame(outgoing, AMQP_FRAME_HEADER, std::min(room, kHeaderRoom), encode_header) ||
                   (room > kHeaderRoom && append_frame(outgoing, AMQP_FRAME_HEADER, room, encode_header)));
    if (!header) {
        outgoing.resize(start);
        return false;
    }
    for (size_t off = 0; off < body.size(); off += room) { // appended as they are: nothing to zero-fill first
        const size_t len = std::min(room, body.size() - off);
        uint8_t head[kFrameHeader];
        head[0] = AMQP_FRAME_BODY;
        put16(head + 1, kChannel);
        put32(head + 3, static_cast<uint32_t>(len));
        outgoing.append(reinterpret_cast<const char *>(head), kFrameHeader);
        outgoing.append(body.data() + off, len);
        outgoing.push_back(static_cast<char>(kFrameEnd));
    }
    return true;
}

void Connection::Impl::flush(const std::string &what) {
    if (outgoing.empty()) {
        return;
    }
    if (heartbeat_expired()) {
        lost(AMQP_STATUS_HEARTBEAT_TIMEOUT, what, false);
    }
    const int fd = amqp_get_sockfd(conn());
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(opts.io_timeout_ms);
    size_t done = 0;
    while (done < outgoing.size()) {
        const ssize_t n = ::send(fd, outgoing.data() + done, outgoing.size() - done, MSG_NOSIGNAL);
        if (n > 0) {
            done += static_cast<size_t>(n);
            continue;
        }
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            const auto left =
                std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
            if (left.count() <= 0) { // the broker reads nothing (a resource alarm, a pause)
                outgoing.clear();
                lost(AMQP_STATUS_TIMEOUT, what, false);
            }
            pollfd pfd{fd, POLLOUT, 0};
            if (::poll(&pfd, 1, static_cast<int>(left.count())) >= 0 || errno == EINTR) {
                continue;
            }
        }
        outgoing.clear();
        lost(AMQP_STATUS_SOCKET_ERROR, what, false);
    }
    outgoing.clear();
}

} // namespace outbox::amqp
