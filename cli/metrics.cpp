#include "metrics.hpp"

#include <httplib.h>

#include <cstdio>
#include <optional>

namespace outbox::cli {

namespace {

std::string num(double v) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.6g", v);
    return buf;
}

// A label value escapes \\, " and newline.
std::string label_value(const std::string &v) {
    std::string label;
    for (const char c : v) {
        if (c == '\\' || c == '"') {
            label += '\\';
        }
        label += c == '\n' ? std::string("\\n") : std::string(1, c);
    }
    return label;
}

} // namespace

Metrics::Metrics()
    : bounds_{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}, buckets_(bounds_.size() + 1, 0) {}

void Metrics::on_step(const outbox_relay_step_info &info) {
    std::lock_guard<std::mutex> lock(mu_);
    pg_up_ = info.pg_up != 0;
    amqp_up_ = info.amqp_up != 0;
    amqp_node_ = info.amqp_node != nullptr ? info.amqp_node : "";
    stepped_ = true;
    if (info.status != OUTBOX_OK) {
        ++step_errors_;
        const std::string why = info.error != nullptr ? info.error : "";
        last_error_ = std::string(outbox_status_name(info.status)) + (why.empty() ? "" : ": " + why);
        return;
    }
    const outbox_relay_stats &st = *info.stats;
    published_ += st.published;
    failed_ += st.failed;
    dead_ += st.dead;
    read_ += st.claimed; // outbox_relay_stats keeps version 1's name: events read
    ++steps_;
    last_error_.clear();
    if (st.claimed > 0) { // idle polls would drown the batch durations
        const double d = static_cast<double>(st.total_us) / 1e6;
        size_t i = 0;
        while (i < bounds_.size() && d > bounds_[i]) {
            ++i;
        }
        ++buckets_[i];
        duration_sum_ += d;
        ++duration_count_;
    }
}

void Metrics::set_lag(std::optional<double> lag_s, const std::string &error) {
    std::lock_guard<std::mutex> lock(mu_);
    lag_known_ = lag_s.has_value();
    lag_s_ = lag_s.value_or(lag_s_);
    lag_error_ = error;
}

void Metrics::set_parked(std::string text) {
    std::lock_guard<std::mutex> lock(mu_);
    parked_text_ = std::move(text);
}

std::string Metrics::render() const {
    std::lock_guard<std::mutex> lock(mu_);
    std::string o;
    auto counter = [&o](const char *name, const char *help, int64_t v) {
        o += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " counter\n" + name + " " +
             std::to_string(v) + "\n";
    };
    auto gauge = [&o](const char *name, const char *help, double v) {
        o += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " gauge\n" + name + " " + num(v) + "\n";
    };
    counter("outbox_events_published_total", "Events confirmed by the broker and recorded as published.", published_);
    counter("outbox_events_failed_total", "Publish attempts that failed (nacked, returned or rejected).", failed_);
    counter("outbox_events_dead_total", "Events that reached relay.max_attempts and became FAILED.", dead_);
    // Version 1's name, kept: dashboards and alerts read it.
    counter("outbox_events_claimed_total", "Events read by relay steps.", read_);
    counter("outbox_relay_steps_total", "Relay steps completed.", steps_);
    counter("outbox_relay_step_errors_total", "Relay steps that failed (a server error; retried with backoff).",
            step_errors_);
    o += "# HELP outbox_relay_batch_duration_seconds Duration of relay steps that read events.\n"
         "# TYPE outbox_relay_batch_duration_seconds histogram\n";
    int64_t cumulative = 0;
    for (size_t i = 0; i < bounds_.size(); ++i) {
        cumulative += buckets_[i];
        o += "outbox_relay_batch_duration_seconds_bucket{le=\"" + num(bounds_[i]) + "\"} " +
             std::to_string(cumulative) + "\n";
    }
    cumulative += buckets_.back();
    o += "outbox_relay_batch_duration_seconds_bucket{le=\"+Inf\"} " + std::to_string(cumulative) + "\n";
    o += "outbox_relay_batch_duration_seconds_sum " + num(duration_sum_) + "\n";
    o += "outbox_relay_batch_duration_seconds_count " + std::to_string(duration_count_) + "\n";
    gauge("outbox_lag_seconds", "Age of the oldest due PENDING event (0 when none is due).", lag_s_);
    gauge("outbox_pg_up", "1 when the relay's PostgreSQL connection works.", pg_up_ ? 1 : 0);
    gauge("outbox_amqp_up", "1 when the relay's RabbitMQ connection works.", amqp_up_ ? 1 : 0);
    if (!amqp_node_.empty()) {
        o += "# HELP outbox_amqp_node The RabbitMQ node (host:port) the relay is connected to, or was last.\n"
             "# TYPE outbox_amqp_node gauge\noutbox_amqp_node{node=\"" +
             label_value(amqp_node_) + "\"} 1\n";
    }
    gauge("outbox_relay_healthy", "1 when the last relay step succeeded (the reason is on /healthz).",
          stepped_ && last_error_.empty() ? 1 : 0);
    return o + parked_text_;
}

std::pair<int, std::string> Metrics::health(double max_lag_s) const {
    std::lock_guard<std::mutex> lock(mu_);
    if (!stepped_) {
        return {503, "starting: no relay step has completed yet"};
    }
    if (!last_error_.empty()) {
        return {503, "relay step failing: " + last_error_};
    }
    if (!lag_error_.empty()) {
        return {503, "cannot read the lag: " + lag_error_};
    }
    if (lag_known_ && lag_s_ > max_lag_s) {
        return {503, "lag " + num(lag_s_) + " s exceeds " + num(max_lag_s) + " s"};
    }
    return {200, "ok"};
}

MetricsServer::MetricsServer(Metrics &m, const outbox_config *cfg, const std::string &addr, double max_lag_s,
                             int lag_interval_ms)
    : m_(m), cfg_(cfg), max_lag_s_(max_lag_s), lag_interval_ms_(lag_interval_ms),
      server_(std::make_unique<httplib::Server>()) {
    const size_t colon = addr.rfind(':');
    if (colon == std::string::npos || colon == 0) {
        usage("--metrics-addr: expected HOST:PORT, got '" + addr + "'");
    }
    const std::string host = addr.substr(0, colon);
    int port = 0;
    try {
        port = std::stoi(addr.substr(colon + 1));
    } catch (const std::exception &) {
        port = -1;
    }
    if (port <= 0 || port > 65535) {
        usage("--metrics-addr: bad port in '" + addr + "'");
    }
    server_->Get("/metrics", [this](const httplib::Request &, httplib::Response &res) {
        res.set_content(m_.render(), "text/plain; version=0.0.4; charset=utf-8");
    });
    server_->Get("/healthz", [this](const httplib::Request &, httplib::Response &res) {
        auto [code, reason] = m_.health(max_lag_s_);
        res.status = code;
        res.set_content(reason + "\n", "text/plain; charset=utf-8");
    });
    if (!server_->bind_to_port(host, port)) {
        usage("--metrics-addr: cannot listen on " + addr);
    }
    http_thread_ = std::thread([this] { server_->listen_after_bind(); });
    lag_thread_ = std::thread([this] { lag_loop(); });
}

MetricsServer::~MetricsServer() {
    {
        std::lock_guard<std::mutex> lock(mu_);
        stopping_ = true;
    }
    cv_.notify_all();
    server_->stop();
    if (http_thread_.joinable()) {
        http_thread_.join();
    }
    if (lag_thread_.joinable()) {
        lag_thread_.join();
    }
}

void MetricsServer::lag_loop() {
    DbPtr db;
    std::unique_lock<std::mutex> lock(mu_);
    while (!stopping_) {
        lock.unlock();
        try {
            if (!db || outbox_db_tx_state(db.get()) == OUTBOX_TX_UNKNOWN) {
                db.reset();
                db = open_db(cfg_);
            }
            double lag = 0;
            check(outbox_lag(&lag, db.get()));
            m_.set_lag(lag);
            char *text = nullptr;
            if (outbox_metrics_text(&text, db.get()) == OUTBOX_OK) {
                m_.set_parked(text);
            }
            outbox_string_free(text);
        } catch (const std::exception &e) {
            db.reset();
            m_.set_lag(std::nullopt, e.what());
        }
        lock.lock();
        cv_.wait_for(lock, std::chrono::milliseconds(lag_interval_ms_), [this] { return stopping_; });
    }
}

} // namespace outbox::cli
