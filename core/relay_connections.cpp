// The relay's connections: its one PostgreSQL session (LISTEN, the relay lock) and its RabbitMQ
// connection (confirm mode, the next node of the list after a loss), opened on demand and dropped on failure.
#include "relay.hpp"

#include "relay_internal.hpp"

#include "connect.hpp"
#include "error.hpp"

#include <memory>
#include <mutex>
#include <string>

namespace outbox {

void Relay::ensure_pg() {
    std::optional<pg::Conn> &c = pg_;
    if (c && c->ok()) {
        return;
    }
    if (c) {
        log(LogLevel::warn, "PostgreSQL connection lost; reconnecting");
    }
    drop_pg();
    if (cfg_.pg_url.empty()) {
        fail(Errc::invalid_argument, "no PostgreSQL URL configured (pg.url)");
    }
    c.emplace(pg::Conn::open(cfg_.pg_url, cfg_.pg_connect_timeout_s, cfg_.relay_name));
    // The read is small and frequent: JIT compilation would cost more than it saves. The
    // relay's commits need not wait for the WAL flush: a record lost in a database crash only
    // means the event is published again (at-least-once), and WAL order loses only a suffix of
    // records, so per-aggregate order still holds.
    c->exec_simple("SET jit = off; SET synchronous_commit = off");
    if (cfg_.relay_listen) {
        c->exec_simple("LISTEN \"" + cfg_.notify_channel + "\"");
        listening_ = true;
    }
    pg_up_.store(true, std::memory_order_relaxed);
    log(LogLevel::info, "connected to PostgreSQL " + pg::redact_conninfo(cfg_.pg_url) +
                            (listening_ ? " (listening on " + cfg_.notify_channel + ")" : ""));
}

void Relay::ensure_amqp() {
    if (mq_ && mq_->alive()) {
        return;
    }
    if (mq_) {
        log(LogLevel::warn, "RabbitMQ connection lost; reconnecting");
    }
    drop_amqp();
    amqp::Options o = amqp_options(cfg_, cfg_.relay_name);
    o.first = broker_next_;
    auto conn = std::make_unique<amqp::Connection>(o);
    // After a loss the next connect starts at the next node of the list: a dead node is not tried first.
    broker_next_ = conn->address_index() + 1;
    {
        std::lock_guard<std::mutex> lock(node_mu_);
        amqp_node_ = conn->node();
    }
    if (cfg_.exchange_declare) {
        conn->declare_exchange(cfg_.exchange, cfg_.exchange_type, true, false);
    }
    conn->confirm_select();
    mq_ = std::move(conn);
    blocked_ = false;
    log(LogLevel::info, "connected to RabbitMQ node " + mq_->node() + " (" + amqp::redact_url(cfg_.amqp_url) +
                            "), exchange " + cfg_.exchange);
}

std::string Relay::amqp_node() const {
    std::lock_guard<std::mutex> lock(node_mu_);
    return amqp_node_;
}

void Relay::drop_pg() noexcept {
    if (pg_) {
        pg_.reset();
        listening_ = false;
        active_ = false; // the relay lock went with the connection
        prefetch_.reset();
    }
    round_.reset(); // what it was read with is reloaded with the relay lock
    pg_up_.store(false, std::memory_order_relaxed);
}

void Relay::drop_amqp() noexcept {
    abandon_next(); // its delivery tags went with the connection
    mq_.reset();
}

} // namespace outbox
