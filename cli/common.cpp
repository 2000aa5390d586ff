#include "common.hpp"

#include <cjson/cJSON.h>
#include <sys/time.h>

#include <cstdio>
#include <ctime>

#include <fstream>

namespace outbox::cli {

std::string config_get(const outbox_config *cfg, const char *key) {
    char *v = nullptr;
    check(outbox_config_get(&v, cfg, key));
    StringPtr owned(v);
    return v != nullptr ? v : "";
}

void config_set(outbox_config *cfg, const std::string &key, const std::string &value) {
    check(outbox_config_set(cfg, key.c_str(), value.c_str()));
}

DbPtr open_db(const outbox_config *cfg) {
    outbox_db *db = nullptr;
    check(outbox_db_open_config(&db, cfg));
    return DbPtr(db);
}

void add_common(CLI::App &cmd, CommonOptions &opts, bool with_amqp) {
    cmd.add_option("--pg-url", opts.pg_url, "PostgreSQL URL or conninfo (env OUTBOX_PG_URL)");
    if (with_amqp) {
        cmd.add_option("--amqp-url", opts.amqp_url, "RabbitMQ URL, amqp:// or amqps:// (env OUTBOX_AMQP_URL)");
    }
    cmd.add_option("--config", opts.config_file,
                   "file of 'key = value' lines using the configuration keys below ('#' starts a comment)")
        ->check(CLI::ExistingFile);
    cmd.add_option("--set", opts.sets, "set a configuration key, KEY=VALUE (repeatable; see the keys below)");
    cmd.add_option("--schema", opts.schema, "schema of the tables (default public)");
    cmd.add_option("--table", opts.table, "outbox table (default outbox)");
    cmd.add_option("--inbox-table", opts.inbox_table, "consumer inbox table (default outbox_inbox)");
    cmd.add_flag("--json", opts.json, "print machine-readable JSON instead of text");
    cmd.footer(keys_help()); // --config and --set above refer to "the keys below"
}

namespace {

std::string trim(const std::string &s) {
    size_t b = s.find_first_not_of(" \t\r");
    size_t e = s.find_last_not_of(" \t\r");
    return b == std::string::npos ? std::string() : s.substr(b, e - b + 1);
}

void set_pair(outbox_config *cfg, const std::string &item, const std::string &where) {
    size_t eq = item.find('=');
    if (eq == std::string::npos) {
        // The line is not quoted back: a mistyped "pg.url postgres://u:secret@h" holds a password.
        usage(where + ": expected KEY=VALUE (the line is not shown: it may hold a password)");
    }
    config_set(cfg, trim(item.substr(0, eq)), trim(item.substr(eq + 1)));
}

void read_file(outbox_config *cfg, const std::string &path) {
    std::ifstream in(path);
    if (!in) {
        usage("cannot read " + path);
    }
    std::string line;
    int n = 0;
    while (std::getline(in, line)) {
        ++n;
        std::string t = trim(line);
        if (!t.empty() && t[0] != '#') {
            set_pair(cfg, t, path + ":" + std::to_string(n));
        }
    }
}

} // namespace

ConfigPtr build_config(const CommonOptions &opts) {
    outbox_config *raw = nullptr;
    check(outbox_config_new(&raw));
    ConfigPtr cfg(raw);
    if (!opts.config_file.empty()) {
        read_file(cfg.get(), opts.config_file);
    }
    check(outbox_config_from_env(cfg.get(), 1)); // the environment wins over the file
    const std::pair<const char *, const std::string *> flags[] = {{"pg.url", &opts.pg_url},
                                                                  {"amqp.url", &opts.amqp_url},
                                                                  {"outbox.schema", &opts.schema},
                                                                  {"outbox.table", &opts.table},
                                                                  {"inbox.table", &opts.inbox_table}};
    for (const auto &[key, value] : flags) {
        if (!value->empty()) {
            config_set(cfg.get(), key, *value);
        }
    }
    for (const auto &s : opts.sets) {
        set_pair(cfg.get(), s, "--set");
    }
    return cfg;
}

std::string keys_help() {
    std::string out = "Configuration keys (--set KEY=VALUE, or in the --config file):\n";
    const char *key = nullptr;
    const char *help = nullptr;
    for (size_t i = 0; outbox_config_key(&key, &help, i) == OUTBOX_OK; ++i) {
        std::string k = key;
        k.resize(std::max<size_t>(k.size() + 1, 30), ' ');
        out += "  " + k + help + "\n";
    }
    return out;
}

std::string timestamp() {
    timeval tv{};
    gettimeofday(&tv, nullptr);
    std::tm tm{};
    gmtime_r(&tv.tv_sec, &tm);
    char buf[64];
    std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday,
                  tm.tm_hour, tm.tm_min, tm.tm_sec, static_cast<long>(tv.tv_usec / 1000));
    return buf;
}

double number(const cJSON *object, const char *name) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(object, name);
    return cJSON_IsNumber(v) ? v->valuedouble : 0;
}

} // namespace outbox::cli
