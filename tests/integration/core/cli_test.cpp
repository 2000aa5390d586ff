// The `outbox` command's conventions, run as a user runs it: usage errors exit 2, a missing table
// says to run `outbox migrate`, a missing broker URL is refused (never a silent guest@localhost),
// every --help that mentions configuration keys lists them, and `relay --once` reports what it did.
#include "relay_fixture.hpp"
#include "test_shell.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace {

using namespace outbox_test;

std::string quote(const std::string &s) {
    std::string out = "'";
    for (char c : s) {
        out += c == '\'' ? std::string("'\\''") : std::string(1, c);
    }
    return out + "'";
}

// Runs the CLI with the given arguments, with neither URL in its environment; stderr joins stdout.
std::string cli(const std::vector<std::string> &args, int *rc) {
    std::string cmd = "env -u OUTBOX_PG_URL -u OUTBOX_AMQP_URL " + quote(OUTBOX_CLI_PATH);
    for (const auto &a : args) {
        cmd += " " + quote(a);
    }
    return shell(cmd + " </dev/null", rc);
}

class CliTest : public RelayTest {};

TEST_F(CliTest, UsageErrorsExitTwo) {
    int rc = -1;
    const std::vector<std::vector<std::string>> usage_errors = {
        {},                                                                // no subcommand
        {"frobnicate"},                                                    // unknown subcommand
        {"relay", "--no-such-flag"},                                       // unknown flag
        {"purge"},                                                         // a required option missing
        {"migrate", "--only", "everything"},                               // a value outside its set
        {"relay", "--batch-size", "many"},                                 // not a number
        {"purge", "--pg-url", pg_url(), "--published-older-than", "soon"}, // not a duration
        {"stats"},                                                         // no PostgreSQL URL
        {"relay", "--pg-url", pg_url(), "--once"},                         // no broker URL
        {"tail", "--count", "1", "--timeout", "1"},                        // no broker URL
        {"stats", "--pg-url", pg_url(), "--set", "no.such.key=1"},
    };
    for (const auto &args : usage_errors) {
        std::string joined;
        for (const auto &a : args) {
            joined += a + " ";
        }
        const std::string out = cli(args, &rc);
        EXPECT_EQ(rc, 2) << joined << "\n" << out;
        EXPECT_FALSE(out.empty()) << joined << ": a usage error must say what is wrong";
    }
    EXPECT_NE(cli({"relay", "--pg-url", pg_url(), "--once"}, &rc).find("amqp.url"), std::string::npos);
    EXPECT_NE(cli({"tail", "--count", "1"}, &rc).find("--amqp-url"), std::string::npos);
    cli({"--help"}, &rc);
    EXPECT_EQ(rc, 0);
    cli({"--version"}, &rc);
    EXPECT_EQ(rc, 0);
}

TEST_F(CliTest, AMissingTableSaysToRunMigrate) {
    int rc = -1;
    for (const char *cmd : {"stats", "retry-failed"}) {
        const std::string out =
            cli({cmd, "--pg-url", pg_url(), "--schema", cfg.schema, "--table", "never_migrated"}, &rc);
        EXPECT_EQ(rc, 1) << cmd << ": " << out;
        EXPECT_NE(out.find("outbox migrate"), std::string::npos) << cmd << ": " << out;
    }
}

TEST_F(CliTest, EveryHelpThatMentionsConfigurationKeysListsThem) {
    int rc = -1;
    for (const char *sub :
         {"migrate", "relay", "stats", "retry-failed", "purge", "replay", "tail", "purge-inbox", "console", "parked"}) {
        const std::string out = cli({sub, "--help"}, &rc);
        EXPECT_EQ(rc, 0) << sub;
        if (out.find("--set") == std::string::npos && out.find("--config") == std::string::npos) {
            continue;
        }
        EXPECT_NE(out.find("Configuration keys"), std::string::npos) << sub << " --help names keys but lists none";
        for (const char *key : {"amqp.url", "outbox.schema", "relay.batch_size"}) {
            EXPECT_NE(out.find(key), std::string::npos) << sub << " --help does not list " << key;
        }
    }
}

// A one-shot run reports what it did: every step records its outcomes before it returns (version 1
// committed a full batch's marks in the background, counted by a next step that --once never ran).
TEST_F(CliTest, RelayOnceReportsEveryEventItPublished) {
    Collector sink(cfg.exchange);
    write_events(6, 6);
    int rc = -1;
    const std::vector<std::string> once = {
        "relay",        "--once",   "--pg-url",    pg_url(), "--amqp-url",
        amqp_url(),     "--schema", cfg.schema,    "--set",  "amqp.exchange=" + cfg.exchange,
        "--batch-size", "3",        "--log-level", "error"};
    std::vector<std::string> json = once;
    json.emplace_back("--json");
    std::string out = cli(json, &rc);
    EXPECT_EQ(rc, 0) << out;
    EXPECT_NE(out.find("\"claimed\":3,\"published\":3,"), std::string::npos) << out;
    EXPECT_EQ(db->exec("SELECT count(*) FROM " + cfg.outbox_qualified() + " WHERE status = 'PUBLISHED'").get(0, 0),
              "3");
    out = cli(once, &rc);
    EXPECT_EQ(rc, 0) << out;
    EXPECT_NE(out.find("claimed 3, published 3,"), std::string::npos) << out;
    EXPECT_EQ(db->exec("SELECT count(*) FROM " + cfg.outbox_qualified() + " WHERE status = 'PUBLISHED'").get(0, 0),
              "6");
    EXPECT_EQ(sink.collect(6).size(), 6U);
}

} // namespace
