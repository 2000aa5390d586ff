// The gauges an operator alerts on, as Prometheus text (core/held.hpp): the relay's /metrics and
// any consumer process's own /metrics (outbox_metrics_text) render them here, once.
#include "held.hpp"

#include <cstdio>

namespace outbox::held {
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

std::string metrics_text(const std::vector<Summary> &rows) {
    std::string o;
    auto family = [&](const char *name, const char *help, auto field, bool relay) {
        o += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " gauge\n";
        for (const Summary &s : rows) {
            if (s.consumer.empty() == relay) {
                o += name + (relay ? std::string() : "{subscriber=\"" + label_value(s.consumer) + "\"}") + " " +
                     num(static_cast<double>(s.*field)) + "\n";
            }
        }
    };
    family("outbox_parked_aggregates", "Aggregates of a subscriber parked until an operator redrives or skips them.",
           &Summary::parked, false);
    family("outbox_retrying_aggregates", "Aggregates of a subscriber held while their failed head is retried.",
           &Summary::retrying, false);
    family("outbox_oldest_parked_age_seconds", "Age of a subscriber's oldest parked aggregate (0 when none).",
           &Summary::oldest_parked_age_s, false);
    family("outbox_subscriber_lag_seconds",
           "How far the newest event a subscriber processed is behind the newest one published, in event time.",
           &Summary::lag_s, false);
    family("outbox_relay_parked_aggregates", "Aggregates the relay parked (FAILED events, and those behind them).",
           &Summary::parked, true);
    family("outbox_relay_oldest_parked_age_seconds", "Age of the relay's oldest parked aggregate (0 when none).",
           &Summary::oldest_parked_age_s, true);
    family("outbox_oldest_unpublished_age_seconds", "Age of the oldest event not yet published (0 when none).",
           &Summary::lag_s, true);
    return o;
}

} // namespace outbox::held
