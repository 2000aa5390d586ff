// What every `outbox` subcommand shares: how options reach the core Config (flags, then
// environment, then a key=value file, then --set), and logging that never prints a password.
#pragma once

#include "config.hpp"

#include <CLI/CLI.hpp>

#include <string>
#include <vector>

namespace outbox::cli {

struct CommonOptions {
    std::string pg_url;
    std::string amqp_url;
    std::string config_file;
    std::vector<std::string> sets;
    std::string schema;
    std::string table;
    std::string inbox_table;
    bool json = false;
};

// Adds --pg-url, --amqp-url, --config, --set, --schema, --table, --inbox-table, --json.
void add_common(CLI::App &cmd, CommonOptions &opts, bool with_amqp);

// Builds the Config: defaults < config file < environment < flags < --set. Refuses a missing
// PostgreSQL URL when the command needs one.
Config build_config(const CommonOptions &opts, bool needs_pg = true);

// Lines of "key  help" for every configuration key, for --help footers.
std::string keys_help();

} // namespace outbox::cli
