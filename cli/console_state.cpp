#include "console_state.hpp"

#include "common.hpp"

#include <cjson/cJSON.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <set>

namespace outbox::cli {

namespace {

using Json = std::unique_ptr<cJSON, void (*)(cJSON *)>;

Json parse(const char *text, const char *what) {
    Json doc(cJSON_Parse(text), cJSON_Delete);
    if (!doc) {
        throw Failure(OUTBOX_ERR_INTERNAL, std::string(what) + " returned JSON that does not parse");
    }
    return doc;
}

std::string print(const cJSON *doc) {
    char *text = cJSON_PrintUnformatted(doc);
    std::string out = text != nullptr ? text : "null";
    cJSON_free(text);
    return out;
}

// A copy of `from` with only the members named (those present).
cJSON *pick(const cJSON *from, std::initializer_list<const char *> names) {
    cJSON *out = cJSON_CreateObject();
    for (const char *name : names) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(from, name);
        if (v != nullptr) {
            cJSON_AddItemToObject(out, name, cJSON_Duplicate(v, 1));
        }
    }
    return out;
}

// A row's subscriber; "" for the relay's (consumer null).
std::string consumer_of(const cJSON *row) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(row, "consumer");
    return cJSON_IsString(v) ? v->valuestring : "";
}

double unix_now() {
    return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string fixed(double v, int decimals) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
    return buf;
}

bool starts_with_ci(const std::string &s, size_t at, const char *word) {
    for (size_t i = 0; word[i] != '\0'; ++i) {
        if (at + i >= s.size() || std::tolower(static_cast<unsigned char>(s[at + i])) != word[i]) {
            return false;
        }
    }
    return true;
}

// Where a secret that starts at `from` ends: at white space, a quote or a separator.
size_t secret_end(const std::string &s, size_t from, const char *stops) {
    size_t e = from;
    while (e < s.size() && std::isspace(static_cast<unsigned char>(s[e])) == 0 &&
           std::string(stops).find(s[e]) == std::string::npos) {
        ++e;
    }
    return e;
}

} // namespace

std::string redact_text(const std::string &text, size_t max) {
    std::string s = text;
    // scheme://user:password@host -> scheme://user:***@host
    for (size_t at = s.find("://"); at != std::string::npos; at = s.find("://", at + 3)) {
        const size_t start = at + 3;
        const size_t end = secret_end(s, start, "/?#\"'");
        const size_t amp = s.rfind('@', end == 0 ? 0 : end - 1);
        if (amp == std::string::npos || amp < start) {
            continue;
        }
        const size_t colon = s.find(':', start);
        if (colon != std::string::npos && colon < amp) {
            s.replace(colon + 1, amp - colon - 1, "***");
        }
    }
    // password=secret (conninfo, URL query) -> password=***
    for (size_t i = 0; i < s.size(); ++i) {
        if (starts_with_ci(s, i, "password=")) {
            const size_t from = i + 9;
            size_t end = secret_end(s, from, "&;\"'");
            if (from < s.size() && s[from] == '\'') { // conninfo's quoted value: to the closing quote
                end = from + 1;
                while (end < s.size() && s[end] != '\'') {
                    end += s[end] == '\\' ? 2 : 1;
                }
                end = std::min(end + 1, s.size());
            }
            s.replace(from, end - from, "***");
            i = from + 3;
        }
    }
    if (s.size() > max) {
        size_t cut = max;
        while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xC0) == 0x80) {
            --cut;
        }
        s = s.substr(0, cut) + "...";
    }
    return s;
}

Sampler::Sampler(const outbox_config *cfg, int interval_s, int max_rows, std::vector<std::string> subscribers)
    : cfg_(cfg), interval_s_(interval_s), max_rows_(max_rows), subscribers_(std::move(subscribers)) {}

Sampler::~Sampler() {
    {
        std::lock_guard<std::mutex> lock(mu_);
        stopping_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) {
        thread_.join();
    }
}

void Sampler::start() {
    thread_ = std::thread([this] { loop(); });
}

void Sampler::refresh() {
    std::unique_lock<std::mutex> lock(mu_);
    // A sample under way may have read the database before the action: wait for the one after it.
    const uint64_t target = samples_ + (busy_ ? 2 : 1);
    wanted_ = true;
    cv_.notify_all();
    sampled_cv_.wait_for(lock, std::chrono::seconds(2), [&] { return samples_ >= target || stopping_; });
}

void Sampler::loop() {
    DbPtr db;
    std::unique_lock<std::mutex> lock(mu_);
    while (!stopping_) {
        wanted_ = false;
        busy_ = true;
        lock.unlock();
        std::string error;
        try {
            if (!db || outbox_db_tx_state(db.get()) == OUTBOX_TX_UNKNOWN) {
                db.reset();
                db = open_db(cfg_);
            }
            sample(db.get());
        } catch (const std::exception &e) {
            db.reset();
            error = redact_text(e.what());
        }
        lock.lock();
        busy_ = false;
        error_ = error;
        ++samples_;
        sampled_cv_.notify_all();
        cv_.wait_for(lock, std::chrono::seconds(interval_s_), [this] { return stopping_ || wanted_; });
    }
}

void Sampler::sample(outbox_db *db) {
    char *raw = nullptr;
    check(outbox_stats(&raw, db));
    StringPtr stats_text(raw);
    check(outbox_parked_summary(&raw, db));
    StringPtr summary_text(raw);
    check(outbox_parked_list(&raw, db, nullptr, 1, max_rows_));
    StringPtr list_text(raw);
    const Json stats = parse(stats_text.get(), "outbox_stats");
    const Json summary = parse(summary_text.get(), "outbox_parked_summary");
    const Json list = parse(list_text.get(), "outbox_parked_list");

    Json stats_view(
        pick(stats.get(), {"pending", "pending_due", "failed", "oldest_pending_age_s", "lag_s", "relay_health",
                           "published_last_minute", "published_last_hour", "last_published_age_s"}),
        cJSON_Delete);
    Json summary_view(cJSON_CreateArray(), cJSON_Delete);
    std::map<std::string, const cJSON *> summary_of;
    const cJSON *row = nullptr;
    cJSON_ArrayForEach(row, summary.get()) {
        cJSON_AddItemToArray(summary_view.get(),
                             pick(row, {"consumer", "parked", "retrying", "oldest_parked_age_s", "lag_s"}));
        summary_of[consumer_of(row)] = row;
    }
    // Each subscriber's lag: outbox_parked_summary's (how far its newest processed event is behind
    // the newest published one), and at least the age of its oldest held aggregate.
    std::map<std::string, double> lag;
    for (const auto &[name, sub] : summary_of) {
        lag[name] = number(sub, "lag_s");
    }
    Json parked_view(cJSON_CreateArray(), cJSON_Delete);
    cJSON_ArrayForEach(row, list.get()) {
        cJSON *r = pick(row, {"consumer", "source", "aggregate_type", "aggregate_id", "state", "attempts",
                              "head_event_id", "head_event_type", "head_seq", "first_failed_at", "last_failed_at",
                              "next_attempt_at", "waiting", "parked_age_s"});
        const cJSON *err = cJSON_GetObjectItemCaseSensitive(row, "last_error");
        cJSON_AddItemToObject(r, "last_error",
                              cJSON_IsString(err) ? cJSON_CreateString(redact_text(err->valuestring).c_str())
                                                  : cJSON_CreateNull());
        cJSON_AddItemToArray(parked_view.get(), r);
        double &l = lag[consumer_of(row)];
        l = std::max(l, number(row, "parked_age_s"));
    }
    std::set<std::string> names(subscribers_.begin(), subscribers_.end());
    for (const auto &[name, _] : summary_of) {
        names.insert(name);
    }
    for (const auto &[name, _] : lag) {
        names.insert(name);
    }
    names.erase(""); // the relay is shown apart
    Json subs(cJSON_CreateArray(), cJSON_Delete);
    Point point;
    point.t = unix_now();
    point.relay_lag = number(stats.get(), "lag_s");
    for (const std::string &name : names) {
        cJSON *s = cJSON_CreateObject();
        cJSON_AddStringToObject(s, "name", name.c_str());
        cJSON_AddNumberToObject(s, "lag_s", lag[name]);
        const auto it = summary_of.find(name);
        cJSON_AddNumberToObject(s, "parked", it != summary_of.end() ? number(it->second, "parked") : 0);
        cJSON_AddNumberToObject(s, "retrying", it != summary_of.end() ? number(it->second, "retrying") : 0);
        cJSON_AddNumberToObject(s, "oldest_parked_age_s",
                                it != summary_of.end() ? number(it->second, "oldest_parked_age_s") : 0);
        cJSON_AddItemToArray(subs.get(), s);
        point.lag[name] = lag[name];
    }
    const auto relay = summary_of.find("");
    cJSON_AddNumberToObject(stats_view.get(), "parked_aggregates",
                            relay != summary_of.end() ? number(relay->second, "parked") : 0);
    cJSON_AddNumberToObject(stats_view.get(), "retrying_aggregates",
                            relay != summary_of.end() ? number(relay->second, "retrying") : 0);

    std::lock_guard<std::mutex> lock(mu_);
    sampled_at_ = point.t;
    stats_ = print(stats_view.get());
    summary_ = print(summary_view.get());
    parked_ = print(parked_view.get());
    subs_ = print(subs.get());
    history_.push_back(std::move(point));
    while (!history_.empty() && history_.front().t < sampled_at_ - 3600) {
        history_.pop_front();
    }
}

std::string Sampler::history_json() const {
    std::set<std::string> names;
    for (const Point &p : history_) {
        for (const auto &[name, _] : p.lag) {
            names.insert(name);
        }
    }
    std::string t, relay;
    std::map<std::string, std::string> series;
    for (const Point &p : history_) {
        t += (t.empty() ? "" : ",") + fixed(p.t, 1);
        relay += (relay.empty() ? "" : ",") + fixed(p.relay_lag, 1);
        for (const std::string &name : names) {
            const auto it = p.lag.find(name);
            std::string &s = series[name];
            s += (s.empty() ? "" : ",") + (it != p.lag.end() ? fixed(it->second, 1) : std::string("null"));
        }
    }
    std::string subs;
    for (const auto &[name, values] : series) {
        Json key(cJSON_CreateString(name.c_str()), cJSON_Delete);
        subs += (subs.empty() ? "" : ",") + print(key.get()) + ":[" + values + "]";
    }
    return "{\"window_s\":3600,\"interval_s\":" + std::to_string(interval_s_) + ",\"t\":[" + t + "],\"relay\":[" +
           relay + "],\"subscribers\":{" + subs + "}}";
}

std::string Sampler::state_json() const {
    std::lock_guard<std::mutex> lock(mu_);
    Json err(error_.empty() ? cJSON_CreateNull() : cJSON_CreateString(error_.c_str()), cJSON_Delete);
    return "{\"now\":" + fixed(unix_now(), 1) + ",\"sampled_at\":" + fixed(sampled_at_, 1) +
           ",\"sample_error\":" + print(err.get()) + ",\"stats\":" + stats_ + ",\"summary\":" + summary_ +
           ",\"subscribers\":" + subs_ + ",\"parked\":" + parked_ + ",\"history\":" + history_json() + "}";
}

} // namespace outbox::cli
