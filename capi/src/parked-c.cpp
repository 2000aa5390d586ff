// The C face of core/held: the operator's list, redrive, skip and summary of parked aggregates.
#include "capi.hpp"

#include "held.hpp"
#include "json.hpp"

#include <cstdio>

using outbox::capi::guard;

namespace {

std::string text(const char *s) {
    return s != nullptr ? s : "";
}

std::string summary_json(const std::vector<outbox::held::Summary> &rows) {
    std::string s = "[";
    for (const auto &r : rows) {
        s += s.size() > 1 ? ",{\"consumer\":" : "{\"consumer\":";
        if (r.consumer.empty()) {
            s += "null";
        } else {
            outbox::json::append_string(s, r.consumer);
        }
        char age[40], lag[40];
        std::snprintf(age, sizeof age, "%.3f", r.oldest_parked_age_s);
        std::snprintf(lag, sizeof lag, "%.3f", r.lag_s);
        s += ",\"parked\":" + std::to_string(r.parked) + ",\"retrying\":" + std::to_string(r.retrying) +
             ",\"oldest_parked_age_s\":" + age + (r.consumer.empty() ? ",\"oldest_unpublished_age_s\":" : ",\"lag_s\":") +
             lag + "}";
    }
    return s + "]";
}

} // namespace

extern "C" {

outbox_status outbox_parked_list(char **json_out, outbox_db *db, const char *consumer, int include_relay, int limit) {
    OUTBOX_REQUIRE(json_out);
    *json_out = nullptr;
    OUTBOX_REQUIRE(db);
    return guard([&] {
        auto rows = outbox::held::list(db->conn, db->cfg, text(consumer), include_relay != 0, limit);
        *json_out = outbox::capi::dup_string(outbox::held::to_json(rows));
    });
}

outbox_status outbox_parked_redrive(int64_t *redriven, outbox_db *db, const char *consumer,
                                    const char *aggregate_type, const char *aggregate_id) {
    if (redriven != nullptr) {
        *redriven = 0;
    }
    OUTBOX_REQUIRE(db);
    return guard([&] {
        int64_t n = outbox::held::redrive(db->conn, db->cfg, text(consumer), {text(aggregate_type), text(aggregate_id)});
        if (redriven != nullptr) {
            *redriven = n;
        }
    });
}

outbox_status outbox_parked_redrive_all(int64_t *redriven, outbox_db *db, const char *consumer) {
    if (redriven != nullptr) {
        *redriven = 0;
    }
    OUTBOX_REQUIRE(db);
    return guard([&] {
        int64_t n = outbox::held::redrive_all(db->conn, db->cfg, text(consumer));
        if (redriven != nullptr) {
            *redriven = n;
        }
    });
}

outbox_status outbox_parked_skip(char **skipped_id, outbox_db *db, const char *consumer, const char *aggregate_type,
                                 const char *aggregate_id, const char *event_id, const char *by, const char *reason) {
    if (skipped_id != nullptr) {
        *skipped_id = nullptr;
    }
    OUTBOX_REQUIRE(db);
    return guard([&] {
        std::string id = outbox::held::skip(db->conn, db->cfg, text(consumer), {text(aggregate_type), text(aggregate_id)},
                                            text(event_id), text(by), text(reason));
        if (skipped_id != nullptr) {
            *skipped_id = outbox::capi::dup_string(id);
        }
    });
}

outbox_status outbox_metrics_text(char **text_out, outbox_db *db) {
    OUTBOX_REQUIRE(text_out);
    *text_out = nullptr;
    OUTBOX_REQUIRE(db);
    return guard([&] {
        *text_out = outbox::capi::dup_string(outbox::held::metrics_text(outbox::held::summary(db->conn, db->cfg)));
    });
}

outbox_status outbox_parked_summary(char **json_out, outbox_db *db) {
    OUTBOX_REQUIRE(json_out);
    *json_out = nullptr;
    OUTBOX_REQUIRE(db);
    return guard([&] { *json_out = outbox::capi::dup_string(summary_json(outbox::held::summary(db->conn, db->cfg))); });
}

} // extern "C"
