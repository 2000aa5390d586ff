// Configuration: every option is a string key with a parser, a default and a line of help,
// so the C ABI (outbox_config_set), the CLI's flags and its --help all come from one table.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace outbox {

// The largest relay.batch_size, and the span every receipt stays under (the receipts table's CHECK
// and the monitoring view's search in core/schema.cpp use the same number).
inline constexpr int max_receipt_span = 100000;

struct Config {
    // Where the tables live.
    std::string schema = "public";
    std::string table = "outbox";
    std::string inbox_table = "outbox_inbox";

    // Events.
    size_t max_payload_bytes = 1024 * 1024;
    std::map<std::string, std::string> type_map; // aggregate type -> event name prefix (PRD -> Product)
    std::string placeholders = "dollar";         // of rendered SQL: dollar, qmark, format, named, pyformat
    bool write_notify = false;                   // writes also NOTIFY relay.notify_channel (see README: cost)

    // PostgreSQL (the relay's own connection; writers pass theirs).
    std::string pg_url;
    int pg_connect_timeout_s = 10;

    // RabbitMQ.
    std::string amqp_url; // none by default: a component that publishes or consumes refuses to start without one
    std::string exchange = "corewrite.fanout";
    std::string exchange_type = "fanout";
    bool exchange_declare = true;
    int amqp_heartbeat_s = 30;
    int amqp_connect_timeout_ms = 5000;
    int amqp_io_timeout_ms = 10000;
    bool amqp_tls = false;
    std::string amqp_tls_ca;
    std::string amqp_tls_cert;
    std::string amqp_tls_key;
    bool amqp_tls_verify_peer = true;
    bool amqp_tls_verify_hostname = true;

    // Relay.
    int relay_batch_size = 2000;
    int relay_window = 512;
    int relay_confirm_timeout_ms = 15000;
    int relay_backoff_base_ms = 1000;
    int relay_nack_retry_ms = 250;
    bool relay_overlap = false; // outbox_relay_step() carries the next batch (run() always does)
    int relay_backoff_max_ms = 300000;
    int relay_max_attempts = 10;
    bool relay_unroutable_is_failure = true;
    int relay_poll_interval_ms = 100;
    int relay_busy_poll_ms = 2;
    int relay_linger_ms = 1000;
    bool relay_listen = true;
    std::string notify_channel = "outbox_events";
    std::string relay_name = "outbox-relay";

    // Consumer runtime and inbox.
    std::string consumer_queue; // default: the consumer's name
    std::string consumer_queue_type = "quorum";
    int consumer_prefetch = 32;
    int consumer_delivery_limit = 5;
    bool consumer_park = true;              // consumer.on_failure: park (true) or requeue (the earlier way)
    int consumer_max_attempts = 5;          // attempts of a failing event before its aggregate is parked
    int64_t consumer_retry_initial_ms = 1000; // the wait after a first failure, doubling per attempt
    int64_t consumer_retry_max_ms = 300000;   // at most this
    int consumer_retry_poll_ms = 500;       // how often a loop looks for held aggregates whose retry is due
    std::string consumer_dead_letter_queue; // default: <queue>.dead
    size_t consumer_max_body_bytes = 4 * 1024 * 1024;
    // Partitioned subscribers (core/partitions.hpp): 0 = one queue, competing consumers.
    int consumer_partitions = 0;
    std::string consumer_instance; // default: host:pid:random, unique per Consumer
    int consumer_lease_ms = 5000;
    bool inbox_order_check = true;
    int64_t inbox_retention_s = 7 * 24 * 3600;
    // The inbox is range-partitioned by the time inside each event id (uuid v7): partitions this
    // many seconds wide, made this many ahead of the current one (core/inbox.hpp).
    int64_t inbox_partition_s = 24 * 3600;
    int inbox_partitions_ahead = 3;
    // The events table (storage version 2) is range-partitioned by position: partitions this many
    // positions wide, made this many ahead of the one being written (core/retention.hpp).
    int64_t outbox_partition_events = 1000000;
    int outbox_partitions_ahead = 2;

    // Longest value set() accepts, for any key.
    static constexpr size_t max_value_bytes = 64 * 1024;

    // Sets one option from its string form; throws Error(unknown_key) or Error(invalid_argument).
    void set(const std::string &key, const std::string &value);
    // The string form of one option; throws Error(unknown_key).
    [[nodiscard]] std::string get(const std::string &key) const;

    struct KeyInfo {
        const char *key;
        const char *help;
    };
    static const std::vector<KeyInfo> &keys();

    // Throw Error(invalid_argument) naming the key (and its environment variable) when no
    // PostgreSQL URL / RabbitMQ URL is configured; `who` starts the message ("the relay").
    void require_pg_url(const std::string &who) const;
    void require_amqp_url(const std::string &who) const;

    // The environment's defaults: pg.url from OUTBOX_PG_URL and amqp.url from OUTBOX_AMQP_URL
    // (when set and non-empty). `overwrite` false fills only a URL not yet configured.
    void apply_env(bool overwrite);

    // Derived names, always valid (set() validates schema and table names).
    [[nodiscard]] std::string outbox_qualified() const;
    [[nodiscard]] std::string aggregates_qualified() const;
    [[nodiscard]] std::string inbox_qualified() const;
    [[nodiscard]] std::string migrations_qualified() const;
};

// Names of exchanges, queues and consumers: 1..200 bytes of UTF-8 without control characters;
// queue names may not start with the broker's reserved "amq.". Throws Error(invalid_argument).
void validate_amqp_name(const std::string &name, const char *what, bool queue);

// "PRD=Product,ORD=Order" -> map; throws Error(invalid_argument).
std::map<std::string, std::string> parse_type_map(const std::string &spec);

} // namespace outbox
