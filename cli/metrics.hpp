// `outbox relay --metrics-addr HOST:PORT`: Prometheus text-format metrics and /healthz, served by
// cpp-httplib on a thread of its own. The relay thread feeds a Metrics object through the relay's
// per-step callback (outbox_relay_set_step_callback); the HTTP thread only reads it, under its
// mutex. Nothing here touches the relay itself.
#pragma once

#include "capi.hpp"

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace httplib {
class Server;
}

namespace outbox::cli {

class Metrics {
  public:
    Metrics();
    // From the relay thread: what a step came to, successful or not.
    void on_step(const outbox_relay_step_info &info);
    // From the lag thread: nullopt when the lag query failed.
    void set_lag(std::optional<double> lag_s, const std::string &error = {});
    // From the lag thread: outbox_metrics_text (held aggregates and lag per subscriber, the relay's).
    void set_parked(std::string text);

    // Prometheus text exposition format 0.0.4.
    [[nodiscard]] std::string render() const;
    // 200 "ok", or 503 with the reason.
    [[nodiscard]] std::pair<int, std::string> health(double max_lag_s) const;

  private:
    mutable std::mutex mu_;
    int64_t published_ = 0, failed_ = 0, dead_ = 0, read_ = 0, steps_ = 0, step_errors_ = 0;
    std::vector<double> bounds_;
    std::vector<int64_t> buckets_; // non-cumulative counts per bound, + the +Inf bucket at the end
    double duration_sum_ = 0;
    int64_t duration_count_ = 0;
    double lag_s_ = 0;
    bool lag_known_ = false;
    std::string lag_error_;
    bool pg_up_ = false, amqp_up_ = false;
    std::string amqp_node_;
    bool stepped_ = false;
    std::string last_error_; // empty after a successful step
    std::string parked_text_; // outbox_metrics_text, as the library renders it
};

// Serves /metrics and /healthz on addr ("127.0.0.1:9187"), and refreshes the lag gauge every
// lag_interval_ms with a small query on a connection of its own.
class MetricsServer {
  public:
    // `cfg` (its pg.url) must outlive the server; it is only read.
    MetricsServer(Metrics &m, const outbox_config *cfg, const std::string &addr, double max_lag_s,
                  int lag_interval_ms = 5000);
    ~MetricsServer(); // stops both threads
    MetricsServer(const MetricsServer &) = delete;
    MetricsServer &operator=(const MetricsServer &) = delete;

  private:
    void lag_loop();
    Metrics &m_;
    const outbox_config *cfg_;
    double max_lag_s_;
    int lag_interval_ms_;
    std::unique_ptr<httplib::Server> server_;
    std::thread http_thread_;
    std::thread lag_thread_;
    std::mutex mu_;
    std::condition_variable cv_;
    bool stopping_ = false;
};

} // namespace outbox::cli
