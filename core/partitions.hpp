// Partitioned subscribers: one subscriber, N instances, per-aggregate order kept.
//
// Topology (declared by every instance, idempotently):
//   <exchange> (fanout) ──exchange-to-exchange──> <queue>.partitions (x-consistent-hash,
//   hash-header outbox-partition-key) ──weight 1 each──> <queue>.p0 .. <queue>.p<P-1>
//   (quorum, x-single-active-consumer, dead letters to <queue>.dlx like the plain queue).
// The relay sets outbox-partition-key from the aggregate type and id, so all events of one
// aggregate land in one partition queue, in the order the relay published them.
//
// Spreading: live instances keep a row with a heartbeat in <inbox table>_members; each computes
// the same assignment from the sorted list of live instances (partition i belongs to the
// (i mod n)-th) and consumes only its own partitions. A row not refreshed within
// consumer.lease_ms is deleted by whichever instance sees it first; its partitions move.
//
// Why a handover never lets two instances handle one partition at once (the argument is
// structural; no step depends on timing):
//  1. The broker: a partition queue is single-active-consumer. Whatever the instances believe
//     about ownership, only one consumer of a queue receives at a time; an instance that starts
//     consuming a partition another still holds waits as a standby and receives nothing.
//  2. An instance gives a partition up only by closing its broker connection, never by
//     basic.cancel, and only between messages (next() is where ownership is re-read; the message
//     handed out before has been settled). Closing returns every unacknowledged message to the
//     head of its queue in the same step in which the broker activates the standby, so the
//     successor starts with the oldest unsettled message. (basic.cancel would activate the
//     standby while the cancelled consumer still holds its unacknowledged messages: not used.)
//  3. When the connection is lost under a handler (broker node failure, kill of the network,
//     an expired lease), the message in hand is redelivered to the successor while the old
//     handler may still run. Both handle it in a transaction that begins by inserting its
//     (consumer, event id) inbox row: the second blocks on the first's uncommitted row and then
//     finds it processed (or, after a rollback, processes it itself). The successor takes the
//     partition in queue order from that message on, so it cannot reach a later event of the
//     partition before the earlier one's effect is decided. Effects stay exactly once and in
//     per-aggregate order.
#pragma once

#include "amqp.hpp"
#include "config.hpp"
#include "pg.hpp"

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace outbox::partitions {

// <queue>.partitions and <queue>.p<i>.
std::string hash_exchange(const std::string &queue);
std::string partition_queue(const std::string &queue, int index);

// The partitions that belong to `me` among `members` (any order; sorted here): i with
// i mod n == position of me. Empty when me is not a member.
std::vector<int> assign(std::vector<std::string> members, const std::string &me, int partitions);

// A unique default instance name: host:pid:random.
std::string default_instance();

// Declares the hash exchange, its binding to the fanout exchange and the P partition queues.
// `declare_queue` declares one of the consumer's own queues (with its error for a queue that
// exists with other arguments). Throws Error(invalid_argument) when the broker lacks the
// consistent-hash exchange plugin.
void declare(amqp::Connection &conn, const Config &cfg, const std::string &queue, const std::string &dlx,
             const std::function<void(const std::string &, const amqp::Table &)> &declare_queue);

// Membership of one instance, on a PostgreSQL connection of its own (opened from pg.url), so a
// heartbeat never joins the handler's transaction.
class Membership {
  public:
    Membership(Config cfg, std::string consumer, std::string instance);
    ~Membership();
    Membership(const Membership &) = delete;
    Membership &operator=(const Membership &) = delete;

    // Refreshes the heartbeat and re-reads the live members when a heartbeat is due (every
    // lease/4) or when forced. Returns true when the owned set changed. Throws
    // Error(invalid_argument) when the subscriber is recorded with another partition count (at
    // the first tick); Error(connection/database) when PostgreSQL fails (the caller keeps what it
    // holds: the broker still keeps partitions exclusive). Live instances with another count are
    // left out of the assignment.
    bool tick(bool force = false);
    [[nodiscard]] const std::vector<int> &owned() const { return owned_; }
    [[nodiscard]] const std::vector<std::string> &members() const { return members_; }
    [[nodiscard]] const std::string &instance() const { return instance_; }
    // Deletes this instance's row so the others take its partitions at their next heartbeat.
    void leave() noexcept;

  private:
    void open();

    Config cfg_;
    std::string consumer_;
    std::string instance_;
    std::string members_table_;
    std::string sets_table_;
    std::optional<pg::Conn> conn_;
    std::chrono::steady_clock::time_point next_beat_{};
    std::vector<int> owned_;
    std::vector<std::string> members_;
    bool joined_ = false;
};

} // namespace outbox::partitions
