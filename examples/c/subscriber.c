/*
 * A subscriber in the style of the documents' search-indexer, cache-invalidator and
 * audit-logger, in plain C99 on the consumer runtime: its own durable queue on the fanout
 * exchange, and each event's effect written in the same transaction as its inbox (dedupe) row,
 * so a redelivered event never has its effect twice.
 *
 *   subscriber search-indexer|cache-invalidator|audit-logger [count] [name]
 *
 * Reads OUTBOX_PG_URL, OUTBOX_AMQP_URL and optionally OUTBOX_SCHEMA and OUTBOX_EXCHANGE
 * (default corewrite.fanout). Stops after `count` events (default or 0: run until
 * SIGTERM/SIGINT). `name` is the consumer's name, hence its queue (default: the role).
 */
#include <libpq-fe.h>
#include <outbox.h>

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static outbox_consumer *consumer;
static long remaining = -1;

static void on_signal(int sig) {
    (void)sig;
    outbox_consumer_stop(consumer); /* async-signal-safe */
}

static int exec_params(PGconn *pg, const char *sql, int n, const char *const *params) {
    PGresult *res = PQexecParams(pg, sql, n, NULL, params, NULL, NULL, 0);
    int ok = PQresultStatus(res) == PGRES_COMMAND_OK;
    if (!ok) outbox_handler_error(PQerrorMessage(pg));
    PQclear(res);
    return ok ? 0 : 1;
}

static void log_line(outbox_log_level level, const char *message, void *ud) {
    (void)ud;
    if (level >= OUTBOX_LOG_INFO) {
        printf("  %s\n", message);
        fflush(stdout);
    }
}

static const char *order_name(outbox_order o) {
    switch (o) {
    case OUTBOX_ORDER_IN_ORDER: return "in order";
    case OUTBOX_ORDER_STALE: return "STALE";
    case OUTBOX_ORDER_GAP: return "after a GAP";
    default: return "unchecked";
    }
}

/* search-indexer: keep a search document per product (the documents index into Elasticsearch). */
static int search_indexer(outbox_db *tx, const outbox_message *msg, void *ud) {
    PGconn *pg = (PGconn *)outbox_db_pgconn(tx);
    const char *type = outbox_message_field(msg, "EVENT_TYPE");
    const char *id = outbox_message_field(msg, "AGGREGATE_ID");
    const char *params[2];
    int rc;
    params[0] = id;
    params[1] = outbox_message_field(msg, "PAYLOAD");
    if (strstr(type, "Deleted") != NULL) {
        rc = exec_params(pg, "DELETE FROM search_index WHERE id = $1", 1, params);
    } else {
        rc = exec_params(pg, "INSERT INTO search_index (id, doc) VALUES ($1, $2) ON CONFLICT (id) DO UPDATE"
                             " SET doc = search_index.doc || EXCLUDED.doc", 2, params);
    }
    if (rc == 0) {
        printf("[%s] %s %s: indexed (event %s, seq %lld, %s)\n", (const char *)ud, type, id,
               outbox_message_field(msg, "OUTBOX_ID"), (long long)outbox_message_seq(msg),
               order_name(outbox_message_order(msg)));
        fflush(stdout);
        if (remaining > 0 && --remaining == 0) outbox_consumer_stop(consumer);
    }
    return rc;
}

/* cache-invalidator: record the keys it invalidates (the documents delete them from Redis). */
static int cache_invalidator(outbox_db *tx, const outbox_message *msg, void *ud) {
    PGconn *pg = (PGconn *)outbox_db_pgconn(tx);
    char key[512];
    const char *params[1];
    snprintf(key, sizeof key, "%s:%s", outbox_message_field(msg, "AGGREGATE_TYPE"),
             outbox_message_field(msg, "AGGREGATE_ID"));
    params[0] = key;
    if (exec_params(pg, "INSERT INTO cache_invalidations (cache_key) VALUES ($1)", 1, params) != 0) return 1;
    printf("[%s] %s: invalidated %s and %s:list:* (event %s)\n", (const char *)ud, outbox_message_field(msg, "EVENT_TYPE"),
           key, outbox_message_field(msg, "AGGREGATE_TYPE"), outbox_message_field(msg, "OUTBOX_ID"));
    fflush(stdout);
    if (remaining > 0 && --remaining == 0) outbox_consumer_stop(consumer);
    return 0;
}

/* audit-logger: one row per event in audit_log (the documents' audit trail). */
static int audit_logger(outbox_db *tx, const outbox_message *msg, void *ud) {
    PGconn *pg = (PGconn *)outbox_db_pgconn(tx);
    char aggregate[512];
    const char *params[4];
    snprintf(aggregate, sizeof aggregate, "%s:%s", outbox_message_field(msg, "AGGREGATE_TYPE"),
             outbox_message_field(msg, "AGGREGATE_ID"));
    params[0] = outbox_message_field(msg, "OUTBOX_ID");
    params[1] = (const char *)ud;
    params[2] = outbox_message_field(msg, "EVENT_TYPE");
    params[3] = aggregate;
    if (exec_params(pg, "INSERT INTO audit_log (outbox_id, consumer, event_type, aggregate) VALUES ($1, $2, $3, $4)", 4,
                    params) != 0)
        return 1;
    printf("[%s] %s %s logged (event %s, seq %lld, %s)\n", (const char *)ud, params[2], aggregate, params[0],
           (long long)outbox_message_seq(msg), order_name(outbox_message_order(msg)));
    fflush(stdout);
    if (remaining > 0 && --remaining == 0) outbox_consumer_stop(consumer);
    return 0;
}

int main(int argc, char **argv) {
    const char *role = argc > 1 ? argv[1] : "";
    outbox_handler_fn handler = strcmp(role, "search-indexer") == 0      ? search_indexer
                                : strcmp(role, "cache-invalidator") == 0 ? cache_invalidator
                                : strcmp(role, "audit-logger") == 0      ? audit_logger
                                                                         : NULL;
    outbox_config *cfg = NULL;
    outbox_db *db = NULL;
    outbox_status st;
    const char *schema = getenv("OUTBOX_SCHEMA");
    const char *name = role;
    int rc = 1;

    if (handler == NULL || getenv("OUTBOX_PG_URL") == NULL || getenv("OUTBOX_AMQP_URL") == NULL) {
        fprintf(stderr, "usage: subscriber search-indexer|cache-invalidator|audit-logger [count] [name]\n"
                        "       (needs OUTBOX_PG_URL and OUTBOX_AMQP_URL)\n");
        return 2;
    }
    if (argc > 2 && atol(argv[2]) > 0) remaining = atol(argv[2]);
    if (argc > 3 && argv[3][0] != '\0') name = argv[3];
    outbox_config_new(&cfg);
    if ((st = outbox_config_set(cfg, "amqp.url", getenv("OUTBOX_AMQP_URL"))) != OUTBOX_OK ||
        (schema != NULL && (st = outbox_config_set(cfg, "outbox.schema", schema)) != OUTBOX_OK) ||
        (getenv("OUTBOX_EXCHANGE") != NULL &&
         (st = outbox_config_set(cfg, "amqp.exchange", getenv("OUTBOX_EXCHANGE"))) != OUTBOX_OK)) {
        fprintf(stderr, "config: %s\n", outbox_last_error());
        goto out;
    }
    /* The subscriber's own database: its inbox table lives beside its effects. */
    if ((st = outbox_db_open(&db, getenv("OUTBOX_PG_URL"), cfg)) != OUTBOX_OK ||
        (st = outbox_migrate(NULL, db, OUTBOX_MIGRATE_INBOX)) != OUTBOX_OK) {
        fprintf(stderr, "database: %s\n", outbox_last_error());
        goto out;
    }
    if (schema != NULL) {
        const char *p[1];
        p[0] = schema;
        PQclear(PQexecParams((PGconn *)outbox_db_pgconn(db), "SELECT set_config('search_path', $1, false)", 1, NULL,
                             p, NULL, NULL, 0));
    }
    outbox_db_exec(db, "CREATE TABLE IF NOT EXISTS search_index (id text PRIMARY KEY, doc jsonb NOT NULL)");
    outbox_db_exec(db, "CREATE TABLE IF NOT EXISTS cache_invalidations (cache_key text NOT NULL,"
                       " at timestamptz NOT NULL DEFAULT now())");
    outbox_db_exec(db, "CREATE TABLE IF NOT EXISTS audit_log (outbox_id uuid NOT NULL, consumer text NOT NULL,"
                       " event_type text NOT NULL, aggregate text NOT NULL, logged_at timestamptz NOT NULL DEFAULT now())");
    if ((st = outbox_consumer_new(&consumer, cfg, name)) != OUTBOX_OK ||
        (st = outbox_consumer_connect(consumer)) != OUTBOX_OK) {
        fprintf(stderr, "consumer: %s\n", outbox_last_error());
        goto out;
    }
    outbox_consumer_set_logger(consumer, log_line, NULL);
    signal(SIGTERM, on_signal);
    signal(SIGINT, on_signal);
    printf("[%s] waiting for events on its queue '%s'\n", name, name);
    fflush(stdout);
    if ((st = outbox_consumer_run(consumer, db, handler, (void *)name)) != OUTBOX_OK) {
        fprintf(stderr, "run: %s: %s\n", outbox_status_name(st), outbox_last_error());
        goto out;
    }
    rc = 0;
out:
    outbox_consumer_free(consumer);
    outbox_db_close(db);
    outbox_config_free(cfg);
    return rc;
}
