// The connection and its channel: opening (the address list, socket, TLS, login), the channel's
// methods (declare, bind, publish, consume, ack), wait() for the broker's events, and its state.
#include "amqp.hpp"

#include "amqp_impl.hpp"

#include <amqp.h>
#include <amqp_ssl_socket.h>
#include <amqp_tcp_socket.h>

#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>

namespace outbox::amqp {

namespace {

using std::chrono::milliseconds;

constexpr const char *kSystemCaBundle = "/etc/ssl/certs/ca-certificates.crt";

timeval tv_of(int ms) {
    timeval tv{};
    tv.tv_sec = ms / 1000;
    tv.tv_usec = static_cast<suseconds_t>(ms % 1000) * 1000;
    return tv;
}

} // namespace

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
    s.plain_tcp = !tls;
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
    const auto what = [&] { return "publish to '" + exchange + "'"; }; // built only when needed
    if (s.plain_tcp && s.heartbeat_expired()) { // as send() does: a silent broker fails the publish at once
        s.lost(AMQP_STATUS_HEARTBEAT_TIMEOUT, what(), false);
    }
    if (s.plain_tcp && s.encode_publish(exchange, routing_key, mandatory, p, body)) {
        if (s.outgoing.size() >= kFlushBytes) {
            s.flush(what());
        }
    } else {
        s.send(what(), [&] {
            return amqp_basic_publish(s.conn(), kChannel, bytes_of(exchange), bytes_of(routing_key), mandatory ? 1 : 0,
                                      0, &p, bytes_of(body));
        });
    }
    return s.confirm ? s.next_tag++ : 0;
}

void Connection::flush() {
    Impl &s = live();
    s.flush("publish");
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
    s.flush("waiting for the broker");
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
