#include "parked.hpp"

#include "capi.hpp"

#include <cjson/cJSON.h>

#include <pwd.h>
#include <unistd.h>

#include <cstdio>
#include <memory>
#include <utility>

namespace outbox::cli {
namespace {

const char *opt(const std::string &s) {
    return s.empty() ? nullptr : s.c_str();
}

// "TYPE:ID" (":ID" for an event held without an aggregate: its id).
std::pair<std::string, std::string> split_aggregate(const std::string &a) {
    const size_t colon = a.find(':');
    if (colon == std::string::npos || colon + 1 == a.size()) {
        usage("--aggregate: expected TYPE:ID, got '" + a + "'");
    }
    return {a.substr(0, colon), a.substr(colon + 1)};
}

std::string text_of(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (cJSON_IsString(v)) {
        return v->valuestring;
    }
    if (cJSON_IsNumber(v)) {
        char buf[32];
        std::snprintf(buf, sizeof buf, "%.0f", v->valuedouble);
        return buf;
    }
    return "-";
}

// Control characters of event data (errors, ids) are not sent to the terminal as they are.
std::string printable(std::string s, size_t max) {
    for (char &ch : s) {
        if (static_cast<unsigned char>(ch) < 0x20 || ch == 0x7f) {
            ch = ' ';
        }
    }
    return s.size() > max ? s.substr(0, max - 3) + "..." : s;
}

int run_list(const ParkedCommands &c, outbox_db *db) {
    char *raw = nullptr;
    check(outbox_parked_list(&raw, db, opt(c.consumer), c.no_relay ? 0 : 1, c.limit));
    StringPtr json(raw);
    if (c.opts.json) {
        std::printf("%s\n", json.get());
        return 0;
    }
    std::unique_ptr<cJSON, void (*)(cJSON *)> rows(cJSON_Parse(json.get()), cJSON_Delete);
    if (cJSON_GetArraySize(rows.get()) == 0) {
        std::printf("no parked or retrying aggregates\n");
        return 0;
    }
    std::printf("%-20s %-28s %-9s %8s %7s %9s  %-36s %s\n", "CONSUMER", "AGGREGATE", "STATE", "ATTEMPTS", "WAITING",
                "AGE", "HEAD EVENT", "LAST ERROR");
    const cJSON *r = nullptr;
    cJSON_ArrayForEach(r, rows.get()) {
        const std::string consumer = text_of(r, "consumer") == "-" ? "(relay)" : text_of(r, "consumer");
        const std::string agg = text_of(r, "aggregate_type") + ":" + text_of(r, "aggregate_id");
        const cJSON *age = cJSON_GetObjectItemCaseSensitive(r, "parked_age_s");
        std::printf("%-20s %-28s %-9s %8s %7s %8.0fs  %-36s %s\n", printable(consumer, 20).c_str(),
                    printable(agg, 28).c_str(), text_of(r, "state").c_str(), text_of(r, "attempts").c_str(),
                    text_of(r, "waiting").c_str(), cJSON_IsNumber(age) ? age->valuedouble : 0.0,
                    text_of(r, "head_event_id").c_str(), printable(text_of(r, "last_error"), 80).c_str());
    }
    return 0;
}

int run_redrive(const ParkedCommands &c, outbox_db *db) {
    int64_t n = 0;
    if (c.all) {
        if (c.consumer.empty() || !c.aggregate.empty()) {
            usage("redrive --all needs --consumer and no --aggregate");
        }
        check(outbox_parked_redrive_all(&n, db, c.consumer.c_str()));
    } else {
        if (c.aggregate.empty() || c.consumer.empty() == !c.relay) {
            usage("redrive needs --aggregate TYPE:ID and either --consumer NAME or --relay (or --consumer NAME --all)");
        }
        const auto [type, id] = split_aggregate(c.aggregate);
        check(outbox_parked_redrive(&n, db, c.relay ? nullptr : c.consumer.c_str(), type.c_str(), id.c_str()));
    }
    if (c.opts.json) {
        std::printf("{\"redriven\":%lld}\n", static_cast<long long>(n));
    } else {
        std::printf("redriven %lld aggregate(s): the running %s tr%s the head now\n", static_cast<long long>(n),
                    c.relay ? "relay" : "consumer instances", c.relay ? "ies" : "y");
    }
    return n > 0 || c.all ? 0 : 1;
}

std::string current_user() {
    const passwd *pw = getpwuid(geteuid());
    return pw != nullptr && pw->pw_name != nullptr ? pw->pw_name : "uid " + std::to_string(geteuid());
}

int run_skip(const ParkedCommands &c, outbox_db *db) {
    if (c.aggregate.empty() || c.consumer.empty() == !c.relay) {
        usage("skip needs --aggregate TYPE:ID and either --consumer NAME or --relay");
    }
    const auto [type, id] = split_aggregate(c.aggregate);
    const std::string by = c.by.empty() ? current_user() : c.by;
    char *raw = nullptr;
    check(outbox_parked_skip(&raw, db, c.relay ? nullptr : c.consumer.c_str(), type.c_str(), id.c_str(),
                             opt(c.event), by.c_str(), c.reason.c_str()));
    StringPtr skipped(raw);
    if (c.opts.json) {
        std::printf("{\"skipped\":\"%s\"}\n", skipped.get());
    } else {
        std::printf("skipped event %s of %s for %s (by %s); the aggregate's next event is due now\n", skipped.get(),
                    c.aggregate.c_str(), c.relay ? "the relay" : c.consumer.c_str(), by.c_str());
    }
    return 0;
}

} // namespace

void define_parked(CLI::App &app, ParkedCommands &c) {
    c.parked = app.add_subcommand(
        "parked", "aggregates held after their handler failed (retrying or parked), and the relay's parked ones: "
                  "list, redrive, skip");
    add_common(*c.parked, c.opts, false);
    c.parked->require_subcommand(1);
    c.parked->fallthrough(); // the shared options (--pg-url, --json, ...) may follow list, redrive or skip
    c.list = c.parked->add_subcommand("list", "held aggregates, oldest failure first");
    c.list->fallthrough();
    c.list->add_option("--consumer", c.consumer, "only this subscriber's (default: every subscriber's)");
    c.list->add_flag("--no-relay", c.no_relay, "leave out the relay's parked aggregates");
    c.list->add_option("--limit", c.limit, "at most N rows (default 100)")->check(CLI::PositiveNumber);
    c.redrive = c.parked->add_subcommand(
        "redrive", "try the aggregate's head again now (then its held events in seq order); failing, it stays parked");
    c.redrive->fallthrough();
    c.redrive->add_option("--consumer", c.consumer, "the subscriber");
    c.redrive->add_option("--aggregate", c.aggregate, "the aggregate, TYPE:ID");
    c.redrive->add_flag("--all", c.all, "every parked aggregate of --consumer");
    c.redrive->add_flag("--relay", c.relay, "the relay's parked aggregate (instead of a subscriber's)");
    c.skip = c.parked->add_subcommand(
        "skip", "give up the aggregate's head (recorded with who and why; never applied); its next event is due now");
    c.skip->fallthrough();
    c.skip->add_option("--consumer", c.consumer, "the subscriber");
    c.skip->add_option("--aggregate", c.aggregate, "the aggregate, TYPE:ID")->required();
    c.skip->add_flag("--relay", c.relay, "the relay's parked aggregate, its head FAILED: never published");
    c.skip->add_option("--event", c.event, "the head event's id as you saw it (refused when the head is another)");
    c.skip->add_option("--by", c.by, "who skips (default: the user running the command)");
    c.skip->add_option("--reason", c.reason, "why");
}

int run_parked(const ParkedCommands &c) {
    if (!*c.parked) {
        return -1;
    }
    ConfigPtr cfg = build_config(c.opts);
    DbPtr db = open_db(cfg.get());
    if (*c.list) {
        return run_list(c, db.get());
    }
    if (*c.redrive) {
        return run_redrive(c, db.get());
    }
    return run_skip(c, db.get());
}

} // namespace outbox::cli
