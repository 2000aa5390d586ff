// `outbox parked list|redrive|skip`: the operator's view of parked aggregates (a subscriber's
// failing events held in PostgreSQL, and the relay's parked ones) and its actions, on the C API's
// outbox_parked_* calls.
#pragma once

#include "common.hpp"

#include <CLI/CLI.hpp>

#include <string>

namespace outbox::cli {

struct ParkedCommands {
    CommonOptions opts;
    std::string consumer;
    std::string aggregate;
    std::string event;
    std::string by;
    std::string reason;
    bool all = false;
    bool relay = false;
    bool no_relay = false;
    int limit = 100;
    CLI::App *parked = nullptr;
    CLI::App *list = nullptr;
    CLI::App *redrive = nullptr;
    CLI::App *skip = nullptr;
};

void define_parked(CLI::App &app, ParkedCommands &c);
// Runs the subcommand chosen, when it is one of these; returns the exit status (-1: not chosen).
int run_parked(const ParkedCommands &c);

} // namespace outbox::cli
