// `outbox console`: what the page shows, sampled every few seconds on a connection of its own
// through the public C API (outbox_stats, outbox_parked_summary, outbox_parked_list), with an hour
// of lag samples kept in memory for the plots.
//
// Lag, as the console defines it:
// - the relay's: outbox_stats' lag_s, the age of the oldest due PENDING event (0 when none is due);
// - a subscriber's: the age of the oldest work it holds back in PostgreSQL, i.e. seconds since the
//   first failure of its oldest retrying, redriving or parked aggregate (0 when it holds none).
//   Messages still waiting in its broker queue are not counted: the console reads no broker.
//
// Only named members of the library's JSON reach the page (a member the library adds later is not
// shown until the console names it); no call here reads an event's payload, and error texts have
// passwords in URLs and conninfo replaced by "***".
#pragma once

#include "capi.hpp"

#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace outbox::cli {

// `text` with the password of every scheme://user:password@ and of every password=... replaced
// by "***", and cut at `max` bytes (on a UTF-8 boundary).
std::string redact_text(const std::string &text, size_t max = 2000);

class Sampler {
  public:
    // `cfg` must outlive the sampler. `subscribers`: names always shown, held work or not.
    Sampler(const outbox_config *cfg, int interval_s, int max_rows, std::vector<std::string> subscribers);
    ~Sampler(); // stops the thread
    Sampler(const Sampler &) = delete;
    Sampler &operator=(const Sampler &) = delete;

    void start();
    // Samples again now (after an action), and waits at most 2 s for that sample.
    void refresh();
    // {"sampled_at", "sample_error", "stats", "summary", "parked", "subscribers", "history"} as JSON.
    [[nodiscard]] std::string state_json() const;

  private:
    struct Point {
        double t = 0;                      // Unix seconds
        double relay_lag = 0;              // outbox_stats lag_s
        std::map<std::string, double> lag; // per subscriber
    };
    void loop();
    void sample(outbox_db *db);
    [[nodiscard]] std::string history_json() const;

    const outbox_config *cfg_;
    int interval_s_;
    int max_rows_;
    std::vector<std::string> subscribers_;

    mutable std::mutex mu_;
    std::condition_variable cv_;
    bool stopping_ = false;
    bool wanted_ = false;  // refresh() asked for a sample
    bool busy_ = false;    // a sample is being taken
    uint64_t samples_ = 0; // samples taken (successful or not)
    std::condition_variable sampled_cv_;
    double sampled_at_ = 0;
    std::string error_;          // the last sample's failure, empty after a good one
    std::string stats_ = "null"; // JSON pieces of the last good sample
    std::string summary_ = "[]";
    std::string parked_ = "[]";
    std::string subs_ = "[]";
    std::deque<Point> history_;
    std::thread thread_;
};

} // namespace outbox::cli
