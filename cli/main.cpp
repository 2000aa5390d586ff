// The `outbox` command: schema migrations, the relay daemon and operator tools.
#include "common.hpp"

#include "error.hpp"
#include "pg.hpp"
#include "schema.hpp"

#include <outbox.h>

#include <cstdio>
#include <iostream>

namespace outbox::cli {
namespace {

int run_migrate(const CommonOptions &opts, const std::string &only) {
    Config cfg = build_config(opts);
    pg::Conn conn = pg::Conn::open(cfg.pg_url, cfg.pg_connect_timeout_s, "outbox-migrate");
    schema::What what = only == "outbox" ? schema::What::outbox
                        : only == "inbox" ? schema::What::inbox
                                          : schema::What::all;
    schema::Result r = schema::migrate(conn, cfg, what);
    if (opts.json) {
        std::printf("{\"outbox\":{\"from\":%d,\"to\":%d},\"inbox\":{\"from\":%d,\"to\":%d}}\n", r.outbox_from,
                    r.outbox_to, r.inbox_from, r.inbox_to);
        return 0;
    }
    auto line = [](const char *what_name, const std::string &table, int from, int to) {
        if (from == to) {
            std::printf("%s %s: schema version %d, up to date\n", what_name, table.c_str(), to);
        } else {
            std::printf("%s %s: migrated from version %d to %d\n", what_name, table.c_str(), from, to);
        }
    };
    if (what != schema::What::inbox) {
        line("outbox", cfg.schema + "." + cfg.table, r.outbox_from, r.outbox_to);
    }
    if (what != schema::What::outbox) {
        line("inbox", cfg.schema + "." + cfg.inbox_table, r.inbox_from, r.inbox_to);
    }
    return 0;
}

} // namespace
} // namespace outbox::cli

int main(int argc, char **argv) {
    using namespace outbox::cli;
    CLI::App app{"outbox " OUTBOX_VERSION_STRING
                 " - transactional outbox for PostgreSQL and RabbitMQ.\n"
                 "Environment: OUTBOX_PG_URL, OUTBOX_AMQP_URL."};
    app.require_subcommand(1);
    app.set_version_flag("--version", std::string(OUTBOX_VERSION_STRING));

    CommonOptions migrate_opts;
    std::string only = "all";
    CLI::App *migrate = app.add_subcommand("migrate", "create or upgrade the outbox and inbox tables (idempotent)");
    add_common(*migrate, migrate_opts, false);
    migrate->add_option("--only", only, "which tables: all, outbox or inbox (default all)")
        ->check(CLI::IsMember({"all", "outbox", "inbox"}));
    migrate->footer(keys_help());

    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError &e) {
        return app.exit(e);
    }
    try {
        if (*migrate) {
            return run_migrate(migrate_opts, only);
        }
    } catch (const outbox::Error &e) {
        std::fprintf(stderr, "outbox: %s: %s\n", outbox::errc_name(e.code()), e.what());
        return 1;
    } catch (const std::exception &e) {
        std::fprintf(stderr, "outbox: %s\n", e.what());
        return 1;
    }
    return 0;
}
