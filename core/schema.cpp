#include "schema.hpp"

#include "identifiers.hpp"

#include <vector>

namespace outbox::schema {
namespace {

std::string replace_all(std::string s, const std::string &from, const std::string &to) {
    for (size_t pos = s.find(from); pos != std::string::npos; pos = s.find(from, pos + to.size())) {
        s.replace(pos, from.size(), to);
    }
    return s;
}

// Step N upgrades from version N-1 to N. {T} is the qualified outbox table, {A} its aggregate
// counter table, {N} the bare table name (for index names), {K} the idempotency key's index, {I}/{IN} likewise for the inbox.
const std::vector<const char *> outbox_steps = {
    R"SQL(
CREATE TABLE {T} (
    outbox_id        uuid PRIMARY KEY,
    event_type       text NOT NULL,
    aggregate_type   text NOT NULL,
    aggregate_id     text NOT NULL,
    seq              bigint NOT NULL,
    operation        text NOT NULL CHECK (operation IN ('POST', 'PUT', 'PATCH', 'DELETE')),
    payload          json NOT NULL,
    previous_payload json,
    metadata         json NOT NULL DEFAULT '{}',
    actor            text,
    created_at       timestamptz NOT NULL DEFAULT now(),
    published_at     timestamptz,
    status           text NOT NULL DEFAULT 'PENDING' CHECK (status IN ('PENDING', 'PUBLISHED', 'FAILED')),
    retry_count      integer NOT NULL DEFAULT 0,
    error_message    text,
    next_attempt_at  timestamptz NOT NULL DEFAULT now(),
    idempotency_key  text,
    CONSTRAINT "{N}_aggregate_seq_key" UNIQUE (aggregate_type, aggregate_id, seq)
);
-- Due work, in the order the relay claims it; partial so it stays as small as the backlog.
CREATE INDEX "{N}_pending_idx" ON {T} (next_attempt_at) WHERE status = 'PENDING';
-- Unpublished events per aggregate: the relay's ordering check ("is an earlier event still out?").
CREATE INDEX "{N}_unpublished_idx" ON {T} (aggregate_type, aggregate_id, seq) WHERE status <> 'PUBLISHED';
-- Purge of old published events, and the failed list for operators.
CREATE INDEX "{N}_published_at_idx" ON {T} (published_at) WHERE status = 'PUBLISHED';
CREATE INDEX "{N}_failed_idx" ON {T} (created_at) WHERE status = 'FAILED';
CREATE UNIQUE INDEX "{K}" ON {T} (idempotency_key) WHERE idempotency_key IS NOT NULL;
-- One row per aggregate, holding its last sequence number. Writers increment it in their own
-- transaction; the row lock held until commit makes sequence order equal commit order.
CREATE TABLE {A} (
    aggregate_type text NOT NULL,
    aggregate_id   text NOT NULL,
    last_seq       bigint NOT NULL,
    PRIMARY KEY (aggregate_type, aggregate_id)
);
)SQL",
};

const std::vector<const char *> inbox_steps = {
    R"SQL(
CREATE TABLE {I} (
    consumer       text NOT NULL,
    outbox_id      uuid NOT NULL,
    aggregate_type text,
    aggregate_id   text,
    seq            bigint,
    processed_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer, outbox_id)
);
CREATE INDEX "{IN}_processed_at_idx" ON {I} (processed_at);
-- Highest sequence each consumer has processed per aggregate, for order and gap reports; kept
-- apart from the inbox rows so retention purges never forget it.
CREATE TABLE {IP} (
    consumer       text NOT NULL,
    aggregate_type text NOT NULL,
    aggregate_id   text NOT NULL,
    last_seq       bigint NOT NULL,
    updated_at     timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer, aggregate_type, aggregate_id)
);
)SQL",
    R"SQL(
-- Partitioned subscribers (core/partitions.hpp): the live instances with their heartbeats, and
-- the partition count each subscriber was created with.
CREATE TABLE {IMEM} (
    consumer     text NOT NULL,
    instance     text NOT NULL,
    partitions   integer NOT NULL,
    joined_at    timestamptz NOT NULL DEFAULT now(),
    heartbeat_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer, instance)
);
CREATE TABLE {IPART} (
    consumer   text PRIMARY KEY,
    partitions integer NOT NULL CHECK (partitions > 0),
    created_at timestamptz NOT NULL DEFAULT now()
);
)SQL",
};

std::string expand(const char *step, const Config &cfg) {
    std::string s = step;
    s = replace_all(s, "{T}", cfg.outbox_qualified());
    s = replace_all(s, "{A}", cfg.aggregates_qualified());
    s = replace_all(s, "{K}", idempotency_index(cfg));
    s = replace_all(s, "{N}", cfg.table);
    s = replace_all(s, "{IMEM}", ident::qualified(cfg.schema, cfg.inbox_table + "_members"));
    s = replace_all(s, "{IPART}", ident::qualified(cfg.schema, cfg.inbox_table + "_partitionings"));
    s = replace_all(s, "{IP}", ident::qualified(cfg.schema, cfg.inbox_table + "_positions"));
    s = replace_all(s, "{IN}", cfg.inbox_table);
    s = replace_all(s, "{I}", cfg.inbox_qualified());
    return s;
}

void ensure_migrations_table(pg::Conn &conn, const Config &cfg) {
    conn.exec_simple("CREATE SCHEMA IF NOT EXISTS " + ident::quoted(cfg.schema) + ";\nCREATE TABLE IF NOT EXISTS " +
                     cfg.migrations_qualified() +
                     " (target text PRIMARY KEY, component text NOT NULL, version integer NOT NULL,"
                     " applied_at timestamptz NOT NULL DEFAULT now())");
}

int read_version(pg::Conn &conn, const Config &cfg, const std::string &target) {
    pg::Result r = conn.exec("SELECT version FROM " + cfg.migrations_qualified() + " WHERE target = $1", {target});
    return r.rows() == 0 ? 0 : static_cast<int>(r.get_int(0, 0));
}

int apply(pg::Conn &conn, const Config &cfg, const std::string &component, const std::string &target,
          const std::vector<const char *> &steps, int &from) {
    from = read_version(conn, cfg, target);
    const int latest = static_cast<int>(steps.size());
    if (from > latest) {
        fail(Errc::schema, target + " is at schema version " + std::to_string(from) +
                               ", newer than this library knows (" + std::to_string(latest) + ")");
    }
    for (int v = from + 1; v <= latest; ++v) {
        conn.exec_simple(expand(steps[static_cast<size_t>(v - 1)], cfg));
    }
    if (from < latest) {
        conn.exec("INSERT INTO " + cfg.migrations_qualified() +
                      " (target, component, version) VALUES ($1, $2, $3) ON CONFLICT (target) DO UPDATE"
                      " SET version = EXCLUDED.version, applied_at = now()",
                  {target, component, std::to_string(latest)});
    }
    return latest;
}

std::string outbox_target(const Config &cfg) { return cfg.schema + "." + cfg.table; }
std::string inbox_target(const Config &cfg) { return cfg.schema + "." + cfg.inbox_table; }

} // namespace

Result migrate(pg::Conn &conn, const Config &cfg, What what) {
    PGTransactionStatusType st = conn.tx_status();
    if (st == PQTRANS_INERROR) {
        fail(Errc::transaction, "the connection's transaction is aborted; roll it back before migrating");
    }
    const bool own_tx = st == PQTRANS_IDLE;
    if (own_tx) {
        conn.exec_simple("BEGIN");
    }
    try {
        // A fixed key: every outbox migration in the database serialises on it.
        conn.exec_simple("SELECT pg_advisory_xact_lock(7306288117516400641)");
        ensure_migrations_table(conn, cfg);
        Result res;
        if (what != What::inbox) {
            res.outbox_to = apply(conn, cfg, "outbox", outbox_target(cfg), outbox_steps, res.outbox_from);
        }
        if (what != What::outbox) {
            res.inbox_to = apply(conn, cfg, "inbox", inbox_target(cfg), inbox_steps, res.inbox_from);
        }
        if (own_tx) {
            conn.exec_simple("COMMIT");
        }
        return res;
    } catch (...) {
        if (own_tx) {
            conn.rollback_quietly();
        }
        throw;
    }
}

std::string idempotency_index(const Config &cfg) {
    return cfg.table + "_idempotency_key_idx";
}

int installed_version(pg::Conn &conn, const Config &cfg, What what) {
    pg::Result r = conn.exec("SELECT to_regclass($1) IS NOT NULL", {cfg.migrations_qualified()});
    if (r.get(0, 0) != "t") {
        return 0;
    }
    return read_version(conn, cfg, what == What::inbox ? inbox_target(cfg) : outbox_target(cfg));
}

} // namespace outbox::schema
