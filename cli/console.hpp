// `outbox console`: the operator console, a web page served by the CLI on the public C API alone.
// It shows the relay's pending, failed and parked events, each subscriber's lag with a plot of the
// last hour, and the parked aggregates with their errors; an operator retries, redrives and skips
// from it, each action confirmed on the page and logged on stderr with who did it (docs/console.md).
#pragma once

#include "common.hpp"

#include <CLI/CLI.hpp>

#include <string>
#include <vector>

namespace outbox::cli {

struct ConsoleOptions {
    CommonOptions common;
    std::string listen = "127.0.0.1:8089";
    std::string token_file;
    std::vector<std::string> subscribers;
    int sample_interval_s = 5;
    int max_rows = 500;
    std::string tls_cert;
    std::string tls_key;
};

// The `console` subcommand and its flags.
CLI::App *define_console(CLI::App &app, ConsoleOptions &co);
// Serves until SIGINT or SIGTERM; 0 then.
int run_console(const ConsoleOptions &co);

} // namespace outbox::cli
