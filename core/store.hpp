// The outbox table's statements: the transactional write (and its rendered form for foreign
// drivers). All SQL is parameterised; identifiers come validated. (The relay's statements are in
// stream.hpp.)
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
// The same in another placeholder style (render.placeholders' values), without copying cfg.
Statement render_write(const Config &cfg, Event &ev, const std::string &style);

// Writes the event in the connection's current transaction (or as its own statement when the
// connection is idle). Never begins, commits or rolls back the caller's transaction; with an
// idempotency key inside a transaction it uses a savepoint so a duplicate leaves the caller's
// transaction usable. Throws Error(duplicate) for a used idempotency key.
void write(pg::Conn &conn, const Config &cfg, Event &ev);

// What a write begun with write_send() waits for (outbox_write_wait).
enum class Wait {
    done = 0,     // finished
    readable = 1, // the connection's socket readable, then write_poll()
    writable = 2, // part of the statement is unsent: the socket writable (or readable), then write_poll()
    blocking = 3, // nothing done: this write takes more than one statement; use write()
};

// write() in two halves, for a caller that waits for the connection's socket in an event loop of
// its own instead of blocking: write_send() does what write() does up to sending its statement,
// without waiting; write_poll(), each time the socket is ready as asked, reads what arrived and
// finishes as write() does (ev.seq set, the same errors and messages) once the result is there.
// The same transaction semantics: the statement runs in the connection's current transaction, or
// as its own when it is idle. An event with an idempotency key takes more than one statement (a
// savepoint, a lookup after a duplicate): write_send() returns Wait::blocking and does nothing.
// Nothing else may use the connection until write_poll() returned Wait::done or threw.
Wait write_send(pg::Conn &conn, const Config &cfg, Event &ev);
Wait write_poll(pg::Conn &conn, Event &ev);

} // namespace outbox::store
