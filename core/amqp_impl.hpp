// What the AMQP connection's files share: librabbitmq's connection state, the channel, and
// Connection::Impl (the live connection: its errors, RPCs and sends under the watchdog).
#pragma once

#include "amqp.hpp"
#include "amqp_watchdog.hpp"
#include "amqp_wire.hpp"
#include "error.hpp"

#include <amqp.h>
#include <amqp_framing.h>

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <variant>

namespace outbox::amqp {

constexpr amqp_channel_t kChannel = 1;
// librabbitmq's own deadline (RPC reply, handshake) should report a timeout before the watchdog cuts
// the socket, so the watchdog gets a little more than io_timeout_ms.
constexpr int kWatchdogSlackMs = 500;
// How often a send asks the kernel when the broker last sent anything (heartbeat_expired()).
constexpr int kHeartbeatCheckMs = 100;
// Encoded publishes are written once this many bytes wait (and before any wait or other call).
constexpr size_t kFlushBytes = 64 * 1024;

inline std::string reply_text(uint16_t code, const amqp_bytes_t &text) {
    return std::to_string(code) + " " + str_of(text);
}

// Owns the amqp_connection_state_t; destroying it also closes and frees its socket.
struct StateDeleter {
    void operator()(amqp_connection_state_t s) const noexcept { amqp_destroy_connection(s); }
};
using StatePtr = std::unique_ptr<std::remove_pointer_t<amqp_connection_state_t>, StateDeleter>;

// Content (header + body frames) following a basic.return or basic.deliver, possibly spread over
// several wait() calls.
struct PendingContent {
    std::variant<Returned, Message> event;
    bool have_header = false;
    uint64_t body_size = 0;
    std::string body;
};

// An address of amqp.url, parsed (amqp_urls.cpp); parse_url and validate throw
// Error(invalid_argument) naming the redacted URL.
struct ParsedUrl {
    std::string user, password, host, vhost;
    int port = 0;
    bool ssl = false;
};
ParsedUrl parse_url(const std::string &url, const std::string &redacted);
void validate(const Options &o, const std::string &redacted);

// ---- Connection::Impl -----------------------------------------------------------------------------

struct Connection::Impl {
    Options opts;
    std::string redacted;
    StatePtr state;
    std::chrono::steady_clock::time_point next_heartbeat_check{}; // see heartbeat_expired()
    bool socket_ok = false; // login done and the socket not known to be broken or closed: a close is owed
    bool dead = false;      // any error: the object only waits for destruction
    std::string dead_reason;
    bool is_blocked = false;
    bool confirm = false;
    // Publishes on a plain TCP connection are encoded into `outgoing` (whole frames) and written together by
    // flush(), one system call for many messages instead of librabbitmq's three per message; every
    // other use of the connection flushes first, so the broker sees the frames in call order.
    bool plain_tcp = false;
    std::string outgoing;
    uint64_t next_tag = 1;
    std::optional<PendingContent> pending;
    Watchdog watchdog; // declared after `state`: stopped before the socket is closed
    size_t index = 0;  // place of opts.url in the address list
    std::string node;  // host:port

    explicit Impl(Options o) : opts(std::move(o)), redacted(redact_url(opts.url)) {}
    Impl(const Impl &) = delete;
    Impl &operator=(const Impl &) = delete;

    ~Impl() {
        if (state && socket_ok && !outgoing.empty()) {
            try {
                flush("publish"); // what was published goes out before the close, as librabbitmq's did
            } catch (...) {       // NOLINT(bugprone-empty-catch): a broken connection has nothing left to close
            }
        }
        if (state && socket_ok) {
            // Polite close so the broker logs a clean disconnect rather than an abrupt one; bounded by
            // the RPC timeout and the watchdog. Errors are irrelevant now.
            const int fd = amqp_get_sockfd(state.get());
            bool armed = false;
            if (fd >= 0) {
                try {
                    watchdog.arm(fd, static_cast<long long>(opts.io_timeout_ms) + kWatchdogSlackMs);
                    armed = true;
                } catch (...) { // NOLINT(bugprone-empty-catch): without the watchdog the close could hang
                }
            }
            if (armed) {
                (void)amqp_connection_close(state.get(), AMQP_REPLY_SUCCESS);
                (void)watchdog.disarm();
            }
        }
        watchdog.stop();
    }

    amqp_connection_state_t conn() const { return state.get(); }

    [[nodiscard]] std::string msg(const std::string &detail) const { return "AMQP " + redacted + ": " + detail; }

    // Marks the connection unusable and throws. The first reason is kept for later calls.
    [[noreturn]] void die(Errc code, const std::string &detail) {
        std::string m = msg(detail);
        if (!dead) {
            dead = true;
            dead_reason = m;
        }
        pending.reset();
        throw Error(code, m);
    }

    // A library status other than OK from a send or a frame wait.
    [[noreturn]] void lost(int status, const std::string &what, bool watchdog_fired) {
        socket_ok = false;
        if (watchdog_fired) {
            die(Errc::timeout, what + ": no progress within " + std::to_string(opts.io_timeout_ms) +
                                   " ms (broker not reading: resource alarm, stopped or unreachable); "
                                   "connection dropped");
        }
        switch (status) {
        case AMQP_STATUS_TIMEOUT:
            die(Errc::timeout, what + ": timed out after " + std::to_string(opts.io_timeout_ms) + " ms");
        case AMQP_STATUS_HEARTBEAT_TIMEOUT:
            die(Errc::connection, what + ": heartbeat timeout, the broker went silent");
        case AMQP_STATUS_NO_MEMORY:
            die(Errc::no_memory, what + ": out of memory");
        default:
            die(Errc::connection, what + ": " + amqp_error_string2(status));
        }
    }

    // Best-effort answer to a broker's close, so it can release the channel or connection at once.
    void send_close_ok(amqp_channel_t channel, amqp_method_number_t method) noexcept {
        const int fd = amqp_get_sockfd(state.get());
        if (fd < 0) {
            return;
        }
        try {
            watchdog.arm(fd, opts.io_timeout_ms);
        } catch (...) {
            return;
        }
        if (method == AMQP_CHANNEL_CLOSE_OK_METHOD) {
            amqp_channel_close_ok_t ok{};
            (void)amqp_send_method(state.get(), channel, method, &ok);
        } else {
            amqp_connection_close_ok_t ok{};
            (void)amqp_send_method(state.get(), channel, method, &ok);
        }
        (void)watchdog.disarm();
    }

    [[noreturn]] void broker_closed_channel(const amqp_channel_close_t &c, const std::string &what) {
        send_close_ok(kChannel, AMQP_CHANNEL_CLOSE_OK_METHOD);
        die(Errc::broker, what + "channel closed by broker: " + reply_text(c.reply_code, c.reply_text));
    }

    [[noreturn]] void broker_closed_connection(const amqp_connection_close_t &c, const std::string &what,
                                               Errc code = Errc::broker) {
        send_close_ok(0, AMQP_CONNECTION_CLOSE_OK_METHOD);
        socket_ok = false;
        die(code, what + "connection closed by broker: " + reply_text(c.reply_code, c.reply_text));
    }

    void check_reply(const amqp_rpc_reply_t &r, const std::string &what, bool watchdog_fired,
                     Errc server_code = Errc::broker) {
        if (watchdog_fired) {
            lost(AMQP_STATUS_TIMEOUT, what, true);
        }
        switch (r.reply_type) {
        case AMQP_RESPONSE_NORMAL:
            return;
        case AMQP_RESPONSE_NONE:
            socket_ok = false;
            die(Errc::broker, what + ": no RPC reply");
        case AMQP_RESPONSE_LIBRARY_EXCEPTION:
            lost(r.library_error, what, false);
        case AMQP_RESPONSE_SERVER_EXCEPTION:
            if (r.reply.id == AMQP_CHANNEL_CLOSE_METHOD && r.reply.decoded != nullptr) {
                broker_closed_channel(*static_cast<const amqp_channel_close_t *>(r.reply.decoded), what + ": ");
            }
            if (r.reply.id == AMQP_CONNECTION_CLOSE_METHOD && r.reply.decoded != nullptr) {
                broker_closed_connection(*static_cast<const amqp_connection_close_t *>(r.reply.decoded), what + ": ",
                                         server_code);
            }
            socket_ok = false;
            die(server_code, what + ": unexpected server reply " + std::to_string(r.reply.id));
        }
        socket_ok = false;
        die(Errc::broker, what + ": unknown RPC reply type");
    }

    // Runs one librabbitmq RPC helper under the watchdog and turns a bad reply into an Error.
    // The returned pointer lives in librabbitmq's pool until the next library call: copy at once.
    template <class F> auto rpc(const std::string &what, F &&call) {
        flush(what);
        amqp_maybe_release_buffers(state.get()); // what the previous RPC returned is no longer needed
        watchdog.arm(amqp_get_sockfd(state.get()), static_cast<long long>(opts.io_timeout_ms) + kWatchdogSlackMs);
        auto *ok = call();
        const bool fired = watchdog.disarm();
        check_reply(amqp_get_rpc_reply(state.get()), what, fired);
        if (ok == nullptr) { // NORMAL reply without a decoded method: cannot happen, but never dereference
            socket_ok = false;
            die(Errc::broker, what + ": empty RPC reply");
        }
        return ok;
    }

    // True when the broker has sent nothing for two heartbeat intervals (the kernel keeps the time
    // of the last data received on the socket, heartbeat frames included). Asked of the kernel at
    // most every kHeartbeatCheckMs: a publish loop must not pay a system call per message, and the
    // intervals are whole seconds.
    [[nodiscard]] bool heartbeat_expired() {
        if (opts.heartbeat_s <= 0 || amqp_frames_enqueued(state.get()) != 0 || amqp_data_in_buffer(state.get()) != 0) {
            return false;
        }
        const auto now = std::chrono::steady_clock::now();
        if (now < next_heartbeat_check) {
            return false;
        }
        next_heartbeat_check = now + std::chrono::milliseconds(kHeartbeatCheckMs);
        tcp_info ti{};
        socklen_t len = sizeof ti;
        if (getsockopt(amqp_get_sockfd(state.get()), IPPROTO_TCP, TCP_INFO, &ti, &len) != 0) {
            return false;
        }
        return ti.tcpi_last_data_recv >= 2000U * static_cast<unsigned>(opts.heartbeat_s);
    }

    // A plain send (publish, ack...) under the watchdog.
    // Appends basic.publish, its content header and body frames to `outgoing`; false (nothing appended)
    // when the properties do not fit a frame: the caller publishes through librabbitmq instead.
    bool encode_publish(const std::string &exchange, const std::string &routing_key, bool mandatory,
                        amqp_basic_properties_t &props, std::string_view body);
    // Writes `outgoing` to the socket, waiting for room at most opts.io_timeout_ms.
    void flush(const std::string &what);

    template <class F> void send(const std::string &what, F &&call) {
        flush(what);
        // librabbitmq 0.11, asked to send once its heartbeat deadline has passed, waits for the
        // broker's next frame without a time limit (poll for input, timeout -1) before sending, so a
        // paused broker would be noticed only when the watchdog fires, io_timeout_ms later. Report
        // the missed heartbeats at once instead.
        if (heartbeat_expired()) {
            lost(AMQP_STATUS_HEARTBEAT_TIMEOUT, what, false);
        }
        watchdog.arm(amqp_get_sockfd(state.get()), opts.io_timeout_ms);
        const int status = call();
        const bool fired = watchdog.disarm();
        if (status != AMQP_STATUS_OK || fired) {
            lost(status, what, fired);
        }
    }

    std::optional<Event> on_frame(const amqp_frame_t &frame);
    std::optional<Event> on_content(const amqp_frame_t &frame);

    // The steps of opening (Connection::open): a socket, plain or TLS with its options; the TCP
    // connect; login with the client properties, then the channel.
    amqp_socket_t *make_socket(bool tls);
    void connect_socket(amqp_socket_t *sock, const std::string &host, int port, bool tls);
    void login(const std::string &vhost, const std::string &user, const std::string &password);
};

} // namespace outbox::amqp
