#include "schema.hpp"

#include "identifiers.hpp"
#include "inbox.hpp"
#include "retention.hpp"

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
    R"SQL(
-- Storage version 2 (docs/storage-v2.md): the relay never rewrites an event. Events are written
-- once into {E}, range-partitioned on `position` (a sequence taken in the write's statement after
-- the aggregate's counter row is locked, so per aggregate position order = seq order = commit
-- order). The relay's progress lives apart: a cursor ({RELAY}: every position at or below it is
-- done), receipts ({RCPT}: ranges of positions published, with the time; partitioned as the
-- events are, so they leave with them), and parked events ({PARK}: failed events and the later
-- events of their aggregates, with a copy of the row, their retries and errors). Retention drops
-- whole partitions below the cursor (core/stream.cpp, core/retention.cpp).
CREATE SEQUENCE {SEQ} AS bigint;
CREATE TABLE {E} (
    position         bigint NOT NULL,
    outbox_id        uuid NOT NULL,
    event_type       text NOT NULL,
    aggregate_type   text NOT NULL,
    aggregate_id     text NOT NULL,
    seq              bigint NOT NULL,
    operation        text NOT NULL,
    payload          json NOT NULL,
    previous_payload json,
    metadata         json NOT NULL DEFAULT '{}',
    actor            text,
    created_at       timestamptz NOT NULL DEFAULT now(),
    idempotency_key  text,
    PRIMARY KEY (position)
) PARTITION BY RANGE (position);
CREATE TABLE {EDEF} PARTITION OF {E} DEFAULT;
CREATE TABLE {RELAY} (
    name       text PRIMARY KEY,
    cursor     bigint NOT NULL DEFAULT 0,
    updated_at timestamptz NOT NULL DEFAULT now()
);
INSERT INTO {RELAY} (name) VALUES ('default');
-- A receipt spans fewer than {SPAN} positions (the relay's largest batch; core/config.hpp
-- max_receipt_span), so the receipt of a position is found among those that start less than that
-- before it: at most two partitions of the default width are searched. Its partitions have the
-- bounds of the events table's and are taken out with them, so receipts are never deleted.
CREATE TABLE {RCPT} (
    from_position bigint NOT NULL,
    to_position   bigint NOT NULL,
    published_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (from_position),
    CONSTRAINT "{N}_receipts_span" CHECK (to_position >= from_position AND to_position - from_position < {SPAN})
) PARTITION BY RANGE (from_position);
CREATE TABLE {RDEF} PARTITION OF {RCPT} DEFAULT;
CREATE INDEX "{N}_receipts_published_at_idx" ON {RCPT} (published_at);
CREATE TABLE {PARK} (
    position         bigint PRIMARY KEY,
    outbox_id        uuid NOT NULL,
    event_type       text NOT NULL,
    aggregate_type   text NOT NULL,
    aggregate_id     text NOT NULL,
    seq              bigint NOT NULL,
    operation        text NOT NULL,
    payload          json NOT NULL,
    previous_payload json,
    metadata         json NOT NULL,
    actor            text,
    created_at       timestamptz NOT NULL,
    idempotency_key  text,
    status           text NOT NULL DEFAULT 'PENDING' CHECK (status IN ('PENDING', 'FAILED')),
    retry_count      integer NOT NULL DEFAULT 0,
    error_message    text,
    next_attempt_at  timestamptz NOT NULL DEFAULT now(),
    parked_at        timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX "{N}_parked_aggregate_idx" ON {PARK} (aggregate_type, aggregate_id, position);
CREATE INDEX "{N}_parked_id_idx" ON {PARK} (outbox_id);
-- The version-1 table keeps its published rows (purged by DELETE until it is empty); its
-- unpublished rows move to the new storage below, in seq order per aggregate.
ALTER TABLE {T} RENAME TO "{N}_v1";
ALTER INDEX {KQ} RENAME TO "{N}_v1_idempotency_key_idx";
ALTER INDEX "{S}"."{N}_pending_idx" RENAME TO "{N}_v1_pending_idx";
ALTER INDEX "{S}"."{N}_unpublished_idx" RENAME TO "{N}_v1_unpublished_idx";
ALTER INDEX "{S}"."{N}_published_at_idx" RENAME TO "{N}_v1_published_at_idx";
ALTER INDEX "{S}"."{N}_failed_idx" RENAME TO "{N}_v1_failed_idx";
ALTER TABLE {V1} RENAME CONSTRAINT "{N}_pkey" TO "{N}_v1_pkey";
ALTER TABLE {V1} RENAME CONSTRAINT "{N}_aggregate_seq_key" TO "{N}_v1_aggregate_seq_key";
-- Idempotency keys: a unique index cannot span a partitioned table's partitions on another column,
-- so the keys live in a small table of their own; its key constraint keeps the old index's name.
CREATE TABLE {KEYS} (
    idempotency_key text NOT NULL,
    outbox_id       uuid NOT NULL,
    position        bigint NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT "{K}" PRIMARY KEY (idempotency_key)
);
CREATE INDEX "{N}_keys_created_at_idx" ON {KEYS} (created_at);
INSERT INTO {KEYS} (idempotency_key, outbox_id, position, created_at)
    SELECT idempotency_key, outbox_id, 0, created_at FROM {V1} WHERE idempotency_key IS NOT NULL;
LOCK TABLE {V1} IN EXCLUSIVE MODE;
WITH moved AS (
    DELETE FROM {V1} WHERE status <> 'PUBLISHED'
    RETURNING outbox_id, event_type, aggregate_type, aggregate_id, seq, operation, payload, previous_payload,
              metadata, actor, created_at, idempotency_key, status, retry_count, error_message, next_attempt_at
), placed AS (
    SELECT nextval('{SEQ}') AS position, m.* FROM (SELECT * FROM moved ORDER BY aggregate_type, aggregate_id, seq) m
), ins AS (
    INSERT INTO {E} (position, outbox_id, event_type, aggregate_type, aggregate_id, seq, operation, payload,
                     previous_payload, metadata, actor, created_at, idempotency_key)
    SELECT position, outbox_id, event_type, aggregate_type, aggregate_id, seq, operation, payload,
           previous_payload, metadata, actor, created_at, idempotency_key FROM placed
), heads AS (
    -- An aggregate whose first unpublished event was retried or failed stays held back from there.
    SELECT DISTINCT ON (aggregate_type, aggregate_id) aggregate_type, aggregate_id, seq, status, retry_count
    FROM placed ORDER BY aggregate_type, aggregate_id, seq
)
INSERT INTO {PARK} (position, outbox_id, event_type, aggregate_type, aggregate_id, seq, operation, payload,
                    previous_payload, metadata, actor, created_at, idempotency_key, status, retry_count,
                    error_message, next_attempt_at)
SELECT p.position, p.outbox_id, p.event_type, p.aggregate_type, p.aggregate_id, p.seq, p.operation, p.payload,
       p.previous_payload, p.metadata, p.actor, p.created_at, p.idempotency_key,
       CASE WHEN p.seq = h.seq THEN p.status ELSE 'PENDING' END, CASE WHEN p.seq = h.seq THEN p.retry_count ELSE 0 END,
       CASE WHEN p.seq = h.seq THEN p.error_message END, CASE WHEN p.seq = h.seq THEN p.next_attempt_at ELSE now() END
FROM placed p JOIN heads h USING (aggregate_type, aggregate_id)
WHERE h.status = 'FAILED' OR h.retry_count > 0;
UPDATE {KEYS} k SET position = e.position FROM {E} e WHERE k.position = 0 AND e.outbox_id = k.outbox_id
    AND e.idempotency_key = k.idempotency_key;
-- The documents' monitoring view: every event with its status, published_at, retry_count,
-- error_message and next_attempt_at, as version 1 had them as columns. Filters on status reach
-- the branches that can match (a constant status elsewhere prunes a branch).
CREATE VIEW {T} AS
SELECT e.position, e.outbox_id, e.event_type, e.aggregate_type, e.aggregate_id, e.seq, e.operation, e.payload,
       e.previous_payload, e.metadata, e.actor, e.created_at,
       (SELECT x.published_at FROM (SELECT r.published_at, r.to_position FROM {RCPT} r
            WHERE r.from_position <= e.position AND r.from_position > e.position - {SPAN}
            ORDER BY r.from_position DESC LIMIT 1) x
        WHERE x.to_position >= e.position) AS published_at,
       CAST('PUBLISHED' AS text) AS status, 0 AS retry_count, CAST(NULL AS text) AS error_message,
       e.created_at AS next_attempt_at, e.idempotency_key
FROM {E} e
WHERE e.position <= (SELECT c.cursor FROM {RELAY} c WHERE c.name = 'default')
  AND NOT EXISTS (SELECT 1 FROM {PARK} p WHERE p.position = e.position)
UNION ALL
SELECT e.position, e.outbox_id, e.event_type, e.aggregate_type, e.aggregate_id, e.seq, e.operation, e.payload,
       e.previous_payload, e.metadata, e.actor, e.created_at, r.published_at,
       CASE WHEN r.published_at IS NULL THEN 'PENDING' ELSE 'PUBLISHED' END, 0, CAST(NULL AS text),
       e.created_at, e.idempotency_key
FROM {E} e
LEFT JOIN LATERAL (SELECT x.published_at FROM (SELECT r.published_at, r.to_position FROM {RCPT} r
                       WHERE r.from_position <= e.position AND r.from_position > e.position - {SPAN}
                       ORDER BY r.from_position DESC LIMIT 1) x
                   WHERE x.to_position >= e.position) r ON true
WHERE e.position > (SELECT c.cursor FROM {RELAY} c WHERE c.name = 'default')
  AND NOT EXISTS (SELECT 1 FROM {PARK} p WHERE p.position = e.position)
UNION ALL
SELECT p.position, p.outbox_id, p.event_type, p.aggregate_type, p.aggregate_id, p.seq, p.operation, p.payload,
       p.previous_payload, p.metadata, p.actor, p.created_at, CAST(NULL AS timestamptz), p.status, p.retry_count,
       p.error_message, p.next_attempt_at, p.idempotency_key
FROM {PARK} p
UNION ALL
SELECT -1, v.outbox_id, v.event_type, v.aggregate_type, v.aggregate_id, v.seq, v.operation, v.payload,
       v.previous_payload, v.metadata, v.actor, v.created_at, v.published_at, v.status, v.retry_count,
       v.error_message, v.next_attempt_at, v.idempotency_key
FROM {V1} v;
-- Writers of the previous version insert into the outbox as a table: such an insert becomes an event
-- (its position taken here, after its counter upsert, as the current write statement takes it), so
-- services can be upgraded after the schema without losing a write.
CREATE FUNCTION "{S}"."{N}_v1_insert"() RETURNS trigger LANGUAGE plpgsql AS $v1insert$
BEGIN
    NEW.position := nextval('{SEQ}');
    INSERT INTO {E} (position, outbox_id, event_type, aggregate_type, aggregate_id, seq, operation, payload,
                     previous_payload, metadata, actor, created_at, idempotency_key)
    VALUES (NEW.position, NEW.outbox_id, NEW.event_type, NEW.aggregate_type, NEW.aggregate_id, NEW.seq,
            NEW.operation, NEW.payload, NEW.previous_payload, COALESCE(NEW.metadata, '{}'), NEW.actor,
            COALESCE(NEW.created_at, now()), NEW.idempotency_key);
    IF NEW.idempotency_key IS NOT NULL THEN
        INSERT INTO {KEYS} (idempotency_key, outbox_id, position) VALUES (NEW.idempotency_key, NEW.outbox_id, NEW.position);
    END IF;
    RETURN NEW;
END
$v1insert$;
CREATE TRIGGER "{N}_v1_insert" INSTEAD OF INSERT ON {T} FOR EACH ROW EXECUTE FUNCTION "{S}"."{N}_v1_insert"();
-- The documents' manual retry (UPDATE ... SET status = 'PENDING' WHERE status = 'FAILED' ...) goes on
-- working: a parked event's status, retry_count, error_message and next_attempt_at can be changed
-- (a FAILED event set PENDING is due at once unless next_attempt_at is set too), as
-- `outbox retry-failed` does. An event itself is written once: any other change is refused.
CREATE FUNCTION "{S}"."{N}_v1_update"() RETURNS trigger LANGUAGE plpgsql AS $v1update$
BEGIN
    IF ROW(NEW.position, NEW.outbox_id, NEW.event_type, NEW.aggregate_type, NEW.aggregate_id, NEW.seq, NEW.operation,
           CAST(NEW.payload AS text), CAST(NEW.previous_payload AS text), CAST(NEW.metadata AS text), NEW.actor,
           NEW.created_at, NEW.published_at, NEW.idempotency_key)
       IS DISTINCT FROM
       ROW(OLD.position, OLD.outbox_id, OLD.event_type, OLD.aggregate_type, OLD.aggregate_id, OLD.seq, OLD.operation,
           CAST(OLD.payload AS text), CAST(OLD.previous_payload AS text), CAST(OLD.metadata AS text), OLD.actor,
           OLD.created_at, OLD.published_at, OLD.idempotency_key) THEN
        RAISE EXCEPTION 'outbox: event % is written once; only a parked event''s status, retry_count, error_message and next_attempt_at can change', OLD.outbox_id
            USING ERRCODE = 'feature_not_supported';
    END IF;
    IF ROW(NEW.status, NEW.retry_count, NEW.error_message, NEW.next_attempt_at)
       IS NOT DISTINCT FROM ROW(OLD.status, OLD.retry_count, OLD.error_message, OLD.next_attempt_at) THEN
        RETURN NEW;
    END IF;
    IF OLD.position < 0 OR OLD.status = 'PUBLISHED' THEN
        RAISE EXCEPTION 'outbox: event % is published; `outbox replay` publishes an aggregate''s events again', OLD.outbox_id
            USING ERRCODE = 'object_not_in_prerequisite_state';
    END IF;
    IF NEW.status IS NULL OR NEW.status NOT IN ('PENDING', 'FAILED') THEN
        RAISE EXCEPTION 'outbox: a parked event''s status can be PENDING or FAILED, not %', COALESCE(NEW.status, 'NULL')
            USING ERRCODE = 'check_violation';
    END IF;
    UPDATE {PARK} p SET status = NEW.status, retry_count = NEW.retry_count, error_message = NEW.error_message,
           next_attempt_at = CASE WHEN NEW.next_attempt_at IS DISTINCT FROM OLD.next_attempt_at THEN NEW.next_attempt_at
                                  WHEN OLD.status = 'FAILED' AND NEW.status = 'PENDING' THEN now()
                                  ELSE p.next_attempt_at END
     WHERE p.position = OLD.position;
    IF NOT FOUND THEN
        -- Not parked (any more): a pending event above the relay's cursor has nothing to change.
        RAISE EXCEPTION 'outbox: event % is not parked (it is pending, waiting for the relay); nothing of it can change', OLD.outbox_id
            USING ERRCODE = 'object_not_in_prerequisite_state';
    END IF;
    RETURN NEW;
END
$v1update$;
CREATE TRIGGER "{N}_v1_update" INSTEAD OF UPDATE ON {T} FOR EACH ROW EXECUTE FUNCTION "{S}"."{N}_v1_update"();
-- The documents' cleanup (DELETE ... WHERE status = 'PUBLISHED' AND published_at < ...) goes on
-- working, row by row (`outbox purge` drops whole partitions instead). As with version 1's table,
-- deleting an event not yet published discards it: the relay passes over it.
CREATE FUNCTION "{S}"."{N}_v1_delete"() RETURNS trigger LANGUAGE plpgsql AS $v1delete$
BEGIN
    IF OLD.position < 0 THEN
        DELETE FROM {V1} WHERE outbox_id = OLD.outbox_id;
    ELSE
        DELETE FROM {PARK} WHERE position = OLD.position;
        DELETE FROM {E} WHERE position = OLD.position;
    END IF;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    IF OLD.idempotency_key IS NOT NULL THEN
        DELETE FROM {KEYS} WHERE idempotency_key = OLD.idempotency_key AND outbox_id = OLD.outbox_id;
    END IF;
    RETURN OLD;
END
$v1delete$;
CREATE TRIGGER "{N}_v1_delete" INSTEAD OF DELETE ON {T} FOR EACH ROW EXECUTE FUNCTION "{S}"."{N}_v1_delete"();
-- Taking a partition out needs the table's owner; purge calls this (as the owner, definer's rights)
-- so that an operator role granted EXECUTE can run it too. It takes out only a partition of the
-- events table that lies wholly at or below the relay's cursor; purge chose it by the age of its
-- receipts. It detaches the partition and renames it {N}_x<its first position>: a change to the
-- catalog, milliseconds under the table's lock whatever the partition holds. The receipts'
-- partition of the same bounds goes the same way ({N}_y<first position>), once the part of a
-- receipt that reaches past it is recorded in the next. The files go in a transaction of their own
-- ({N}_drop_detached), where returning their space to the file system (about 0.4 s a GB) keeps no
-- writer waiting. The caller locks the receipts, then the events (the relay's order).
CREATE FUNCTION "{S}"."{N}_drop_partition"(part text) RETURNS boolean LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp AS $droppart$
DECLARE
    bound text;
    upper bigint;
    done bigint;
    rpart text;
BEGIN
    SELECT pg_get_expr(c.relpartbound, c.oid) INTO bound FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
     WHERE i.inhparent = CAST('{E}' AS regclass) AND c.relname = part;
    IF bound IS NULL THEN
        RETURN false; -- gone already (another purge), or not a partition of the events table
    END IF;
    upper := CAST(substring(bound FROM $re$TO \('?(-?[0-9]+)'?\)$re$) AS bigint);
    SELECT r.cursor INTO done FROM {RELAY} r WHERE r.name = 'default';
    IF upper IS NULL OR upper - 1 > done THEN
        RAISE EXCEPTION 'outbox: partition % is not wholly at or below the relay''s cursor', part
            USING ERRCODE = 'object_not_in_prerequisite_state';
    END IF;
    EXECUTE format('ALTER TABLE {E} DETACH PARTITION %I.%I', '{S}', part);
    EXECUTE format('ALTER TABLE %I.%I RENAME TO %I', '{S}', part, '{N}_x' || right(part, 14));
    rpart := '{N}_r' || right(part, 14);
    IF EXISTS (SELECT 1 FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
                WHERE i.inhparent = CAST('{RCPT}' AS regclass) AND c.relname = rpart) THEN
        EXECUTE format('INSERT INTO {RCPT} (from_position, to_position, published_at)'
                       ' SELECT $1, to_position, published_at FROM %I.%I WHERE to_position >= $1'
                       ' ON CONFLICT (from_position) DO NOTHING', '{S}', rpart) USING upper;
        EXECUTE format('ALTER TABLE {RCPT} DETACH PARTITION %I.%I', '{S}', rpart);
        EXECUTE format('ALTER TABLE %I.%I RENAME TO %I', '{S}', rpart, '{N}_y' || right(part, 14));
    END IF;
    RETURN true;
END
$droppart$;
REVOKE ALL ON FUNCTION "{S}"."{N}_drop_partition"(text) FROM PUBLIC;
-- Drops the partitions {N}_drop_partition took out (also those of a purge that stopped between
-- the two); returns how many events' partitions. Only tables of this schema named so that are no
-- partition.
CREATE FUNCTION "{S}"."{N}_drop_detached"() RETURNS integer LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp AS $dropdetached$
DECLARE
    t text;
    n integer := 0;
BEGIN
    FOR t IN SELECT c.relname FROM pg_class c JOIN pg_namespace ns ON ns.oid = c.relnamespace
              WHERE ns.nspname = '{S}' AND c.relkind = 'r' AND NOT c.relispartition
                AND left(c.relname, length('{N}_x')) IN ('{N}_x', '{N}_y')
                AND length(c.relname) = length('{N}_x') + 14
                AND right(c.relname, 14) ~ '^[0-9]+$' ORDER BY c.relname LOOP
        EXECUTE format('DROP TABLE IF EXISTS %I.%I', '{S}', t); -- IF EXISTS: another purge may drop it first
        IF left(t, length('{N}_x')) = '{N}_x' THEN
            n := n + 1;
        END IF;
    END LOOP;
    RETURN n;
END
$dropdetached$;
REVOKE ALL ON FUNCTION "{S}"."{N}_drop_detached"() FROM PUBLIC;
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
    R"SQL(
-- Parked aggregates (core/held.hpp): a handler's failure holds the event's aggregate here instead
-- of holding the queue. One row per held aggregate of a consumer, with its head's attempts and
-- errors; the held messages, as delivered; and what operators skipped, with who and why.
CREATE TABLE {IHELD} (
    consumer        text NOT NULL,
    aggregate_type  text NOT NULL,
    aggregate_id    text NOT NULL,
    state           text NOT NULL CHECK (state IN ('retrying', 'redriving', 'parked')),
    attempts        integer NOT NULL DEFAULT 0,
    next_attempt_at timestamptz NOT NULL DEFAULT now(),
    first_failed_at timestamptz,
    last_failed_at  timestamptz,
    last_error      text,
    PRIMARY KEY (consumer, aggregate_type, aggregate_id)
);
CREATE INDEX "{IN}_held_due_idx" ON {IHELD} (consumer, next_attempt_at) WHERE state <> 'parked';
CREATE TABLE {IHELDE} (
    held_order     bigserial NOT NULL,
    consumer       text NOT NULL,
    aggregate_type text NOT NULL,
    aggregate_id   text NOT NULL,
    seq            bigint,
    outbox_id      uuid NOT NULL,
    event_type     text NOT NULL,
    properties     text NOT NULL,
    body           text NOT NULL,
    held_at        timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer, outbox_id)
);
CREATE INDEX "{IN}_held_events_order_idx" ON {IHELDE} (consumer, aggregate_type, aggregate_id, seq, held_order);
CREATE TABLE {ISKIP} (
    consumer       text NOT NULL,
    outbox_id      uuid NOT NULL,
    aggregate_type text NOT NULL,
    aggregate_id   text NOT NULL,
    seq            bigint,
    event_type     text NOT NULL,
    properties     text NOT NULL,
    body           text NOT NULL,
    attempts       integer NOT NULL,
    last_error     text,
    skipped_at     timestamptz NOT NULL DEFAULT now(),
    skipped_by     text NOT NULL,
    reason         text NOT NULL,
    PRIMARY KEY (consumer, outbox_id)
);
-- The roles granted on the inbox get the same on these.
DO $grants$
DECLARE g record;
BEGIN
    FOR g IN SELECT DISTINCT a.grantee FROM pg_class c, aclexplode(c.relacl) a
             WHERE c.oid = '{I}'::regclass AND a.grantee <> c.relowner LOOP
        EXECUTE format('GRANT SELECT, INSERT, UPDATE, DELETE ON {IHELD}, {IHELDE}, {ISKIP} TO %s',
                       CASE WHEN g.grantee = 0 THEN 'PUBLIC' ELSE quote_ident(pg_get_userbyid(g.grantee)) END);
        EXECUTE format('GRANT USAGE ON SEQUENCE "{S}"."{IN}_held_events_held_order_seq" TO %s',
                       CASE WHEN g.grantee = 0 THEN 'PUBLIC' ELSE quote_ident(pg_get_userbyid(g.grantee)) END);
    END LOOP;
END
$grants$;
)SQL",
};

std::string expand(const char *step, const Config &cfg) {
    std::string s = step;
    const auto outbox_part = [&cfg](const std::string &suffix) {
        return ident::qualified(cfg.schema, cfg.table + suffix);
    };
    s = replace_all(s, "{SEQ}", outbox_part("_position_seq"));
    s = replace_all(s, "{EDEF}", outbox_part("_events_default"));
    s = replace_all(s, "{E}", outbox_part("_events"));
    s = replace_all(s, "{RELAY}", outbox_part("_relay"));
    s = replace_all(s, "{SPAN}", std::to_string(max_receipt_span));
    s = replace_all(s, "{RDEF}", outbox_part("_receipts_dflt"));
    s = replace_all(s, "{RCPT}", outbox_part("_receipts"));
    s = replace_all(s, "{PARK}", outbox_part("_parked"));
    s = replace_all(s, "{KEYS}", outbox_part("_keys"));
    s = replace_all(s, "{V1}", outbox_part("_v1"));
    s = replace_all(s, "{KQ}", ident::qualified(cfg.schema, idempotency_index(cfg)));
    s = replace_all(s, "{S}", cfg.schema);
    s = replace_all(s, "{T}", cfg.outbox_qualified());
    s = replace_all(s, "{A}", cfg.aggregates_qualified());
    s = replace_all(s, "{K}", idempotency_index(cfg));
    s = replace_all(s, "{N}", cfg.table);
    s = replace_all(s, "{IDEF}", ident::qualified(cfg.schema, cfg.inbox_table + "_default"));
    s = replace_all(s, "{IV1}", ident::qualified(cfg.schema, cfg.inbox_table + "_v1"));
    s = replace_all(s, "{IIDX}", ident::qualified(cfg.schema, cfg.inbox_table + "_processed_at_idx"));
    s = replace_all(s, "{IHELDE}", ident::qualified(cfg.schema, cfg.inbox_table + "_held_events"));
    s = replace_all(s, "{IHELD}", ident::qualified(cfg.schema, cfg.inbox_table + "_held"));
    s = replace_all(s, "{ISKIP}", ident::qualified(cfg.schema, cfg.inbox_table + "_skipped"));
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
    Result done = pg::in_transaction(conn, [&] {
        // A fixed key: every outbox migration in the database serialises on it.
        conn.exec_simple(ddl_lock_sql);
        ensure_migrations_table(conn, cfg);
        Result res;
        if (what != What::inbox) {
            res.outbox_to = apply(conn, cfg, "outbox", outbox_target(cfg), outbox_steps, res.outbox_from, up_to);
            if (res.outbox_to >= 2) {
                retention::ensure_partitions(conn, cfg);
            }
        }
        if (what != What::outbox) {
            res.inbox_to = apply(conn, cfg, "inbox", inbox_target(cfg), inbox_steps, res.inbox_from, up_to);
            if (res.inbox_to >= 3) {
                inbox::ensure_partitions(conn, cfg, inbox::db_now_ms(conn));
            }
        }
        return res;
    });
    // Closed events partitions get their aggregate index (retention.hpp), built concurrently,
    // which a transaction cannot hold: only when migrate ran in a transaction of its own.
    if (st == PQTRANS_IDLE && what != What::inbox && done.outbox_to >= 2) {
        retention::index_closed_partitions(conn, cfg);
    }
    return done;
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
