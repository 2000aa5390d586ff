#include "common.hpp"

#include "error.hpp"

#include <cstdlib>
#include <fstream>

namespace outbox::cli {

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

void set_pair(Config &cfg, const std::string &item, const std::string &where) {
    size_t eq = item.find('=');
    if (eq == std::string::npos) {
        // The line is not quoted back: a mistyped "pg.url postgres://u:secret@h" holds a password.
        fail(Errc::invalid_argument, where + ": expected KEY=VALUE (the line is not shown: it may hold a password)");
    }
    cfg.set(trim(item.substr(0, eq)), trim(item.substr(eq + 1)));
}

} // namespace

Config build_config(const CommonOptions &opts, bool needs_pg) {
    Config cfg;
    if (!opts.config_file.empty()) {
        std::ifstream in(opts.config_file);
        if (!in) {
            fail(Errc::invalid_argument, "cannot read " + opts.config_file);
        }
        std::string line;
        int n = 0;
        while (std::getline(in, line)) {
            ++n;
            std::string t = trim(line);
            if (t.empty() || t[0] == '#') {
                continue;
            }
            set_pair(cfg, t, opts.config_file + ":" + std::to_string(n));
        }
    }
    if (const char *v = std::getenv("OUTBOX_PG_URL"); v != nullptr && *v != '\0') {
        cfg.pg_url = v;
    }
    if (const char *v = std::getenv("OUTBOX_AMQP_URL"); v != nullptr && *v != '\0') {
        cfg.amqp_url = v;
    }
    if (!opts.pg_url.empty()) {
        cfg.pg_url = opts.pg_url;
    }
    if (!opts.amqp_url.empty()) {
        cfg.amqp_url = opts.amqp_url;
    }
    if (!opts.schema.empty()) {
        cfg.set("outbox.schema", opts.schema);
    }
    if (!opts.table.empty()) {
        cfg.set("outbox.table", opts.table);
    }
    if (!opts.inbox_table.empty()) {
        cfg.set("inbox.table", opts.inbox_table);
    }
    for (const auto &s : opts.sets) {
        set_pair(cfg, s, "--set");
    }
    if (needs_pg) {
        cfg.require_pg_url("outbox");
    }
    return cfg;
}

std::string keys_help() {
    std::string out = "Configuration keys (--set KEY=VALUE, or in the --config file):\n";
    for (const auto &k : Config::keys()) {
        std::string key = k.key;
        key.resize(std::max<size_t>(key.size() + 1, 30), ' ');
        out += "  " + key + k.help + "\n";
    }
    return out;
}

} // namespace outbox::cli
