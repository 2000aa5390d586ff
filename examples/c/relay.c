/*
 * The relay embedded in a C program: outbox_relay_run() until SIGTERM/SIGINT, which call
 * outbox_relay_stop() (async-signal-safe). Reads OUTBOX_PG_URL, OUTBOX_AMQP_URL and
 * optionally OUTBOX_SCHEMA and OUTBOX_EXCHANGE (default corewrite.fanout).
 */
#include <outbox.h>

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>

static outbox_relay *relay;

static void on_signal(int sig) {
    (void)sig;
    outbox_relay_stop(relay);
}

static void log_line(outbox_log_level level, const char *message, void *ud) {
    static const char *names[] = {"debug", "info", "warn", "error"};
    (void)ud;
    fprintf(stderr, "relay %s: %s\n", names[level], message);
}

int main(void) {
    outbox_config *cfg = NULL;
    outbox_status st;
    int rc = 1;
    if (getenv("OUTBOX_PG_URL") == NULL || getenv("OUTBOX_AMQP_URL") == NULL) {
        fprintf(stderr, "relay: set OUTBOX_PG_URL and OUTBOX_AMQP_URL\n");
        return 2;
    }
    outbox_config_new(&cfg);
    if ((st = outbox_config_set(cfg, "pg.url", getenv("OUTBOX_PG_URL"))) != OUTBOX_OK ||
        (st = outbox_config_set(cfg, "amqp.url", getenv("OUTBOX_AMQP_URL"))) != OUTBOX_OK ||
        (getenv("OUTBOX_SCHEMA") != NULL &&
         (st = outbox_config_set(cfg, "outbox.schema", getenv("OUTBOX_SCHEMA"))) != OUTBOX_OK) ||
        (getenv("OUTBOX_EXCHANGE") != NULL &&
         (st = outbox_config_set(cfg, "amqp.exchange", getenv("OUTBOX_EXCHANGE"))) != OUTBOX_OK) ||
        (st = outbox_relay_new(&relay, cfg)) != OUTBOX_OK) {
        fprintf(stderr, "relay: %s\n", outbox_last_error());
        goto out;
    }
    outbox_relay_set_logger(relay, log_line, NULL);
    signal(SIGTERM, on_signal);
    signal(SIGINT, on_signal);
    if ((st = outbox_relay_run(relay)) != OUTBOX_OK) {
        fprintf(stderr, "relay: %s: %s\n", outbox_status_name(st), outbox_last_error());
        goto out;
    }
    rc = 0;
out:
    outbox_relay_free(relay);
    outbox_config_free(cfg);
    return rc;
}
