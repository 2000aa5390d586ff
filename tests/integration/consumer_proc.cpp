// A consumer process for crash tests, written against the public C API only:
//   outbox_test_consumer <consumer-name> <schema> <exchange> [fail-percent]
// For each event, in the consumer's transaction: dedupe, then increment a counter row of the
// event in <schema>.effects. A kill -9 at any point must leave exactly one effect per event.
// Reads OUTBOX_PG_URL and OUTBOX_AMQP_URL. Stops on SIGTERM.
#include <outbox.h>

#include <libpq-fe.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace {

outbox_consumer *g_consumer = nullptr;
extern "C" void on_term(int) { outbox_consumer_stop(g_consumer); }

struct Ctx {
    std::string schema;
    int fail_percent = 0;
};

int handle(outbox_db *tx, const outbox_message *msg, void *ud) {
    auto *ctx = static_cast<Ctx *>(ud);
    const char *id = outbox_message_field(msg, "OUTBOX_ID");
    if (ctx->fail_percent > 0 && outbox_message_delivery_count(msg) <= 0 &&
        static_cast<int>(std::hash<std::string>{}(id) % 100) < ctx->fail_percent) {
        outbox_handler_error("injected failure on first delivery");
        return 1;
    }
    auto *pg = static_cast<PGconn *>(outbox_db_pgconn(tx));
    std::string sql = "INSERT INTO \"" + ctx->schema +
                      "\".effects (outbox_id, n) VALUES ($1, 1) ON CONFLICT (outbox_id) DO UPDATE SET n = effects.n + 1";
    const char *params[] = {id};
    PGresult *r = PQexecParams(pg, sql.c_str(), 1, nullptr, params, nullptr, nullptr, 0);
    bool ok = PQresultStatus(r) == PGRES_COMMAND_OK;
    PQclear(r);
    if (!ok) {
        outbox_handler_error(PQerrorMessage(pg));
        return 1;
    }
    return 0;
}

} // namespace

int main(int argc, char **argv) {
    if (argc < 4) {
        std::fprintf(stderr, "usage: %s consumer schema exchange [fail-percent]\n", argv[0]);
        return 2;
    }
    Ctx ctx{argv[2], argc > 4 ? std::atoi(argv[4]) : 0};
    const char *pg = std::getenv("OUTBOX_PG_URL");
    const char *amqp = std::getenv("OUTBOX_AMQP_URL");
    outbox_config *cfg = nullptr;
    outbox_config_new(&cfg);
    if ((pg != nullptr && outbox_config_set(cfg, "pg.url", pg) != OUTBOX_OK) ||
        (amqp != nullptr && outbox_config_set(cfg, "amqp.url", amqp) != OUTBOX_OK) ||
        outbox_config_set(cfg, "outbox.schema", argv[2]) != OUTBOX_OK ||
        outbox_config_set(cfg, "amqp.exchange", argv[3]) != OUTBOX_OK ||
        outbox_config_set(cfg, "consumer.delivery_limit", "20") != OUTBOX_OK) {
        std::fprintf(stderr, "config: %s\n", outbox_last_error());
        return 2;
    }
    if (outbox_consumer_new(&g_consumer, cfg, argv[1]) != OUTBOX_OK) {
        std::fprintf(stderr, "consumer: %s\n", outbox_last_error());
        return 2;
    }
    std::signal(SIGTERM, on_term);
    outbox_status st = outbox_consumer_run(g_consumer, nullptr, handle, &ctx);
    if (st != OUTBOX_OK) {
        std::fprintf(stderr, "run: %s: %s\n", outbox_status_name(st), outbox_last_error());
    }
    outbox_consumer_free(g_consumer);
    outbox_config_free(cfg);
    return st == OUTBOX_OK ? 0 : 1;
}
