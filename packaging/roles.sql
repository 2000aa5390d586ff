-- Least-privilege roles for outbox, run by the tables' owner after `outbox migrate`:
--
--   psql "$OWNER_URL" -v ON_ERROR_STOP=1 -v schema=public -v outbox_table=outbox \
--        -v inbox_table=outbox_inbox -f packaging/roles.sql
--
-- It creates four group roles (NOLOGIN) and grants each only what its statements need; give
-- your login roles membership, e.g. GRANT outbox_relay TO relay_login. Idempotent: run it again
-- after every migration. The variables default to the library's defaults (outbox.schema,
-- outbox.table, inbox.table); the names are quoted by psql (:"var"), never spliced as text.
--
--   outbox_writer    services calling outbox_write(): INSERT events (and idempotency keys),
--                    take positions, bump the per-aggregate counter; may read back only position,
--                    seq, outbox_id and idempotency_key (the statement's RETURNING and the
--                    duplicate-key message), never a payload.
--   outbox_relay     the relay: read events (never change one) and record its progress: the
--                    cursor, receipts, parked events. It cannot make partitions (migrate and an
--                    owner's purge do; it says so in its log every 10 s while some are due).
--   outbox_consumer  consumers: their inbox, its positions and (partitioned subscribers) the
--                    membership tables only; nothing of the outbox.
--   outbox_operator  stats, retry-failed, purge, replay, purge-inbox; the documents' manual retry
--                    and cleanup statements on the outbox view.
--
-- The owner (who runs `outbox migrate`) keeps DDL; none of these roles can create or alter.

\if :{?schema}
\else
\set schema public
\endif
\if :{?outbox_table}
\else
\set outbox_table outbox
\endif
\if :{?inbox_table}
\else
\set inbox_table outbox_inbox
\endif
\set aggregates_table :outbox_table _aggregates
\set events_table :outbox_table _events
\set position_seq :outbox_table _position_seq
\set relay_table :outbox_table _relay
\set receipts_table :outbox_table _receipts
\set parked_table :outbox_table _parked
\set keys_table :outbox_table _keys
\set drop_partition_fn :outbox_table _drop_partition
\set drop_detached_fn :outbox_table _drop_detached
\set outbox_v1_table :outbox_table _v1
\set positions_table :inbox_table _positions
\set members_table :inbox_table _members
\set partitionings_table :inbox_table _partitionings
\set inbox_v1_table :inbox_table _v1
\set held_table :inbox_table _held
\set held_events_table :inbox_table _held_events
\set held_order_seq :inbox_table _held_events_held_order_seq
\set skipped_table :inbox_table _skipped

SELECT format('CREATE ROLE %I NOLOGIN', r)
  FROM unnest(ARRAY['outbox_writer', 'outbox_relay', 'outbox_consumer', 'outbox_operator']) AS r
 WHERE NOT EXISTS (SELECT FROM pg_roles WHERE rolname = r) \gexec

GRANT USAGE ON SCHEMA :"schema" TO outbox_writer, outbox_relay, outbox_consumer, outbox_operator;

-- writer
-- Storage version 2: events are written once; the relay keeps its progress in tables of its own.
GRANT INSERT ON :"schema".:"events_table" TO outbox_writer;
-- Writers of the previous version insert into the view; a trigger makes that an event.
GRANT INSERT ON :"schema".:"outbox_table" TO outbox_writer;
GRANT SELECT (position, seq, outbox_id, idempotency_key) ON :"schema".:"events_table" TO outbox_writer;
GRANT USAGE ON SEQUENCE :"schema".:"position_seq" TO outbox_writer;
GRANT SELECT (idempotency_key, outbox_id), INSERT ON :"schema".:"keys_table" TO outbox_writer;
GRANT SELECT, INSERT, UPDATE (last_seq) ON :"schema".:"aggregates_table" TO outbox_writer;

-- relay
GRANT SELECT ON :"schema".:"events_table", :"schema".:"position_seq" TO outbox_relay;
GRANT SELECT, UPDATE (cursor, updated_at) ON :"schema".:"relay_table" TO outbox_relay;
GRANT SELECT, INSERT ON :"schema".:"receipts_table" TO outbox_relay;
GRANT SELECT, INSERT, UPDATE, DELETE ON :"schema".:"parked_table" TO outbox_relay;

-- consumer
GRANT SELECT, INSERT ON :"schema".:"inbox_table" TO outbox_consumer;
-- The version-1 inbox, kept after the upgrade to the partitioned one: read by the dedupe statement.
GRANT SELECT ON :"schema".:"inbox_v1_table" TO outbox_consumer;
GRANT SELECT, INSERT, UPDATE (last_seq, updated_at) ON :"schema".:"positions_table" TO outbox_consumer;
-- Partitioned subscribers (consumer.partitions): each instance's heartbeat row, and the partition
-- count recorded once per subscriber.
GRANT SELECT, INSERT, UPDATE, DELETE ON :"schema".:"members_table" TO outbox_consumer;
GRANT SELECT, INSERT ON :"schema".:"partitionings_table" TO outbox_consumer;
-- Parked aggregates (consumer.on_failure=park): the held aggregates (share-locked by the dedupe
-- statement, claimed FOR UPDATE by a retry) and their held messages.
GRANT SELECT, INSERT, UPDATE, DELETE ON :"schema".:"held_table", :"schema".:"held_events_table" TO outbox_consumer;
GRANT USAGE ON SEQUENCE :"schema".:"held_order_seq" TO outbox_consumer;

-- operator
GRANT SELECT ON :"schema".:"outbox_table", :"schema".:"events_table", :"schema".:"relay_table",
                :"schema".:"receipts_table", :"schema".:"keys_table" TO outbox_operator;
GRANT SELECT, UPDATE (status, next_attempt_at, retry_count, error_message) ON :"schema".:"parked_table" TO outbox_operator;
GRANT SELECT, DELETE ON :"schema".:"outbox_v1_table" TO outbox_operator;
-- The documents' manual retry and cleanup statements, through the view's triggers: a parked event's
-- retry columns, and events deleted row by row (the trigger refuses any other change).
GRANT UPDATE, DELETE ON :"schema".:"outbox_table" TO outbox_operator;
GRANT DELETE ON :"schema".:"events_table", :"schema".:"keys_table", :"schema".:"parked_table" TO outbox_operator;
-- purge: partitions dropped through the schema's functions (owner's rights; they take out only
-- partitions wholly at or below the relay's cursor, with their receipts' partitions, then drop
-- them), and the receipts the default partition holds for dropped events.
GRANT DELETE ON :"schema".:"receipts_table" TO outbox_operator;
GRANT EXECUTE ON FUNCTION :"schema".:"drop_partition_fn"(text), :"schema".:"drop_detached_fn"() TO outbox_operator;
GRANT SELECT, DELETE ON :"schema".:"inbox_table" TO outbox_operator;
GRANT SELECT, DELETE ON :"schema".:"inbox_v1_table" TO outbox_operator;
-- outbox parked (list, redrive, skip): a redrive sets the aggregate's state; a skip records the
-- head as skipped and in the inbox (its position too), then releases the aggregate; for the
-- relay's, it removes the FAILED head from the parked events.
GRANT SELECT, UPDATE, DELETE ON :"schema".:"held_table" TO outbox_operator;
GRANT SELECT, DELETE ON :"schema".:"held_events_table" TO outbox_operator;
GRANT SELECT, INSERT ON :"schema".:"skipped_table" TO outbox_operator;
GRANT INSERT ON :"schema".:"inbox_table" TO outbox_operator;
GRANT SELECT, INSERT, UPDATE (last_seq, updated_at) ON :"schema".:"positions_table" TO outbox_operator;
-- The relay's /metrics: the held aggregates, and each subscriber's newest event id (its lag); of the
-- inbox, only those two columns.
GRANT SELECT ON :"schema".:"held_table" TO outbox_relay;
GRANT SELECT (consumer, outbox_id) ON :"schema".:"inbox_table" TO outbox_relay;
