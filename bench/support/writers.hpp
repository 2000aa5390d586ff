// Writer threads: each with its own connection (outbox_db_open), one event per transaction. W
// drives them itself (bench/scenarios/writes.cpp); L and H through paced_writes.
#pragma once

#include "options.hpp"
#include "run.hpp"

#include <outbox.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace bench {

// One writer's connection: this run's schema and notify channel, write.notify as given, and one
// event with the given fields whose aggregate_id each write sets.
class WriterConn {
  public:
    WriterConn() = default;
    ~WriterConn();
    WriterConn(const WriterConn &) = delete;
    WriterConn &operator=(const WriterConn &) = delete;

    // "" when open; else what failed, with outbox_last_error().
    std::string open(const Run &run, bool notify, const std::vector<std::pair<const char *, std::string>> &fields);

    outbox_db *db = nullptr;
    outbox_event *ev = nullptr;

  private:
    outbox_config *cfg_ = nullptr;
};

// Lets writer threads that have connected start together: each arrives (or gives up), the starter
// waits for all of them, then releases them at once.
class StartLine {
  public:
    void arrive_and_wait();
    void give_up() { ready_.fetch_add(1); }
    void wait_for(int threads) const;
    void release() { go_.store(true); }

  private:
    std::atomic<int> ready_{0};
    std::atomic<bool> go_{false};
};

// L and H: paced so that event k starts at t0 + k / rate (open loop: a writer that falls behind does
// not sleep), or unpaced (rate 0) until `seconds` have passed. Event k gets aggregate id id_of(k);
// the steady-clock time after its COMMIT returned goes to commit_ns[k].
struct PacedWrites {
    long written = 0;
    double seconds = 0; // first start to last commit
    int64_t t0_ns = 0;  // the steady clock when event 0 was due (event k: t0_ns + k / rate)
    std::vector<int64_t> commit_ns;
};

// Fills in the aggregate id of event k.
using IdOf = std::function<void(std::string &out, long k)>;

// event_id_of, when given, fills in an explicit event id of event k (F: the handler knows k by it).
PacedWrites paced_writes(const Run &run, const Options &o, bool notify, double rate, double seconds, long cap,
                         const IdOf &id_of, const IdOf &event_id_of = nullptr);

} // namespace bench
