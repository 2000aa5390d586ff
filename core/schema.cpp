#include "schema.hpp"

#include "identifiers.hpp"
#include "inbox.hpp"

#include <algorithm>
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
// counter table, {N} the bare table name (for index names), {K} the idempotency key's index, {I}/{IN} likewise for the
// inbox.
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
    R"SQL(
-- The inbox becomes range-partitioned by the time inside each event id (id_ms: the uuid v7's Unix
-- milliseconds, 0 for ids of other versions), so retention drops whole partitions instead of
-- deleting rows. A redelivered event always carries the same id, so it lands in the same partition
-- and the key (consumer, outbox_id, id_ms) still catches it. The version-1 table stays, with its
-- rows and grants, as {IN}_v1: the dedupe statement also looks there until purges have emptied it.
-- The range partitions are made by core/inbox.cpp (ensure_partitions) in the same transaction.
ALTER TABLE {I} RENAME TO "{IN}_v1";
ALTER TABLE {IV1} RENAME CONSTRAINT "{IN}_pkey" TO "{IN}_v1_pkey";
ALTER INDEX {IIDX} RENAME TO "{IN}_v1_processed_at_idx";
CREATE TABLE {I} (
    consumer       text NOT NULL,
    outbox_id      uuid NOT NULL,
    aggregate_type text,
    aggregate_id   text,
    seq            bigint,
    processed_at   timestamptz NOT NULL DEFAULT now(),
    id_ms          bigint NOT NULL,
    PRIMARY KEY (consumer, outbox_id, id_ms)
) PARTITION BY RANGE (id_ms);
CREATE INDEX "{IN}_processed_at_idx" ON {I} (processed_at);
-- Ids that are not v7 (id_ms 0), and v7 ids older than the first dated partition: purged by DELETE.
-- Its upper bound is set by ensure_partitions when it makes the first dated partition.
-- Rows past the last partition made land in the default partition until the next one is made.
CREATE TABLE {IDEF} PARTITION OF {I} DEFAULT;
-- The roles granted on the version-1 table get the same on the partitioned one.
DO $grants$
DECLARE g record;
BEGIN
    FOR g IN SELECT a.privilege_type, a.grantee FROM pg_class c, aclexplode(c.relacl) a
             WHERE c.oid = '{IV1}'::regclass AND a.grantee <> c.relowner LOOP
        EXECUTE format('GRANT %s ON {I} TO %s', g.privilege_type,
                       CASE WHEN g.grantee = 0 THEN 'PUBLIC' ELSE quote_ident(pg_get_userbyid(g.grantee)) END);
    END LOOP;
END
$grants$;
)SQL",
};

std::string expand(const char *step, const Config &cfg) {
    std::string s = step;
    s = replace_all(s, "{T}", cfg.outbox_qualified());
    s = replace_all(s, "{A}", cfg.aggregates_qualified());
    s = replace_all(s, "{K}", idempotency_index(cfg));
    s = replace_all(s, "{N}", cfg.table);
    s = replace_all(s, "{IDEF}", ident::qualified(cfg.schema, cfg.inbox_table + "_default"));
    s = replace_all(s, "{IV1}", ident::qualified(cfg.schema, cfg.inbox_table + "_v1"));
    s = replace_all(s, "{IIDX}", ident::qualified(cfg.schema, cfg.inbox_table + "_processed_at_idx"));
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
          const std::vector<const char *> &steps, int &from, int up_to) {
    from = read_version(conn, cfg, target);
    const int known = static_cast<int>(steps.size());
    const int latest = up_to > 0 && up_to < known ? std::max(up_to, from) : known;
    if (from > known) {
        fail(Errc::schema, target + " is at schema version " + std::to_string(from) +
                               ", newer than this library knows (" + std::to_string(known) + ")");
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

std::string outbox_target(const Config &cfg) {
    return cfg.schema + "." + cfg.table;
}
std::string inbox_target(const Config &cfg) {
    return cfg.schema + "." + cfg.inbox_table;
}

} // namespace

Result migrate(pg::Conn &conn, const Config &cfg, What what, int up_to) {
    PGTransactionStatusType st = conn.tx_status();
    if (st == PQTRANS_INERROR) {
        fail(Errc::transaction, "the connection's transaction is aborted; roll it back before migrating");
    }
    return pg::in_transaction(conn, [&] {
        // A fixed key: every outbox migration in the database serialises on it.
        conn.exec_simple(ddl_lock_sql);
        ensure_migrations_table(conn, cfg);
        Result res;
        if (what != What::inbox) {
            res.outbox_to = apply(conn, cfg, "outbox", outbox_target(cfg), outbox_steps, res.outbox_from, up_to);
        }
        if (what != What::outbox) {
            res.inbox_to = apply(conn, cfg, "inbox", inbox_target(cfg), inbox_steps, res.inbox_from, up_to);
            if (res.inbox_to >= 3) {
                inbox::ensure_partitions(conn, cfg, inbox::db_now_ms(conn));
            }
        }
        return res;
    });
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
