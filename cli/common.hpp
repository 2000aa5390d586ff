// What every `outbox` subcommand shares: how options reach the library's configuration (flags,
// then environment, then a key=value file, then --set), through the public C API only.
#pragma once

#include "capi.hpp"

#include <CLI/CLI.hpp>

#include <string>
#include <vector>

struct cJSON;

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

// Builds the configuration: defaults < config file < environment (outbox_config_from_env) <
// flags < --set.
ConfigPtr build_config(const CommonOptions &opts);

// Now in UTC, ISO 8601 with milliseconds: the time stamp of the command's log lines.
std::string timestamp();

// The number member `name` of a JSON object; 0 when it is missing or not a number.
double number(const cJSON *object, const char *name);

// Lines of "key  help" for every configuration key, for --help footers.
std::string keys_help();

} // namespace outbox::cli
