/*
 * The C reference for node/bench/write.js and python/bench_write.py: the same N writes in one
 * transaction with outbox_write on a connection the library owns, driven over stdin so its rounds
 * interleave with Node's or Python's (same load, same server). Built with bench/
 * (build/release/bench/write_c), or by write.js --with-c against the installed library:
 *   cc -O2 write_c.c $(pkg-config --cflags --libs outbox)
 * stdin: "run N" -> prints "<us per write>"; "quit" -> drops the schema and exits.
 */
#include <outbox.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static int fail(const char *what) {
    fprintf(stderr, "write_c: %s: %s\n", what, outbox_last_error());
    return 1;
}

int main(int argc, char **argv) {
    const char *url = getenv("OUTBOX_PG_URL");
    outbox_config *cfg = NULL;
    outbox_db *db = NULL;
    char line[128], sql[256];
    if (argc < 2 || url == NULL) {
        fprintf(stderr, "usage: OUTBOX_PG_URL=... write_c SCHEMA\n");
        return 2;
    }
    if (outbox_config_new(&cfg) || outbox_config_set(cfg, "outbox.schema", argv[1]) ||
        outbox_config_set(cfg, "event.type_map", "PRD=Product")) {
        return fail("config");
    }
    if (outbox_db_open(&db, url, cfg) || outbox_migrate(NULL, db, OUTBOX_MIGRATE_ALL)) {
        return fail("open");
    }
    printf("ready\n");
    fflush(stdout);
    while (fgets(line, sizeof line, stdin) != NULL) {
        long n = 0;
        if (sscanf(line, "run %ld", &n) != 1 || n <= 0) {
            break;
        }
        double t0 = now_us();
        if (outbox_db_exec(db, "BEGIN")) {
            return fail("BEGIN");
        }
        for (long i = 0; i < n; i++) {
            /* The event of write.js: the same fields and JSON text. */
            char id[32], payload[256];
            outbox_event *ev = NULL;
            snprintf(id, sizeof id, "%ld", i % 100);
            snprintf(payload, sizeof payload,
                     "{\"PRD_ID\":\"%ld\",\"XPRD01\":\"Widget Pro\",\"XPRD02\":99.99,\"XPRD03\":\"PRD-2025-001\","
                     "\"XPRD05\":\"cat_electronics\",\"XPRD06\":true,\"TREC\":\"N\"}",
                     i);
            if (outbox_event_new(&ev) || outbox_event_set(ev, "aggregate_type", "PRD") ||
                outbox_event_set(ev, "aggregate_id", id) || outbox_event_set(ev, "operation", "POST") ||
                outbox_event_set(ev, "payload", payload) ||
                outbox_event_set(
                    ev, "metadata",
                    "{\"source\":\"productManagement\",\"centro_dett\":\"admin\",\"microservice\":\"adminApp\"}") ||
                outbox_event_set(ev, "user", "user@example.com") || outbox_write(db, ev)) {
                return fail("write");
            }
            outbox_event_free(ev);
        }
        if (outbox_db_exec(db, "COMMIT")) {
            return fail("COMMIT");
        }
        printf("%.3f\n", (now_us() - t0) / (double)n);
        fflush(stdout);
    }
    snprintf(sql, sizeof sql, "DROP SCHEMA \"%s\" CASCADE", argv[1]);
    outbox_db_exec(db, sql);
    outbox_db_close(db);
    outbox_config_free(cfg);
    return 0;
}
