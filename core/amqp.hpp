// RabbitMQ access: one AMQP 0-9-1 connection with one channel, over librabbitmq-c (0.11), behind RAII.
// Where it lives: amqp.cpp (opening, the channel's methods, wait()), amqp_frames.cpp (frame
// decoding), amqp_urls.cpp (the address list), amqp_watchdog.* (the send watchdog); amqp_impl.hpp
// holds Connection::Impl and what they share; amqp_wire.* the table and property encoding.
//
// Everything that touches the network is bounded in time, because the relay must never hang on a
// broker that stopped answering (memory/disk alarm, SIGSTOP, a dead peer behind a NAT):
//  - connect by connect_timeout_ms; login, every RPC (declare, bind, qos, consume, confirm.select) by
//    io_timeout_ms;
//  - wait() by its timeout_ms;
//  - every send (publish, ack, the heartbeats wait() sends) by io_timeout_ms. librabbitmq 0.11 runs its
//    socket non-blocking and polls with an infinite deadline inside amqp_basic_publish, so a socket
//    send timeout has no effect; a per-connection watchdog thread shuts the socket down instead when a
//    send overruns, and the call fails with Errc::timeout.
//
// Errors: Errc::invalid_argument for bad URLs/options, Errc::connection for connect/login failures and a
// lost connection, Errc::broker for a channel.close/connection.close sent by the broker (message holds
// the reply code and text, e.g. "404 NOT_FOUND - no exchange 'x' in vhost '/'"), Errc::timeout for a
// bounded wait that ran out. The URL in a message is always redacted; the password never appears.
//
// After any error other than invalid_argument the Connection is dead: every further call throws
// Errc::connection (naming the first error), destruction is safe, and the caller reconnects by
// constructing a new Connection. (A channel error therefore costs a reconnect; they are configuration
// errors in this library's use — a missing exchange, an inequivalent declaration — not a hot path.)
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

namespace outbox::amqp {

struct Tls {
    bool enabled = false;  // also switched on by an amqps:// URL
    std::string ca_file;   // PEM bundle; empty: the system bundle (/etc/ssl/certs/ca-certificates.crt)
                           // because librabbitmq does not load OpenSSL's default trust store itself
    std::string cert_file; // client certificate (PEM) for mutual TLS; needs key_file
    std::string key_file;
    std::string key_password; // for an encrypted key_file; never logged
    bool verify_peer = true;
    bool verify_hostname = true; // librabbitmq 0.11 matches DNS names only: connect by name, not by IP
};

struct Options {
    // amqp://user:pass@host:port/vhost or amqps://...; vhost "/" is written %2f. Several nodes of a
    // cluster: a comma-separated list of such URLs (each with its own scheme, so TLS per address;
    // a comma inside a password is written %2C). They are tried in turn from `first`.
    std::string url;
    size_t first = 0; // the address of the list tried first (modulo its length)
    Tls tls;
    int heartbeat_s = 30;          // 0 disables heartbeats: a silent broker then goes unnoticed by wait()
    int connect_timeout_ms = 5000; // TCP connect (and TLS handshake)
    int io_timeout_ms = 10000;     // login, RPC replies, and any single send
    std::string connection_name;   // shown in rabbitmqctl list_connections / the management UI
};

// The addresses of a comma-separated list (spaces around them dropped, empty ones skipped).
std::vector<std::string> split_url_list(const std::string &urls);

// The URL with its password replaced by "***" (amqp://user:***@host/vhost). Works on malformed input
// too, so it is safe to put into any log or error message.
std::string redact_url(const std::string &url);

// Header and queue-argument values. Integers of any AMQP width decode to int64_t; longstr and byte
// arrays to std::string; values of other types (float, decimal, nested tables, arrays) are skipped.
using FieldValue = std::variant<std::string, int64_t, bool>;
using Table = std::vector<std::pair<std::string, FieldValue>>;

struct Properties {
    std::string content_type;
    std::string message_id;
    std::string type;
    std::string correlation_id;
    std::string app_id;
    uint8_t delivery_mode = 0; // 0 = unset, 1 = transient, 2 = persistent
    int64_t timestamp = 0;     // seconds since the epoch; 0 = unset
    Table headers;             // empty = unset
};

// basic.deliver with its content.
struct Message {
    uint64_t delivery_tag = 0;
    bool redelivered = false;
    std::string exchange;
    std::string routing_key;
    std::string consumer_tag;
    Properties props;
    std::string body;
};

// Publisher confirms. multiple=true confirms every tag up to and including `tag`.
struct Ack {
    uint64_t tag = 0;
    bool multiple = false;
};
struct Nack {
    uint64_t tag = 0;
    bool multiple = false;
};
// basic.return (an unroutable mandatory message) with its content; in confirm mode the broker sends it
// before the basic.ack of the same tag, so props.message_id tells which publish came back.
struct Returned {
    uint16_t reply_code = 0;
    std::string reply_text;
    std::string exchange;
    std::string routing_key;
    Properties props;
    std::string body;
};
// connection.blocked / connection.unblocked (resource alarm on the broker): while blocked, the broker does
// not read what the client sends; callers should stop publishing until Unblocked. RabbitMQ sends Blocked
// only after the connection published during the alarm, so the first publish into an alarm cannot be
// avoided: it is bounded by io_timeout_ms like any send.
struct Blocked {
    std::string reason;
};
struct Unblocked {};
// basic.cancel from the broker: the consumer is gone (its queue was deleted, or the node failed over).
struct Cancelled {
    std::string consumer_tag;
};

using Event = std::variant<Ack, Nack, Returned, Blocked, Unblocked, Message, Cancelled>;

// One connection, one channel (number 1). Not thread-safe: one thread uses it at a time (the watchdog
// thread it owns only ever shuts the socket down). Movable, not copyable; a moved-from Connection
// throws Errc::connection from every call. Not usable across fork().
//
// RPCs (declare, bind, purge, qos, consume, confirm_select...) may be called while confirms, returns or
// deliveries are outstanding: librabbitmq 0.11 queues the frames that arrive while it waits for an RPC
// reply, and wait() returns them afterwards, in order.
class Connection {
  public:
    // Opens the socket, logs in (advertising publisher_confirms, basic.nack, connection.blocked,
    // consumer_cancel_notify and authentication_failure_close) and opens channel 1.
    // Throws Error(invalid_argument) for a bad URL or options, Error(connection) when the broker cannot be
    // reached or refuses the login (with its reason, e.g. 403 ACCESS_REFUSED), Error(timeout).
    explicit Connection(Options options);
    ~Connection(); // polite connection.close when still alive, bounded by io_timeout_ms; never throws
    Connection(Connection &&) noexcept;
    Connection &operator=(Connection &&) noexcept;
    Connection(const Connection &) = delete;
    Connection &operator=(const Connection &) = delete;

    void declare_exchange(const std::string &name, const std::string &type, bool durable, bool auto_delete,
                          const Table &args = {});
    void delete_exchange(const std::string &name);
    // An empty name asks the broker to name the queue; returns the name.
    std::string declare_queue(const std::string &name, bool durable, bool exclusive, bool auto_delete,
                              const Table &args = {});
    void delete_queue(const std::string &name);
    // Returns how many messages were purged.
    uint32_t purge_queue(const std::string &name);
    void bind_queue(const std::string &queue, const std::string &exchange, const std::string &routing_key);
    // Exchange-to-exchange binding: what `source` routes also goes to `destination`.
    void bind_exchange(const std::string &destination, const std::string &source, const std::string &routing_key);

    // Publisher confirms: afterwards publish() numbers messages 1, 2, 3... and wait() reports Ack/Nack.
    void confirm_select();
    // Returns the delivery tag in confirm mode, 0 otherwise. The broker answers a bad exchange with a
    // channel.close that the next wait() (or RPC) reports as Error(broker).
    // On a plain TCP connection the message may wait in the connection's buffer until flush(),
    // wait() or any other call, which write it first.
    uint64_t publish(const std::string &exchange, const std::string &routing_key, bool mandatory,
                     const Properties &props, std::string_view body);
    // Writes what publish() gathered (a no-op when nothing waits).
    void flush();

    void qos(uint16_t prefetch_count);
    // Returns the consumer tag (the broker's when consumer_tag is empty).
    std::string consume(const std::string &queue, bool no_ack = false, const std::string &consumer_tag = "");
    void ack(uint64_t delivery_tag, bool multiple = false);
    void nack(uint64_t delivery_tag, bool multiple, bool requeue);
    void reject(uint64_t delivery_tag, bool requeue);

    // The next event, waiting at most timeout_ms (0 = only what is already there); nullopt on timeout.
    // Services heartbeats, so calling it repeatedly keeps an idle connection alive. Throws Error(broker)
    // on channel.close / connection.close from the broker (after answering with close-ok),
    // Error(connection) on a lost socket or a missed heartbeat, and Error(timeout) when a heartbeat it
    // has to send cannot go out within io_timeout_ms.
    std::optional<Event> wait(int timeout_ms);

    // True when frames are already buffered inside the library: poll() on fd() would not report them,
    // so callers that poll must call wait(0) first while this is true.
    [[nodiscard]] bool has_buffered_input() const;
    [[nodiscard]] bool blocked() const;
    [[nodiscard]] bool confirm_mode() const;
    [[nodiscard]] uint64_t next_publish_tag() const; // the tag the next publish() will get (confirm mode)
    [[nodiscard]] bool alive() const;                // false after any error: reconnect
    // The node this connection reached: its place in the address list and "host:port" (no
    // credentials), for logs and metrics.
    [[nodiscard]] size_t address_index() const;
    [[nodiscard]] std::string node() const;
    [[nodiscard]] int fd() const; // -1 once the socket is gone
    [[nodiscard]] const std::string &redacted_url() const;

  private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
    static std::unique_ptr<Impl> open(Options options); // one address
    Impl &live();                                       // the Impl, or throws Error(connection) when moved-from or dead
};

} // namespace outbox::amqp
