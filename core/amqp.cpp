#include "amqp.hpp"

#include "amqp_wire.hpp"
#include "error.hpp"

#include <amqp.h>
#include <amqp_framing.h>
#include <amqp_ssl_socket.h>
#include <amqp_tcp_socket.h>

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <system_error>
#include <thread>
#include <type_traits>

namespace outbox::amqp {

namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr amqp_channel_t kChannel = 1;
// librabbitmq's own deadline (RPC reply, handshake) should report a timeout before the watchdog cuts
// the socket, so the watchdog gets a little more than io_timeout_ms.
constexpr int kWatchdogSlackMs = 500;
constexpr const char *kSystemCaBundle = "/etc/ssl/certs/ca-certificates.crt";

timeval tv_of(int ms) {
    timeval tv{};
    tv.tv_sec = ms / 1000;
    tv.tv_usec = static_cast<suseconds_t>(ms % 1000) * 1000;
    return tv;
}

std::string reply_text(uint16_t code, const amqp_bytes_t &text) {
    return std::to_string(code) + " " + str_of(text);
}

// Owns the amqp_connection_state_t; destroying it also closes and frees its socket.
struct StateDeleter {
    void operator()(amqp_connection_state_t s) const noexcept { amqp_destroy_connection(s); }
};
using StatePtr = std::unique_ptr<std::remove_pointer_t<amqp_connection_state_t>, StateDeleter>;

// ---- the send watchdog -----------------------------------------------------------------------------

// librabbitmq 0.11 keeps its socket O_NONBLOCK and, inside amqp_basic_publish / amqp_send_frame, polls
// for writability with an infinite deadline (cut short only by the receive-heartbeat deadline, which a
// broker that is blocked by a resource alarm keeps pushing forward). SO_SNDTIMEO does not apply to a
// non-blocking socket, so the only way to bound such a call is from outside: this thread shuts the
// socket down when an armed call overruns, the library's poll wakes up, the send fails and the call
// returns. shutdown() leaves the descriptor open, so there is no race with descriptor reuse.
class Watchdog {
  public:
    Watchdog() = default;
    Watchdog(const Watchdog &) = delete;
    Watchdog &operator=(const Watchdog &) = delete;
    ~Watchdog() { stop(); }

    void arm(int fd, long long budget_ms) {
        std::unique_lock<std::mutex> lk(mu_);
        if (!thread_.joinable()) {
            try {
                thread_ = std::thread([this] { run(); });
            } catch (const std::system_error &e) {
                fail(Errc::internal, std::string("cannot start the AMQP send watchdog thread: ") + e.what());
            }
        }
        fd_ = fd;
        deadline_ = Clock::now() + milliseconds(budget_ms);
        armed_ = true;
        fired_ = false;
        const bool wake = idle_ || deadline_ < sleeping_until_;
        lk.unlock();
        // A watchdog sleeping towards an earlier deadline re-checks on its own when it wakes; only an
        // idle one, or one sleeping past the new deadline, needs a notification. That keeps a publish
        // loop (steadily later deadlines) free of context switches.
        if (wake) {
            cv_.notify_one();
        }
    }

    // True when the watchdog fired during the armed call.
    bool disarm() noexcept {
        std::lock_guard<std::mutex> lk(mu_);
        armed_ = false;
        return fired_;
    }

    void stop() noexcept {
        {
            std::lock_guard<std::mutex> lk(mu_);
            stopping_ = true;
            armed_ = false;
        }
        cv_.notify_one();
        if (thread_.joinable()) {
            thread_.join();
        }
    }

  private:
    void run() {
        std::unique_lock<std::mutex> lk(mu_);
        while (!stopping_) {
            if (!armed_) {
                idle_ = true;
                cv_.wait(lk);
                idle_ = false;
                continue;
            }
            if (Clock::now() >= deadline_) {
                ::shutdown(fd_, SHUT_RDWR);
                fired_ = true;
                armed_ = false;
                continue;
            }
            const auto until = deadline_;
            sleeping_until_ = until;
            cv_.wait_until(lk, until);
            sleeping_until_ = Clock::time_point::max();
        }
    }

    std::mutex mu_;
    std::condition_variable cv_;
    std::thread thread_;
    bool stopping_ = false;
    bool armed_ = false;
    bool fired_ = false;
    bool idle_ = false;
    int fd_ = -1;
    Clock::time_point deadline_{};
    Clock::time_point sleeping_until_ = Clock::time_point::max();
};

// Content (header + body frames) following a basic.return or basic.deliver, possibly spread over
// several wait() calls.
struct PendingContent {
    std::variant<Returned, Message> event;
    bool have_header = false;
    uint64_t body_size = 0;
    std::string body;
};

} // namespace

// ---- Connection::Impl -----------------------------------------------------------------------------

struct Connection::Impl {
    Options opts;
    std::string redacted;
    StatePtr state;
    bool socket_ok = false; // login done and the socket not known to be broken or closed: a close is owed
    bool dead = false;      // any error: the object only waits for destruction
    std::string dead_reason;
    bool is_blocked = false;
    bool confirm = false;
    uint64_t next_tag = 1;
    std::optional<PendingContent> pending;
    Watchdog watchdog; // declared after `state`: stopped before the socket is closed
    size_t index = 0;  // place of opts.url in the address list
    std::string node;  // host:port

    explicit Impl(Options o) : opts(std::move(o)), redacted(redact_url(opts.url)) {}
    Impl(const Impl &) = delete;
    Impl &operator=(const Impl &) = delete;

    ~Impl() {
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
    // of the last data received on the socket, heartbeat frames included).
    [[nodiscard]] bool heartbeat_expired() const {
        if (opts.heartbeat_s <= 0 || amqp_frames_enqueued(state.get()) != 0 || amqp_data_in_buffer(state.get()) != 0) {
            return false;
        }
        tcp_info ti{};
        socklen_t len = sizeof ti;
        if (getsockopt(amqp_get_sockfd(state.get()), IPPROTO_TCP, TCP_INFO, &ti, &len) != 0) {
            return false;
        }
        return ti.tcpi_last_data_recv >= 2000U * static_cast<unsigned>(opts.heartbeat_s);
    }

    // A plain send (publish, ack...) under the watchdog.
    template <class F> void send(const std::string &what, F &&call) {
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

// ---- Connection ----------------------------------------------------------------------------------------

namespace {

struct ParsedUrl {
    std::string user, password, host, vhost;
    int port = 0;
    bool ssl = false;
};

ParsedUrl parse_url(const std::string &url, const std::string &redacted) {
    if (url.empty()) {
        fail(Errc::invalid_argument, "AMQP URL is empty");
    }
    // amqp_parse_url decodes in place and points into the buffer it is given.
    std::vector<char> buf(url.begin(), url.end());
    buf.push_back('\0');
    amqp_connection_info info{};
    amqp_default_connection_info(&info);
    const int rc = amqp_parse_url(buf.data(), &info);
    if (rc != AMQP_STATUS_OK) {
        fail(Errc::invalid_argument,
             "invalid AMQP URL '" + redacted + "': " + amqp_error_string2(rc) +
                 " (expected amqp[s]://user:password@host[:port][/vhost], vhost '/' written %2f)");
    }
    ParsedUrl p;
    p.user = info.user != nullptr ? info.user : "";
    p.password = info.password != nullptr ? info.password : "";
    p.host = info.host != nullptr ? info.host : "";
    p.vhost = info.vhost != nullptr ? info.vhost : "/";
    p.port = info.port;
    p.ssl = info.ssl != 0;
    if (p.host.empty()) {
        fail(Errc::invalid_argument, "invalid AMQP URL '" + redacted + "': no host");
    }
    return p;
}

void validate(const Options &o, const std::string &redacted) {
    if (o.connect_timeout_ms <= 0 || o.io_timeout_ms <= 0) {
        fail(Errc::invalid_argument, "AMQP " + redacted + ": connect_timeout_ms and io_timeout_ms must be > 0");
    }
    if (o.heartbeat_s < 0 || o.heartbeat_s > 65535) {
        fail(Errc::invalid_argument, "AMQP " + redacted + ": heartbeat_s must be within 0..65535");
    }
    if (o.tls.cert_file.empty() != o.tls.key_file.empty()) {
        fail(Errc::invalid_argument, "AMQP " + redacted + ": tls cert_file and key_file go together");
    }
}

} // namespace

std::vector<std::string> split_url_list(const std::string &urls) {
    std::vector<std::string> out;
    size_t start = 0;
    while (start <= urls.size()) {
        size_t end = urls.find(',', start);
        if (end == std::string::npos) {
            end = urls.size();
        }
        size_t b = start, e = end;
        while (b < e && (urls[b] == ' ' || urls[b] == '\t')) {
            ++b;
        }
        while (e > b && (urls[e - 1] == ' ' || urls[e - 1] == '\t')) {
            --e;
        }
        if (e > b) {
            out.push_back(urls.substr(b, e - b));
        }
        start = end + 1;
    }
    return out;
}

Connection::Connection(Options options) {
    const std::vector<std::string> urls = split_url_list(options.url);
    if (urls.empty()) {
        fail(Errc::invalid_argument, "AMQP URL is empty");
    }
    // A malformed address is a configuration error whichever nodes are up: refuse it before trying any.
    for (const auto &u : urls) {
        (void)parse_url(u, redact_url(u));
    }
    std::string failures;
    bool all_timeouts = true;
    for (size_t k = 0; k < urls.size(); ++k) {
        const size_t i = (options.first + k) % urls.size();
        Options one = options;
        one.url = urls[i];
        try {
            impl_ = open(std::move(one));
            impl_->index = i;
            return;
        } catch (const Error &e) {
            if (urls.size() == 1 || e.code() == Errc::invalid_argument) {
                throw;
            }
            failures += std::string(failures.empty() ? "" : "; ") + e.what();
            all_timeouts = all_timeouts && e.code() == Errc::timeout;
        }
    }
    fail(all_timeouts ? Errc::timeout : Errc::connection,
         "no RabbitMQ node of the " + std::to_string(urls.size()) + " addresses could be reached: " + failures);
}

size_t Connection::address_index() const {
    return impl_ ? impl_->index : 0;
}

std::string Connection::node() const {
    return impl_ ? impl_->node : std::string();
}

namespace {

// The client properties sent at login: product, connection name, and the capabilities this
// client handles (confirms, nacks, connection.blocked, cancel notifications, auth failure close).
class ClientProperties {
  public:
    explicit ClientProperties(const std::string &connection_name)
        : caps_{bool_entry("publisher_confirms", true), bool_entry("basic.nack", true),
                bool_entry("connection.blocked", true), bool_entry("consumer_cancel_notify", true),
                bool_entry("authentication_failure_close", true)} {
        props_.push_back(string_entry("product", product_));
        if (!connection_name.empty()) {
            props_.push_back(string_entry("connection_name", connection_name));
        }
        amqp_table_entry_t cap_entry{};
        cap_entry.key = amqp_cstring_bytes("capabilities");
        cap_entry.value.kind = AMQP_FIELD_KIND_TABLE;
        cap_entry.value.value.table.num_entries = static_cast<int>(std::size(caps_));
        cap_entry.value.value.table.entries = caps_;
        props_.push_back(cap_entry);
        table_.num_entries = static_cast<int>(props_.size());
        table_.entries = props_.data();
    }
    ClientProperties(const ClientProperties &) = delete;
    ClientProperties &operator=(const ClientProperties &) = delete;
    amqp_table_t *table() { return &table_; }

  private:
    const std::string product_ = "outbox";
    amqp_table_entry_t caps_[5];
    std::vector<amqp_table_entry_t> props_;
    amqp_table_t table_{};
};

} // namespace

amqp_socket_t *Connection::Impl::make_socket(bool tls) {
    const Options &o = opts;
    if (!tls) {
        amqp_socket_t *sock = amqp_tcp_socket_new(conn());
        if (sock == nullptr) {
            fail(Errc::connection, msg("cannot create a socket"));
        }
        return sock;
    }
    amqp_socket_t *sock = amqp_ssl_socket_new(conn());
    if (sock == nullptr) {
        fail(Errc::connection, msg("cannot create a TLS socket"));
    }
    std::string ca = o.tls.ca_file;
    if (ca.empty() && o.tls.verify_peer && ::access(kSystemCaBundle, R_OK) == 0) {
        ca = kSystemCaBundle;
    }
    if (!ca.empty() && amqp_ssl_socket_set_cacert(sock, ca.c_str()) != AMQP_STATUS_OK) {
        fail(Errc::invalid_argument, msg("cannot load TLS CA file '" + ca + "'"));
    }
    if (!o.tls.key_password.empty()) {
        amqp_ssl_socket_set_key_passwd(sock, o.tls.key_password.c_str());
    }
    if (!o.tls.cert_file.empty() &&
        amqp_ssl_socket_set_key(sock, o.tls.cert_file.c_str(), o.tls.key_file.c_str()) != AMQP_STATUS_OK) {
        fail(Errc::invalid_argument,
             msg("cannot load TLS client certificate '" + o.tls.cert_file + "' / key '" + o.tls.key_file + "'"));
    }
    amqp_ssl_socket_set_verify_peer(sock, o.tls.verify_peer ? 1 : 0);
    amqp_ssl_socket_set_verify_hostname(sock, o.tls.verify_hostname ? 1 : 0);
    return sock;
}

void Connection::Impl::connect_socket(amqp_socket_t *sock, const std::string &host, int port, bool tls) {
    const timeval io_tv = tv_of(opts.io_timeout_ms);
    (void)amqp_set_handshake_timeout(conn(), &io_tv);
    (void)amqp_set_rpc_timeout(conn(), &io_tv);
    timeval connect_tv = tv_of(opts.connect_timeout_ms);
    const int rc = amqp_socket_open_noblock(sock, host.c_str(), port, &connect_tv);
    if (rc != AMQP_STATUS_OK) {
        std::string why = amqp_error_string2(rc);
        if (rc == AMQP_STATUS_TIMEOUT) {
            why = "timed out after " + std::to_string(opts.connect_timeout_ms) + " ms";
        }
        fail(Errc::connection, msg(std::string("cannot connect") + (tls ? " (TLS)" : "") + ": " + why));
    }
}

void Connection::Impl::login(const std::string &vhost, const std::string &user, const std::string &password) {
    ClientProperties props(opts.connection_name);
    // Login runs under the watchdog too: the handshake timeout bounds the waits for the broker's
    // replies, not librabbitmq's sends.
    watchdog.arm(amqp_get_sockfd(conn()), static_cast<long long>(opts.io_timeout_ms) + kWatchdogSlackMs);
    const amqp_rpc_reply_t reply = amqp_login_with_properties(conn(), vhost.c_str(), AMQP_DEFAULT_MAX_CHANNELS,
                                                              AMQP_DEFAULT_FRAME_SIZE, opts.heartbeat_s, props.table(),
                                                              AMQP_SASL_METHOD_PLAIN, user.c_str(), password.c_str());
    const bool fired = watchdog.disarm();
    socket_ok = true; // from here on a close is owed, unless the reply says the socket is gone
    if (reply.reply_type == AMQP_RESPONSE_LIBRARY_EXCEPTION && !fired) {
        socket_ok = false;
        std::string why = amqp_error_string2(reply.library_error);
        if (reply.library_error == AMQP_STATUS_CONNECTION_CLOSED || reply.library_error == AMQP_STATUS_SOCKET_ERROR) {
            why += " (the broker dropped the connection during login: wrong credentials, unknown vhost, or not "
                   "an AMQP 0-9-1 port?)";
        } else if (reply.library_error == AMQP_STATUS_TIMEOUT) {
            why = "login timed out after " + std::to_string(opts.io_timeout_ms) + " ms";
        }
        die(reply.library_error == AMQP_STATUS_TIMEOUT ? Errc::timeout : Errc::connection, "login failed: " + why);
    }
    // A refused login (403 ACCESS_REFUSED, 530 NOT_ALLOWED for a vhost) is a connection error: nothing was
    // ever usable.
    check_reply(reply, "login", fired, Errc::connection);
}

std::unique_ptr<Connection::Impl> Connection::open(Options options) {
    auto impl = std::make_unique<Impl>(std::move(options));
    Impl &s = *impl;
    validate(s.opts, s.redacted);
    const ParsedUrl url = parse_url(s.opts.url, s.redacted);
    const bool tls = s.opts.tls.enabled || url.ssl;
    s.node = url.host + ":" + std::to_string(url.port);
    s.state.reset(amqp_new_connection());
    if (!s.state) {
        fail(Errc::no_memory, s.msg("cannot allocate a connection"));
    }
    s.connect_socket(s.make_socket(tls), url.host, url.port, tls);
    s.login(url.vhost, url.user, url.password);
    s.rpc("channel.open", [&] { return amqp_channel_open(s.conn(), kChannel); });
    return impl;
}

Connection::~Connection() = default;
Connection::Connection(Connection &&) noexcept = default;
Connection &Connection::operator=(Connection &&) noexcept = default;

Connection::Impl &Connection::live() {
    if (!impl_) {
        fail(Errc::connection, "AMQP connection was moved from");
    }
    if (impl_->dead) {
        fail(Errc::connection, "AMQP connection unusable after an earlier error: " + impl_->dead_reason);
    }
    return *impl_;
}

void Connection::declare_exchange(const std::string &name, const std::string &type, bool durable, bool auto_delete,
                                  const Table &args) {
    Impl &s = live();
    if (type.empty()) {
        fail(Errc::invalid_argument, s.msg("exchange type is empty"));
    }
    const EncodedTable encoded(args);
    s.rpc("exchange.declare '" + name + "'", [&] {
        return amqp_exchange_declare(s.conn(), kChannel, bytes_of(name), bytes_of(type), 0, durable ? 1 : 0,
                                     auto_delete ? 1 : 0, 0, encoded.get());
    });
}

void Connection::delete_exchange(const std::string &name) {
    Impl &s = live();
    s.rpc("exchange.delete '" + name + "'",
          [&] { return amqp_exchange_delete(s.conn(), kChannel, bytes_of(name), 0); });
}

std::string Connection::declare_queue(const std::string &name, bool durable, bool exclusive, bool auto_delete,
                                      const Table &args) {
    Impl &s = live();
    const EncodedTable encoded(args);
    const auto *ok = s.rpc("queue.declare '" + name + "'", [&] {
        return amqp_queue_declare(s.conn(), kChannel, bytes_of(name), 0, durable ? 1 : 0, exclusive ? 1 : 0,
                                  auto_delete ? 1 : 0, encoded.get());
    });
    return str_of(ok->queue);
}

void Connection::delete_queue(const std::string &name) {
    Impl &s = live();
    s.rpc("queue.delete '" + name + "'", [&] { return amqp_queue_delete(s.conn(), kChannel, bytes_of(name), 0, 0); });
}

uint32_t Connection::purge_queue(const std::string &name) {
    Impl &s = live();
    const auto *ok =
        s.rpc("queue.purge '" + name + "'", [&] { return amqp_queue_purge(s.conn(), kChannel, bytes_of(name)); });
    return ok->message_count;
}

void Connection::bind_queue(const std::string &queue, const std::string &exchange, const std::string &routing_key) {
    Impl &s = live();
    s.rpc("queue.bind '" + queue + "' to '" + exchange + "'", [&] {
        return amqp_queue_bind(s.conn(), kChannel, bytes_of(queue), bytes_of(exchange), bytes_of(routing_key),
                               amqp_empty_table);
    });
}

void Connection::bind_exchange(const std::string &destination, const std::string &source,
                               const std::string &routing_key) {
    Impl &s = live();
    s.rpc("exchange.bind '" + destination + "' to '" + source + "'", [&] {
        return amqp_exchange_bind(s.conn(), kChannel, bytes_of(destination), bytes_of(source), bytes_of(routing_key),
                                  amqp_empty_table);
    });
}

void Connection::confirm_select() {
    Impl &s = live();
    if (s.confirm) {
        return;
    }
    s.rpc("confirm.select", [&] { return amqp_confirm_select(s.conn(), kChannel); });
    s.confirm = true;
    s.next_tag = 1;
}

uint64_t Connection::publish(const std::string &exchange, const std::string &routing_key, bool mandatory,
                             const Properties &props, std::string_view body) {
    Impl &s = live();
    amqp_basic_properties_t p{};
    if (!props.content_type.empty()) {
        p._flags |= AMQP_BASIC_CONTENT_TYPE_FLAG;
        p.content_type = bytes_of(props.content_type);
    }
    if (!props.message_id.empty()) {
        p._flags |= AMQP_BASIC_MESSAGE_ID_FLAG;
        p.message_id = bytes_of(props.message_id);
    }
    if (!props.type.empty()) {
        p._flags |= AMQP_BASIC_TYPE_FLAG;
        p.type = bytes_of(props.type);
    }
    if (!props.correlation_id.empty()) {
        p._flags |= AMQP_BASIC_CORRELATION_ID_FLAG;
        p.correlation_id = bytes_of(props.correlation_id);
    }
    if (!props.app_id.empty()) {
        p._flags |= AMQP_BASIC_APP_ID_FLAG;
        p.app_id = bytes_of(props.app_id);
    }
    if (props.delivery_mode != 0) {
        p._flags |= AMQP_BASIC_DELIVERY_MODE_FLAG;
        p.delivery_mode = props.delivery_mode;
    }
    if (props.timestamp != 0) {
        p._flags |= AMQP_BASIC_TIMESTAMP_FLAG;
        p.timestamp = static_cast<uint64_t>(props.timestamp);
    }
    const EncodedTable headers(props.headers);
    if (!props.headers.empty()) {
        p._flags |= AMQP_BASIC_HEADERS_FLAG;
        p.headers = headers.get();
    }
    s.send("publish to '" + exchange + "'", [&] {
        return amqp_basic_publish(s.conn(), kChannel, bytes_of(exchange), bytes_of(routing_key), mandatory ? 1 : 0, 0,
                                  &p, bytes_of(body));
    });
    return s.confirm ? s.next_tag++ : 0;
}

void Connection::qos(uint16_t prefetch_count) {
    Impl &s = live();
    s.rpc("basic.qos", [&] { return amqp_basic_qos(s.conn(), kChannel, 0, prefetch_count, 0); });
}

std::string Connection::consume(const std::string &queue, bool no_ack, const std::string &consumer_tag) {
    Impl &s = live();
    const auto *ok = s.rpc("basic.consume '" + queue + "'", [&] {
        return amqp_basic_consume(s.conn(), kChannel, bytes_of(queue), bytes_of(consumer_tag), 0, no_ack ? 1 : 0, 0,
                                  amqp_empty_table);
    });
    return str_of(ok->consumer_tag);
}

void Connection::ack(uint64_t tag, bool multiple) {
    Impl &s = live();
    s.send("basic.ack", [&] { return amqp_basic_ack(s.conn(), kChannel, tag, multiple ? 1 : 0); });
}

void Connection::nack(uint64_t tag, bool multiple, bool requeue) {
    Impl &s = live();
    s.send("basic.nack", [&] { return amqp_basic_nack(s.conn(), kChannel, tag, multiple ? 1 : 0, requeue ? 1 : 0); });
}

void Connection::reject(uint64_t tag, bool requeue) {
    Impl &s = live();
    s.send("basic.reject", [&] { return amqp_basic_reject(s.conn(), kChannel, tag, requeue ? 1 : 0); });
}

std::optional<Event> Connection::wait(int timeout_ms) {
    Impl &s = live();
    if (timeout_ms < 0) {
        fail(Errc::invalid_argument, s.msg("wait timeout must be >= 0"));
    }
    const auto deadline = Clock::now() + milliseconds(timeout_ms);
    for (;;) {
        const auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now()).count();
        const int left_ms = static_cast<int>(std::max<long long>(0, left));
        timeval tv = tv_of(left_ms);
        amqp_frame_t frame{};
        // The frame wait may send a heartbeat, which is a send like any other.
        s.watchdog.arm(amqp_get_sockfd(s.conn()), static_cast<long long>(left_ms) + s.opts.io_timeout_ms);
        const int status = amqp_simple_wait_frame_noblock(s.conn(), &frame, &tv);
        const bool fired = s.watchdog.disarm();
        if (status == AMQP_STATUS_TIMEOUT && !fired) {
            return std::nullopt;
        }
        if (status != AMQP_STATUS_OK || fired) {
            s.lost(status, "waiting for the broker", fired);
        }
        std::optional<Event> ev = s.on_frame(frame); // copies everything out of the frame
        amqp_maybe_release_buffers(s.conn());
        if (ev) {
            return ev;
        }
    }
}

bool Connection::has_buffered_input() const {
    if (!impl_ || !impl_->state) {
        return false;
    }
    return amqp_frames_enqueued(impl_->conn()) != 0 || amqp_data_in_buffer(impl_->conn()) != 0;
}

bool Connection::blocked() const {
    return impl_ && impl_->is_blocked;
}
bool Connection::confirm_mode() const {
    return impl_ && impl_->confirm;
}
uint64_t Connection::next_publish_tag() const {
    return impl_ ? impl_->next_tag : 0;
}
bool Connection::alive() const {
    return impl_ && !impl_->dead;
}

int Connection::fd() const {
    if (!impl_ || !impl_->state) {
        return -1;
    }
    return amqp_get_sockfd(impl_->conn());
}

const std::string &Connection::redacted_url() const {
    static const std::string none;
    return impl_ ? impl_->redacted : none;
}

} // namespace outbox::amqp
