#include "config.hpp"

#include "error.hpp"
#include "identifiers.hpp"
#include "json.hpp"

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <functional>

namespace outbox {
namespace {

long long parse_int(const std::string &key, const std::string &v, long long lo, long long hi) {
    if (v.empty()) {
        fail(Errc::invalid_argument, key + ": expected an integer, got an empty value");
    }
    errno = 0;
    char *end = nullptr;
    long long n = std::strtoll(v.c_str(), &end, 10);
    if (errno != 0 || end == nullptr || *end != '\0') {
        fail(Errc::invalid_argument, key + ": expected an integer, got " + quote_input(v));
    }
    if (n < lo || n > hi) {
        fail(Errc::invalid_argument,
             key + ": " + v + " is out of range [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
    }
    return n;
}

bool parse_bool(const std::string &key, const std::string &v) {
    if (v == "1" || v == "true" || v == "yes" || v == "on") {
        return true;
    }
    if (v == "0" || v == "false" || v == "no" || v == "off") {
        return false;
    }
    fail(Errc::invalid_argument, key + ": expected true or false, got " + quote_input(v));
}

std::string format_map(const std::map<std::string, std::string> &m) {
    std::string out;
    for (const auto &[k, v] : m) {
        if (!out.empty()) {
            out += ",";
        }
        out += k + "=" + v;
    }
    return out;
}

struct Option {
    const char *key;
    const char *help;
    std::function<void(Config &, const std::string &, const std::string &)> set;
    std::function<std::string(const Config &)> get;
};

template <typename T> Option int_opt(const char *key, const char *help, T Config::*field, long long lo, long long hi) {
    return {key, help,
            [field, lo, hi](Config &c, const std::string &k, const std::string &v) {
                c.*field = static_cast<T>(parse_int(k, v, lo, hi));
            },
            [field](const Config &c) { return std::to_string(c.*field); }};
}

Option bool_opt(const char *key, const char *help, bool Config::*field) {
    return {key, help, [field](Config &c, const std::string &k, const std::string &v) { c.*field = parse_bool(k, v); },
            [field](const Config &c) { return std::string(c.*field ? "true" : "false"); }};
}

Option amqp_name_opt(const char *key, const char *help, std::string Config::*field, bool queue) {
    return {key, help,
            [field, queue](Config &c, const std::string &k, const std::string &v) {
                if (!v.empty() || !queue) {
                    validate_amqp_name(v, k.c_str(), queue);
                }
                c.*field = v;
            },
            [field](const Config &c) { return c.*field; }};
}

Option str_opt(const char *key, const char *help, std::string Config::*field, bool identifier = false,
               bool secret = false) {
    return {key, help,
            [field, identifier](Config &c, const std::string &k, const std::string &v) {
                if (identifier) {
                    ident::validate(v, k.c_str());
                }
                c.*field = v;
            },
            [field, secret](const Config &c) { return secret && !(c.*field).empty() ? std::string("***") : c.*field; }};
}

// The tables, events, rendering and PostgreSQL.
std::vector<Option> database_options() {
    return {
        str_opt("outbox.schema", "schema holding the tables (default public)", &Config::schema, true),
        str_opt("outbox.table", "outbox table name (default outbox)", &Config::table, true),
        str_opt("inbox.table", "consumer inbox table name (default outbox_inbox)", &Config::inbox_table, true),
        int_opt("event.max_payload_bytes", "largest payload accepted, in bytes (default 1048576)",
                &Config::max_payload_bytes, 1, 256LL * 1024 * 1024),
        {"event.type_map", "aggregate type to event name, e.g. PRD=Product,ORD=Order (default empty)",
         [](Config &c, const std::string &, const std::string &v) { c.type_map = parse_type_map(v); },
         [](const Config &c) { return format_map(c.type_map); }},
        {"render.placeholders",
         "placeholder style of rendered SQL: dollar ($1), qmark (?), format (%s), named (:p1) or pyformat "
         "(%(p1)s) (default dollar)",
         [](Config &c, const std::string &k, const std::string &v) {
             if (v != "dollar" && v != "qmark" && v != "format" && v != "named" && v != "pyformat") {
                 fail(Errc::invalid_argument,
                      k + ": expected dollar, qmark, format, named or pyformat, got " + quote_input(v));
             }
             c.placeholders = v;
         },
         [](const Config &c) { return c.placeholders; }},
        bool_opt("write.notify",
                 "writes NOTIFY relay.notify_channel so relays wake at once; costs a cluster-wide lock at "
                 "commit (default false)",
                 &Config::write_notify),
        str_opt("pg.url", "PostgreSQL connection URL or conninfo of the relay (env OUTBOX_PG_URL)", &Config::pg_url,
                false, true),
        int_opt("pg.connect_timeout_s", "PostgreSQL connect timeout in seconds (default 10)",
                &Config::pg_connect_timeout_s, 1, 3600),
    };
}

// RabbitMQ: addresses, the exchange, timeouts, TLS.
std::vector<Option> broker_options() {
    return {
        str_opt("amqp.url",
                "RabbitMQ URL, amqp:// or amqps://; the nodes of a cluster as a comma-separated list, tried in turn "
                "(env OUTBOX_AMQP_URL)",
                &Config::amqp_url, false, true),
        amqp_name_opt("amqp.exchange", "exchange events are published to (default corewrite.fanout)", &Config::exchange,
                      false),
        {"amqp.exchange_type", "type of the exchange when declared: fanout, topic, direct, headers (default fanout)",
         [](Config &c, const std::string &k, const std::string &v) {
             if (v != "fanout" && v != "topic" && v != "direct" && v != "headers") {
                 fail(Errc::invalid_argument, k + ": expected fanout, topic, direct or headers, got " + quote_input(v));
             }
             c.exchange_type = v;
         },
         [](const Config &c) { return c.exchange_type; }},
        bool_opt("amqp.exchange_declare", "declare the exchange (durable) on connect (default true)",
                 &Config::exchange_declare),
        int_opt("amqp.heartbeat_s", "AMQP heartbeat in seconds, 0 disables (default 30)", &Config::amqp_heartbeat_s, 0,
                3600),
        int_opt("amqp.connect_timeout_ms", "RabbitMQ connect timeout (default 5000)", &Config::amqp_connect_timeout_ms,
                1, 600000),
        int_opt("amqp.io_timeout_ms", "RabbitMQ socket write and RPC timeout (default 10000)",
                &Config::amqp_io_timeout_ms, 1, 600000),
        bool_opt("amqp.tls", "use TLS (implied by amqps://) (default false)", &Config::amqp_tls),
        str_opt("amqp.tls.ca", "CA bundle file for TLS", &Config::amqp_tls_ca),
        str_opt("amqp.tls.cert", "client certificate file for TLS", &Config::amqp_tls_cert),
        str_opt("amqp.tls.key", "client private key file for TLS", &Config::amqp_tls_key),
        bool_opt("amqp.tls.verify_peer", "verify the broker's certificate (default true)",
                 &Config::amqp_tls_verify_peer),
        bool_opt("amqp.tls.verify_hostname", "verify the broker's host name (default true)",
                 &Config::amqp_tls_verify_hostname),
    };
}

// The relay, the consumer and the inbox.
std::vector<Option> runtime_options() {
    return {
        int_opt("relay.batch_size", "events read per step (default 2000)", &Config::relay_batch_size, 1,
                max_receipt_span),
        int_opt("relay.window", "publisher-confirm window: unconfirmed messages in flight (default 512)",
                &Config::relay_window, 1, 65535),
        bool_opt("relay.overlap",
                 "outbox_relay_step() publishes the next batch while the confirms of its own come in, and "
                 "leaves it in flight for the next step or outbox_relay_settle() to record; outbox_relay_run() "
                 "always does (default false)",
                 &Config::relay_overlap),
        int_opt("relay.confirm_timeout_ms", "longest wait for the broker's confirms of a batch (default 15000)",
                &Config::relay_confirm_timeout_ms, 1, 3600000),
        int_opt("relay.backoff_base_ms", "first retry delay; doubles per attempt, with jitter (default 1000)",
                &Config::relay_backoff_base_ms, 0, 86400000),
        int_opt("relay.nack_retry_ms",
                "retry delay of a publish the broker nacked (an election, a full queue); not an attempt (default 250)",
                &Config::relay_nack_retry_ms, 0, 86400000),
        int_opt("relay.backoff_max_ms", "longest retry delay (default 300000)", &Config::relay_backoff_max_ms, 0,
                86400000),
        int_opt("relay.max_attempts", "attempts before an event becomes FAILED (default 10)",
                &Config::relay_max_attempts, 1, 1000000),
        bool_opt("relay.unroutable_is_failure", "a message no queue received counts as a failed publish (default true)",
                 &Config::relay_unroutable_is_failure),
        int_opt("relay.poll_interval_ms",
                "longest wait between polls of an idle relay, the fallback when no notification arrives; each "
                "idle poll is one statement (default 100)",
                &Config::relay_poll_interval_ms, 1, 3600000),
        int_opt("relay.busy_poll_ms",
                "after a step that found work, poll again this soon, for relay.linger_ms; then the interval "
                "doubles up to relay.poll_interval_ms (default 2)",
                &Config::relay_busy_poll_ms, 1, 3600000),
        int_opt("relay.linger_ms",
                "how long after the last event the relay keeps polling every relay.busy_poll_ms before "
                "backing off (default 1000)",
                &Config::relay_linger_ms, 0, 3600000),
        bool_opt("relay.listen", "wake up on LISTEN/NOTIFY (default true)", &Config::relay_listen),
        str_opt("relay.notify_channel", "NOTIFY channel name (default outbox_events)", &Config::notify_channel, true),
        amqp_name_opt("consumer.queue", "the consumer's durable queue (default: the consumer's name)",
                      &Config::consumer_queue, true),
        {"consumer.queue_type", "quorum (default; gives delivery counts) or classic",
         [](Config &c, const std::string &k, const std::string &v) {
             if (v != "quorum" && v != "classic") {
                 fail(Errc::invalid_argument, k + ": expected quorum or classic, got " + quote_input(v));
             }
             c.consumer_queue_type = v;
         },
         [](const Config &c) { return c.consumer_queue_type; }},
        int_opt("consumer.prefetch", "unacknowledged messages the broker sends ahead (default 32)",
                &Config::consumer_prefetch, 1, 65535),
        int_opt("consumer.delivery_limit",
                "deliveries of a failing message before it goes to the dead-letter queue (default 5)",
                &Config::consumer_delivery_limit, 1, 1000000),
        {"consumer.on_failure",
         "park (default): a failing event is retried from PostgreSQL with backoff, then its aggregate parked for "
         "an operator, never holding the queue; requeue: redelivered, dead-lettered at consumer.delivery_limit",
         [](Config &c, const std::string &k, const std::string &v) {
             if (v != "park" && v != "requeue") {
                 fail(Errc::invalid_argument, k + ": expected park or requeue, got " + quote_input(v));
             }
             c.consumer_park = v == "park";
         },
         [](const Config &c) { return std::string(c.consumer_park ? "park" : "requeue"); }},
        int_opt("consumer.max_attempts",
                "attempts of a failing event before its aggregate is parked (default 5)",
                &Config::consumer_max_attempts, 1, 1000000),
        int_opt("consumer.retry_initial_ms", "the wait before retrying a failed event, doubling per attempt (default 1000)",
                &Config::consumer_retry_initial_ms, 0, 86400000),
        int_opt("consumer.retry_max_ms", "the longest wait between retries of a failed event (default 300000)",
                &Config::consumer_retry_max_ms, 0, 86400000),
        int_opt("consumer.retry_poll_ms", "how often a consumer looks for retries that are due (default 500)",
                &Config::consumer_retry_poll_ms, 10, 3600000),
        amqp_name_opt("consumer.dead_letter_queue", "dead-letter queue (default <queue>.dead)",
                      &Config::consumer_dead_letter_queue, true),
        int_opt("consumer.max_body_bytes", "larger messages are dead-lettered unread (default 4194304)",
                &Config::consumer_max_body_bytes, 1, 512LL * 1024 * 1024),
        int_opt("consumer.partitions",
                "partition queues <queue>.p0.. this subscriber is split into by aggregate, shared by its "
                "instances; 0 = not partitioned (default 0); changing it is an operator procedure (README)",
                &Config::consumer_partitions, 0, 1024),
        amqp_name_opt("consumer.instance",
                      "this instance's name among a partitioned subscriber's instances (default host:pid:random)",
                      &Config::consumer_instance, false),
        int_opt("consumer.lease_ms",
                "a partitioned instance not heard from for this long is presumed gone and its partitions are "
                "taken over (default 5000)",
                &Config::consumer_lease_ms, 500, 3600000),
        bool_opt("inbox.order_check", "report out-of-order and gapped events per aggregate (default true)",
                 &Config::inbox_order_check),
        int_opt("inbox.retention_s",
                "inbox rows younger than this are never purged; must exceed the longest time a message can "
                "wait for redelivery (default 604800, 7 days)",
                &Config::inbox_retention_s, 0, 100LL * 365 * 24 * 3600),
        int_opt("inbox.partition_s",
                "width of one inbox partition in seconds (at least 60), by the time inside the event ids; purges "
                "drop whole partitions (default 86400, one day)",
                &Config::inbox_partition_s, 60, 366LL * 24 * 3600),
        int_opt("inbox.partitions_ahead",
                "inbox partitions kept made ahead of the current one by migrate and purge (default 3)",
                &Config::inbox_partitions_ahead, 1, 1000),
        int_opt("outbox.partition_events",
                "width of one outbox events partition in positions (events); retention drops whole partitions once "
                "every event in one is published (default 1000000)",
                &Config::outbox_partition_events, 100, 1000000000000LL),
        int_opt("outbox.partitions_ahead",
                "outbox events partitions kept made ahead of the one being written, by migrate and the relay "
                "(default 2)",
                &Config::outbox_partitions_ahead, 1, 1000),
        amqp_name_opt("relay.name", "name of this relay in logs and connection names (default outbox-relay)",
                      &Config::relay_name, false),
    };
}

// Every key, in the order --help lists them.
const std::vector<Option> &options() {
    static const std::vector<Option> opts = [] {
        std::vector<Option> all;
        for (auto part : {database_options(), broker_options(), runtime_options()}) {
            all.insert(all.end(), std::make_move_iterator(part.begin()), std::make_move_iterator(part.end()));
        }
        return all;
    }();
    return opts;
}

const Option *find(const std::string &key) {
    for (const auto &o : options()) {
        if (key == o.key) {
            return &o;
        }
    }
    return nullptr;
}

} // namespace

void validate_amqp_name(const std::string &name, const char *what, bool queue) {
    // 200 leaves room for the suffixes the consumer derives (".dead", ".dlx", the "outbox-"
    // consumer tag) within AMQP's 255-byte short strings.
    if (name.empty() || name.size() > 200) {
        fail(Errc::invalid_argument, std::string(what) + " must be 1 to 200 bytes");
    }
    if (!valid_utf8(name)) {
        fail(Errc::invalid_argument, std::string(what) + " is not valid UTF-8");
    }
    for (char ch : name) {
        auto c = static_cast<unsigned char>(ch);
        if (c < 0x20 || c == 0x7F) {
            fail(Errc::invalid_argument, std::string(what) + " must not contain control characters");
        }
    }
    if (queue && name.rfind("amq.", 0) == 0) {
        fail(Errc::invalid_argument, std::string(what) + " must not start with 'amq.' (reserved by the broker)");
    }
}

std::map<std::string, std::string> parse_type_map(const std::string &spec) {
    std::map<std::string, std::string> out;
    size_t pos = 0;
    while (pos <= spec.size()) {
        size_t comma = spec.find(',', pos);
        std::string item = spec.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
        pos = comma == std::string::npos ? spec.size() + 1 : comma + 1;
        if (item.empty()) {
            continue;
        }
        size_t eq = item.find('=');
        if (eq == std::string::npos || eq == 0 || eq + 1 == item.size()) {
            fail(Errc::invalid_argument, "event.type_map: expected TYPE=Name pairs, got " + quote_input(item));
        }
        const std::string name = item.substr(eq + 1);
        // The name becomes part of every event type (the message's `type` property and a text
        // column): printable UTF-8 only.
        validate_amqp_name(name, "event.type_map name", false);
        out[item.substr(0, eq)] = name;
    }
    return out;
}

void Config::set(const std::string &key, const std::string &value) {
    const Option *o = find(key);
    if (o == nullptr) {
        fail(Errc::unknown_key, "unknown configuration key " + quote_input(key));
    }
    // No option needs more; a longer value is a mistake that would otherwise fail late (or
    // travel into every connection attempt and log line).
    if (value.size() > max_value_bytes) {
        fail(Errc::invalid_argument, key + ": value is " + std::to_string(value.size()) + " bytes, over the limit of " +
                                         std::to_string(max_value_bytes));
    }
    if (value.find('\0') != std::string::npos || !valid_utf8(value)) {
        fail(Errc::invalid_argument, key + ": value must be UTF-8 text without NUL bytes");
    }
    o->set(*this, key, value);
}

std::string Config::get(const std::string &key) const {
    const Option *o = find(key);
    if (o == nullptr) {
        fail(Errc::unknown_key, "unknown configuration key " + quote_input(key));
    }
    return o->get(*this);
}

const std::vector<Config::KeyInfo> &Config::keys() {
    static const std::vector<KeyInfo> infos = [] {
        std::vector<KeyInfo> v;
        for (const auto &o : options()) {
            v.push_back({o.key, o.help});
        }
        return v;
    }();
    return infos;
}

void Config::require_pg_url(const std::string &who) const {
    if (pg_url.empty()) {
        fail(Errc::invalid_argument, who + " needs a PostgreSQL URL: set pg.url (the command line's --pg-url or "
                                           "OUTBOX_PG_URL)");
    }
}

void Config::require_amqp_url(const std::string &who) const {
    if (amqp_url.empty()) {
        fail(Errc::invalid_argument, who + " needs a RabbitMQ URL: set amqp.url (the command line's --amqp-url or "
                                           "OUTBOX_AMQP_URL); there is no default broker");
    }
}

void Config::apply_env(bool overwrite) {
    const auto from = [overwrite](std::string &field, const char *var) {
        const char *v = std::getenv(var);
        if (v != nullptr && *v != '\0' && (overwrite || field.empty())) {
            field = v;
        }
    };
    from(pg_url, "OUTBOX_PG_URL");
    from(amqp_url, "OUTBOX_AMQP_URL");
}

std::string Config::outbox_qualified() const {
    return ident::qualified(schema, table);
}
std::string Config::aggregates_qualified() const {
    return ident::qualified(schema, table + "_aggregates");
}
std::string Config::inbox_qualified() const {
    return ident::qualified(schema, inbox_table);
}
std::string Config::migrations_qualified() const {
    return ident::qualified(schema, "outbox_migrations");
}

} // namespace outbox
