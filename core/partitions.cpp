#include "partitions.hpp"

#include "envelope.hpp"
#include "error.hpp"
#include "identifiers.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <optional>
#include <random>

namespace outbox::partitions {

std::string hash_exchange(const std::string &queue) {
    return queue + ".partitions";
}

std::string partition_queue(const std::string &queue, int index) {
    return queue + ".p" + std::to_string(index);
}

std::vector<int> assign(std::vector<std::string> members, const std::string &me, int partitions) {
    std::sort(members.begin(), members.end());
    members.erase(std::unique(members.begin(), members.end()), members.end());
    auto it = std::find(members.begin(), members.end(), me);
    std::vector<int> out;
    if (it == members.end()) {
        return out;
    }
    const auto n = static_cast<int>(members.size());
    const auto k = static_cast<int>(it - members.begin());
    for (int i = k; i < partitions; i += n) {
        out.push_back(i);
    }
    return out;
}

std::string default_instance() {
    char host[256] = {0};
    if (gethostname(host, sizeof host - 1) != 0) {
        host[0] = '\0';
    }
    std::random_device rd;
    const unsigned r = rd() & 0xffffffU;
    char suffix[16];
    std::snprintf(suffix, sizeof suffix, "%06x", r);
    return std::string(host[0] != '\0' ? host : "host") + ":" + std::to_string(getpid()) + ":" + suffix;
}

void declare(amqp::Connection &conn, const Config &cfg, const std::string &queue, const std::string &dlx,
             const std::function<void(const std::string &, const amqp::Table &)> &declare_queue) {
    const std::string hx = hash_exchange(queue);
    try {
        conn.declare_exchange(hx, "x-consistent-hash", true, false,
                              {{"hash-header", std::string(kPartitionKeyHeader)}});
    } catch (const Error &e) {
        const std::string what = e.what();
        if (e.code() == Errc::broker && what.find("x-consistent-hash") != std::string::npos &&
            (what.find(" 503 ") != std::string::npos || what.find("invalid exchange type") != std::string::npos ||
             what.find("unknown exchange type") != std::string::npos)) {
            fail(Errc::invalid_argument, "consumer.partitions needs RabbitMQ's consistent-hash exchange: enable the "
                                         "rabbitmq_consistent_hash_exchange plugin (" +
                                             what + ")");
        }
        throw;
    }
    conn.bind_exchange(hx, cfg.exchange, "");
    amqp::Table args{{"x-queue-type", std::string("quorum")},
                     {"x-single-active-consumer", true},
                     {"x-dead-letter-exchange", dlx},
                     {"x-delivery-limit", int64_t{cfg.consumer_delivery_limit}}};
    for (int i = 0; i < cfg.consumer_partitions; ++i) {
        const std::string q = partition_queue(queue, i);
        declare_queue(q, args);
        // Equal weights: the exchange's jump consistent hash spreads keys evenly over the queues.
        conn.bind_queue(q, hx, "1");
    }
}

Membership::Membership(Config cfg, std::string consumer, std::string instance)
    : cfg_(std::move(cfg)), consumer_(std::move(consumer)), instance_(std::move(instance)) {
    members_table_ = ident::qualified(cfg_.schema, cfg_.inbox_table + "_members");
    sets_table_ = ident::qualified(cfg_.schema, cfg_.inbox_table + "_partitionings");
}

Membership::~Membership() {
    leave();
}

void Membership::open() {
    if (cfg_.pg_url.empty()) {
        fail(Errc::invalid_argument, "a partitioned consumer (consumer.partitions > 0) needs pg.url for its "
                                     "membership heartbeats");
    }
    conn_.emplace(pg::Conn::open(cfg_.pg_url, cfg_.pg_connect_timeout_s, "outbox-members " + consumer_));
    // The partition count is recorded once per subscriber. Another count would route one
    // aggregate's events to two queues during the change; that is the operator procedure
    // (README: drain, rebind, resume), never a silent mix.
    //
    // The instances of a new subscriber start together (a deployment's replicas): this insert
    // then waits for another instance's uncommitted row and, once that commits, does nothing.
    // The row is newer than the insert's snapshot, so no part of the same statement can read
    // it: it is read by a statement of its own, with a snapshot taken after that commit (the
    // connection is in autocommit, whatever its isolation level). Should the record be deleted
    // in between (an operator changing the count), it is recorded again.
    const std::string count = std::to_string(cfg_.consumer_partitions);
    std::optional<long long> found;
    for (int attempt = 0; attempt < 3 && !found; ++attempt) {
        pg::Result ins = conn_->exec("INSERT INTO " + sets_table_ +
                                         " (consumer, partitions) VALUES ($1, CAST($2 AS integer))"
                                         " ON CONFLICT (consumer) DO NOTHING RETURNING partitions",
                                     {consumer_, count});
        if (ins.rows() > 0) {
            found = ins.get_int(0, 0);
            continue;
        }
        pg::Result sel = conn_->exec("SELECT partitions FROM " + sets_table_ + " WHERE consumer = $1", {consumer_});
        if (sel.rows() > 0) {
            found = sel.get_int(0, 0);
        }
    }
    if (!found) {
        fail(Errc::database,
             "could not record the partition count of " + consumer_ + ": its record was deleted each time it was read");
    }
    const long long recorded = *found;
    if (recorded != cfg_.consumer_partitions) {
        conn_.reset();
        fail(Errc::invalid_argument,
             "subscriber " + consumer_ + " is partitioned into " + std::to_string(recorded) +
                 " partitions, not consumer.partitions=" + std::to_string(cfg_.consumer_partitions) +
                 ". Changing the partition count is an operator procedure (README, \"Changing the partition "
                 "count\": drain, rebind, resume); until then run every instance with consumer.partitions=" +
                 std::to_string(recorded));
    }
}

bool Membership::tick(bool force) {
    const auto now = std::chrono::steady_clock::now();
    if (!force && conn_ && now < next_beat_) {
        return false;
    }
    if (conn_ && !conn_->ok()) {
        conn_.reset();
    }
    try {
        if (!conn_) {
            open();
        }
        const std::string lease = std::to_string(cfg_.consumer_lease_ms);
        // Heartbeat, forget the instances whose lease ran out, read the live ones: one
        // transaction, times from the database's clock only (no skew between hosts).
        conn_->exec_simple("BEGIN");
        conn_->exec("INSERT INTO " + members_table_ +
                        " (consumer, instance, partitions) VALUES ($1, $2, CAST($3 AS integer))"
                        " ON CONFLICT (consumer, instance) DO UPDATE SET heartbeat_at = now(),"
                        " partitions = EXCLUDED.partitions",
                    {consumer_, instance_, std::to_string(cfg_.consumer_partitions)});
        conn_->exec("DELETE FROM " + members_table_ +
                        " WHERE consumer = $1 AND heartbeat_at < now() - CAST($2 AS bigint) * interval '1 millisecond'",
                    {consumer_, lease});
        pg::Result r = conn_->exec("SELECT instance, partitions FROM " + members_table_ +
                                       " WHERE consumer = $1 ORDER BY instance",
                                   {consumer_});
        conn_->exec_simple("COMMIT");
        std::vector<std::string> members;
        for (int i = 0; i < r.rows(); ++i) {
            // An instance with another count cannot get here past open() while the count is
            // recorded; one started while an operator had deleted the record is left out of
            // the assignment rather than stopping the instances that run with the recorded one.
            if (r.get_int(i, 1) == cfg_.consumer_partitions) {
                members.push_back(std::string(r.get(i, 0)));
            }
        }
        joined_ = true;
        next_beat_ = now + std::chrono::milliseconds(std::max(cfg_.consumer_lease_ms / 4, 50));
        std::vector<int> owned = assign(members, instance_, cfg_.consumer_partitions);
        members_ = std::move(members);
        if (owned != owned_) {
            owned_ = std::move(owned);
            return true;
        }
        return false;
    } catch (...) {
        if (conn_ && conn_->ok() && conn_->tx_status() != PQTRANS_IDLE) {
            conn_->rollback_quietly();
        }
        throw;
    }
}

void Membership::leave() noexcept {
    if (!joined_ || !conn_ || !conn_->ok()) {
        return;
    }
    try {
        conn_->exec("DELETE FROM " + members_table_ + " WHERE consumer = $1 AND instance = $2", {consumer_, instance_});
    } catch (...) { // NOLINT(bugprone-empty-catch): best effort; the lease expires anyway
    }
    joined_ = false;
}

} // namespace outbox::partitions
