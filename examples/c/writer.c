/*
 * A CoreWrite-style insert in plain C99: the product row and its ProductCreated event are
 * written in one PostgreSQL transaction, so both persist or neither does.
 *
 *   writer [conninfo] [product-name]     (conninfo defaults to $OUTBOX_PG_URL)
 *
 * $OUTBOX_SCHEMA, when set, names the schema of the outbox tables (default public).
 */
#include <libpq-fe.h>
#include <outbox.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int fail(const char *what, outbox_status st) {
    fprintf(stderr, "writer: %s: %s: %s\n", what, outbox_status_name(st), outbox_last_error());
    return 1;
}

int main(int argc, char **argv) {
    const char *conninfo = argc > 1 ? argv[1] : getenv("OUTBOX_PG_URL");
    const char *name = argc > 2 ? argv[2] : "Widget Pro";
    outbox_config *cfg = NULL;
    outbox_db *db = NULL;
    outbox_event *ev = NULL;
    outbox_status st;
    PGconn *pg;
    PGresult *res;
    const char *params[2];
    char payload[512];
    char product_id[32];
    int rc = 1;

    if (conninfo == NULL) {
        fprintf(stderr, "usage: writer [conninfo] [product-name] (or set OUTBOX_PG_URL)\n");
        return 2;
    }
    printf("liboutbox %s\n", outbox_version());

    if ((st = outbox_config_new(&cfg)) != OUTBOX_OK) return fail("config", st);
    /* The documents' naming: aggregate type PRD is called Product in event types. */
    if ((st = outbox_config_set(cfg, "event.type_map", "PRD=Product")) != OUTBOX_OK) return fail("config", st);
    if (getenv("OUTBOX_SCHEMA") != NULL &&
        (st = outbox_config_set(cfg, "outbox.schema", getenv("OUTBOX_SCHEMA"))) != OUTBOX_OK)
        return fail("config", st);
    if ((st = outbox_db_open(&db, conninfo, cfg)) != OUTBOX_OK) return fail("connect", st);
    if ((st = outbox_migrate(NULL, db, OUTBOX_MIGRATE_ALL)) != OUTBOX_OK) { fail("migrate", st); goto out; }

    pg = (PGconn *)outbox_db_pgconn(db);
    if (getenv("OUTBOX_SCHEMA") != NULL) { /* the products table lives beside the outbox */
        params[0] = getenv("OUTBOX_SCHEMA");
        PQclear(PQexecParams(pg, "SELECT set_config('search_path', $1, false)", 1, NULL, params, NULL, NULL, 0));
    }
    res = PQexec(pg, "CREATE TABLE IF NOT EXISTS products (prd_id bigserial PRIMARY KEY, name text NOT NULL,"
                     " price numeric NOT NULL, created_at timestamptz NOT NULL DEFAULT now())");
    if (PQresultStatus(res) != PGRES_COMMAND_OK) {
        fprintf(stderr, "writer: create table: %s", PQerrorMessage(pg));
        PQclear(res);
        goto out;
    }
    PQclear(res);

    /* 1. BEGIN */
    if ((st = outbox_db_exec(db, "BEGIN")) != OUTBOX_OK) { fail("begin", st); goto out; }

    /* 2. Insert the main record with the caller's own SQL. */
    params[0] = name;
    params[1] = "99.99";
    res = PQexecParams(pg, "INSERT INTO products (name, price) VALUES ($1, $2) RETURNING prd_id", 2, NULL, params,
                       NULL, NULL, 0);
    if (PQresultStatus(res) != PGRES_TUPLES_OK) {
        fprintf(stderr, "writer: insert product: %s", PQerrorMessage(pg));
        PQclear(res);
        outbox_db_exec(db, "ROLLBACK");
        goto out;
    }
    snprintf(product_id, sizeof product_id, "%s", PQgetvalue(res, 0, 0));
    PQclear(res);

    /* 3. The outbox event, in the same transaction. */
    snprintf(payload, sizeof payload, "{\"PRD_ID\":\"%s\",\"XPRD01\":\"%s\",\"XPRD02\":99.99,\"TREC\":\"N\"}",
             product_id, name);
    if ((st = outbox_event_new(&ev)) != OUTBOX_OK) { fail("event", st); goto rollback; }
    if ((st = outbox_event_set(ev, "aggregate_type", "PRD")) != OUTBOX_OK ||
        (st = outbox_event_set(ev, "aggregate_id", product_id)) != OUTBOX_OK ||
        (st = outbox_event_set(ev, "operation", "POST")) != OUTBOX_OK ||
        (st = outbox_event_set(ev, "payload", payload)) != OUTBOX_OK ||
        (st = outbox_event_set(ev, "metadata", "{\"source\":\"productManagement\",\"microservice\":\"example-c\"}")) !=
            OUTBOX_OK ||
        (st = outbox_event_set(ev, "user", "user@example.com")) != OUTBOX_OK) {
        fail("event field", st);
        goto rollback;
    }
    if ((st = outbox_write(db, ev)) != OUTBOX_OK) { fail("outbox_write", st); goto rollback; }

    /* 4. COMMIT: the product and its event persist atomically. */
    if ((st = outbox_db_exec(db, "COMMIT")) != OUTBOX_OK) { fail("commit", st); goto out; }
    printf("committed product %s with event %s %s (aggregate seq %lld)\n", product_id, outbox_event_type(ev),
           outbox_event_id(ev), (long long)outbox_event_seq(ev));
    rc = 0;
    goto out;

rollback:
    outbox_db_exec(db, "ROLLBACK"); /* both the product and the event are gone */
out:
    outbox_event_free(ev);
    outbox_db_close(db);
    outbox_config_free(cfg);
    return rc;
}
