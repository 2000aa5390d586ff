// The outbox table's statements: the transactional write (and its rendered form for foreign
// drivers) and the relay's claim. All SQL is parameterised; identifiers come validated.
#pragma once

#include "config.hpp"
#include "event.hpp"
#include "pg.hpp"

#include <string>
#include <vector>

namespace outbox::store {

struct Statement {
    std::string sql;
    pg::Params params;
    // The parameters' names for the named styles (named, pyformat: "p1", "p2", ...); empty for
    // the positional ones.
    std::vector<std::string> names;
};

// Rewrites a statement written with $1..$n (each used once, in order) into the placeholder
// style `style` (render.placeholders: dollar, qmark, format, named, pyformat). For format and
// pyformat a literal '%' is doubled. Throws Error(invalid_argument) for an unknown style.
Statement with_placeholders(Statement st, const std::string &style);

// The statement as one JSON object: {"sql": "...", "params": ["...", null, ...]}, and
// "names": [...] for the named styles.
std::string statement_json(const Statement &st);

// The INSERT of one event, exactly as outbox_write runs it: one statement that bumps the
// aggregate's sequence counter and inserts the row, returning the sequence number.
// Prepares (validates, names, ids) the event first.
Statement render_write(const Config &cfg, Event &ev);

// Writes the event in the connection's current transaction (or as its own statement when the
// connection is idle). Never begins, commits or rolls back the caller's transaction; with an
// idempotency key inside a transaction it uses a savepoint so a duplicate leaves the caller's
// transaction usable. Throws Error(duplicate) for a used idempotency key.
void write(pg::Conn &conn, const Config &cfg, Event &ev);

// The relay finds work per aggregate, not per event, so a backlog concentrated on a few
// aggregates costs no more to claim than one spread over many:
//
// visit_sql: from a cursor ($1 aggregate_type, $2 aggregate_id; '' and '' = the start), the
// heads (lowest unpublished seq) of the next aggregates in key order, at most $3 of them.
// Columns: aggregate_type, aggregate_id, seq, due (the head is PENDING and due).
std::string visit_sql(const Config &cfg);

// claim_sql: locks the chosen heads ($1 text[] types, $2 text[] ids, $3 bigint[] seqs) with
// SKIP LOCKED, and returns them and the events that follow them in their aggregates (at most
// claim_depth per aggregate), heads first, at most $4 rows. Columns: outbox_id, event_type,
// aggregate_type, aggregate_id, seq, operation, payload, previous_payload, metadata, actor,
// created_at (YYYYMMDDHHMMSS UTC), created_at (epoch s), retry_count, depth.
// Followers come back unlocked: no other relay can claim them while their head is locked.
constexpr int claim_depth = 64;
std::string claim_sql(const Config &cfg);

} // namespace outbox::store
