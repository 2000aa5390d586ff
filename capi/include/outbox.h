/**
 * @file outbox.h
 * @brief The public C API of liboutbox: a transactional outbox for PostgreSQL and RabbitMQ.
 *
 * Conventions (the same for every call):
 * - Handles are opaque. Each `*_new` / `*_open` / `*_wrap` has a `*_free` / `*_close`;
 *   passing NULL to a free/close function does nothing.
 * - Every fallible call returns an ::outbox_status (0 = OUTBOX_OK, negative = error). After an
 *   error, outbox_last_error() gives a human-readable message for the calling thread.
 * - A NULL argument where a value is required is answered with OUTBOX_ERR_INVALID_ARGUMENT,
 *   never a crash. No C++ exception ever leaves the library.
 * - Output parameters come first.
 * - Strings the library returns are either *borrowed* (valid until the call named in the
 *   function's documentation; never free them) or *owned* (free with outbox_string_free()).
 * - Handles are not thread-safe: use one handle from one thread at a time. Different handles
 *   may be used from different threads at once. outbox_relay_stop() is the one exception: it
 *   may be called from any thread or a signal handler.
 * - Configuration is by string key/value (outbox_config_set()), so new options never change a
 *   struct layout.
 */
#ifndef OUTBOX_H
#define OUTBOX_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32)
#define OUTBOX_API __declspec(dllimport)
#elif defined(__GNUC__)
#define OUTBOX_API __attribute__((visibility("default")))
#else
#define OUTBOX_API
#endif

/** @name Version */
/**@{*/
#define OUTBOX_VERSION_MAJOR 0
#define OUTBOX_VERSION_MINOR 1
#define OUTBOX_VERSION_PATCH 0
/** The version as one number: major * 10000 + minor * 100 + patch. */
#define OUTBOX_VERSION_NUMBER (OUTBOX_VERSION_MAJOR * 10000 + OUTBOX_VERSION_MINOR * 100 + OUTBOX_VERSION_PATCH)
#define OUTBOX_VERSION_STRING "0.1.0"

/** @return the library's version string, e.g. "0.1.0" (static, never freed). */
OUTBOX_API const char *outbox_version(void);
/** @return the library's version as OUTBOX_VERSION_NUMBER computes it. */
OUTBOX_API int outbox_version_number(void);
/**@}*/

/** @name Status codes and errors */
/**@{*/
/** Status of every fallible call. The values are stable; new ones are only added. */
typedef enum outbox_status {
    OUTBOX_OK = 0,
    OUTBOX_ERR_INVALID_ARGUMENT = -1, /**< NULL or malformed argument */
    OUTBOX_ERR_INVALID_EVENT = -2,    /**< missing field, invalid JSON, unknown operation */
    OUTBOX_ERR_TOO_LARGE = -3,        /**< payload over event.max_payload_bytes */
    OUTBOX_ERR_DUPLICATE = -4,        /**< idempotency key already used */
    OUTBOX_ERR_DATABASE = -5,         /**< PostgreSQL reported an error */
    OUTBOX_ERR_CONNECTION = -6,       /**< connection closed, broken or unreachable */
    OUTBOX_ERR_BROKER = -7,           /**< RabbitMQ reported an error */
    OUTBOX_ERR_TIMEOUT = -8,          /**< a bounded wait ran out */
    OUTBOX_ERR_SCHEMA = -9,           /**< tables missing, or at a version this library does not know */
    OUTBOX_ERR_TRANSACTION = -10,     /**< the transaction is aborted or in the wrong state */
    OUTBOX_ERR_NO_MEMORY = -11,
    OUTBOX_ERR_STOPPED = -12,         /**< interrupted by a stop request */
    OUTBOX_ERR_INTERNAL = -13,
    OUTBOX_ERR_UNKNOWN_KEY = -14,     /**< configuration key or event field not known */
    OUTBOX_ERR_NOT_FOUND = -15
} outbox_status;

/**
 * @return the message of the last error on the calling thread. Never NULL (an empty string
 * when there was none). Borrowed: valid until the next outbox_* call on this thread.
 */
OUTBOX_API const char *outbox_last_error(void);
/** @return the status of the last error on the calling thread (OUTBOX_OK when none). */
OUTBOX_API outbox_status outbox_last_status(void);
/**
 * The SQLSTATE of the last error on the calling thread, when PostgreSQL reported it (e.g. "22012"
 * for a division by zero in outbox_db_query()): a thread-local beside outbox_last_error(), so it
 * is there for every call that reaches the server, with no failure object to free.
 * @return five characters, or "" when the last error had none (or there was no error). Never
 *         NULL. Borrowed: valid until the next outbox_* call on this thread.
 */
OUTBOX_API const char *outbox_last_sqlstate(void);
/** @return a stable name for a status, e.g. "INVALID_EVENT" (static, never freed). */
OUTBOX_API const char *outbox_status_name(outbox_status status);
/**
 * Whether a call that failed with `status` may succeed if tried again later, unchanged: a server
 * unreachable or dropping the connection (OUTBOX_ERR_CONNECTION), a broker error
 * (OUTBOX_ERR_BROKER), a bounded wait that ran out (OUTBOX_ERR_TIMEOUT). Bad input, a used
 * idempotency key, a missing schema and the rest are not. The same answer in every language.
 * @return 1 when retriable, 0 otherwise (OUTBOX_OK included).
 */
OUTBOX_API int outbox_status_retriable(outbox_status status);
/** Frees a string the library returned as owned. NULL is a no-op. */
OUTBOX_API void outbox_string_free(char *s);
/**@}*/

/** @name Configuration */
/**@{*/
/** Options by key. Destroy with outbox_config_free(). */
typedef struct outbox_config outbox_config;

/**
 * @param[out] out a new configuration holding the defaults.
 * @return OUTBOX_OK, OUTBOX_ERR_INVALID_ARGUMENT (out is NULL), OUTBOX_ERR_NO_MEMORY.
 */
OUTBOX_API outbox_status outbox_config_new(outbox_config **out);
/** Frees a configuration (and nothing else: handles made from it keep their own copy). NULL is a no-op. */
OUTBOX_API void outbox_config_free(outbox_config *cfg);
/**
 * Sets one option, e.g. ("amqp.exchange", "corewrite.fanout") or ("event.type_map", "PRD=Product").
 * Values are UTF-8 text of at most 65536 bytes; exchange, queue and relay names are printable
 * (no control characters), at most 200 bytes; table, schema and channel names are SQL
 * identifiers ([a-z_][a-z0-9_]*).
 * @return OUTBOX_OK, OUTBOX_ERR_UNKNOWN_KEY, or OUTBOX_ERR_INVALID_ARGUMENT (bad value; the
 *         message says why). On error the configuration is unchanged.
 */
OUTBOX_API outbox_status outbox_config_set(outbox_config *cfg, const char *key, const char *value);
/**
 * @param[out] out the option's current value (owned: free with outbox_string_free()). Secrets
 *             (URLs with passwords) read back as "***".
 * @return OUTBOX_OK, OUTBOX_ERR_UNKNOWN_KEY, OUTBOX_ERR_INVALID_ARGUMENT (a NULL argument).
 */
OUTBOX_API outbox_status outbox_config_get(char **out, const outbox_config *cfg, const char *key);
/**
 * Lists the known keys.
 * @param index 0-based
 * @param[out] key borrowed static string; @param[out] help borrowed static string (either may be NULL).
 * @return OUTBOX_OK, or OUTBOX_ERR_NOT_FOUND past the last key.
 */
OUTBOX_API outbox_status outbox_config_key(const char **key, const char **help, size_t index);
/**@}*/

/** @name Database connections */
/**@{*/
/** A PostgreSQL connection, opened by the library or lent by the caller. */
typedef struct outbox_db outbox_db;

/**
 * Opens a connection the library owns.
 * @param[out] out the new handle; close with outbox_db_close().
 * @param conninfo a libpq URL or key=value string (TLS options such as sslmode pass through).
 * @param cfg options (table names, limits); copied, may be NULL for the defaults.
 * @return OUTBOX_OK, OUTBOX_ERR_CONNECTION (unreachable, refused, bad credentials; the message never
 *         contains the password), OUTBOX_ERR_INVALID_ARGUMENT (a NULL argument), OUTBOX_ERR_NO_MEMORY.
 */
OUTBOX_API outbox_status outbox_db_open(outbox_db **out, const char *conninfo, const outbox_config *cfg);
/**
 * Wraps a connection the caller already has (a libpq `PGconn *`). The library never closes,
 * commits or rolls back a lent connection; outbox_db_close() only releases the handle.
 * @param pgconn a `PGconn *` (declared void* so this header does not need libpq's).
 * @param cfg copied, may be NULL.
 * @return OUTBOX_OK, OUTBOX_ERR_INVALID_ARGUMENT (a NULL argument), OUTBOX_ERR_NO_MEMORY.
 */
OUTBOX_API outbox_status outbox_db_wrap(outbox_db **out, void *pgconn, const outbox_config *cfg);
/** Closes an owned connection, or releases a lent one. NULL is a no-op. */
OUTBOX_API void outbox_db_close(outbox_db *db);
/** @return the underlying `PGconn *` (borrowed, valid until outbox_db_close()), or NULL for a NULL handle. */
OUTBOX_API void *outbox_db_pgconn(outbox_db *db);
/**
 * Runs SQL without parameters and without results the caller needs: BEGIN, COMMIT, ROLLBACK,
 * DDL. For the caller's own statements with parameters or rows, use outbox_db_query().
 * @return OUTBOX_OK, OUTBOX_ERR_DATABASE, OUTBOX_ERR_CONNECTION, OUTBOX_ERR_TRANSACTION (aborted
 *         transaction), OUTBOX_ERR_SCHEMA (missing table), OUTBOX_ERR_INVALID_ARGUMENT.
 */
OUTBOX_API outbox_status outbox_db_exec(outbox_db *db, const char *sql);

/** The rows (and command tag) of a statement run by outbox_db_query(). */
typedef struct outbox_rows outbox_rows;

/**
 * Runs one statement of the caller's own, with `$1..$n` text parameters, and keeps its rows (as
 * text). One statement only; an empty one succeeds with no rows. COPY is refused.
 * Its failures are the caller's SQL failing, not the library's: OUTBOX_ERR_DATABASE whatever the
 * SQLSTATE (a unique violation here is no reused idempotency key), OUTBOX_ERR_CONNECTION when the
 * connection is lost. The message is the server's; outbox_last_sqlstate() gives its SQLSTATE.
 * @param[out] out the rows; free with outbox_rows_free(). NULL on failure.
 * @param db the connection (owned or lent); a transaction open on it stays the caller's.
 * @param sql the statement.
 * @param params `nparams` texts, NULL for SQL NULL (each copied); may be NULL when `nparams` is 0.
 * @param nparams the number of parameters (at most 65535).
 * @return OUTBOX_OK; OUTBOX_ERR_DATABASE (the statement failed: syntax, constraint, aborted
 *         transaction, COPY...); OUTBOX_ERR_CONNECTION (closed or lost); OUTBOX_ERR_INVALID_ARGUMENT
 *         (a NULL argument, too many parameters, the connection busy with another query);
 *         OUTBOX_ERR_NO_MEMORY.
 */
OUTBOX_API outbox_status outbox_db_query(outbox_rows **out, outbox_db *db, const char *sql, const char *const *params,
                                         size_t nparams);
/**
 * Frees the rows of outbox_db_query().
 * @param rows the rows; NULL is a no-op.
 */
OUTBOX_API void outbox_rows_free(outbox_rows *rows);
/**
 * @param rows the rows of outbox_db_query(); may be NULL.
 * @return the number of rows (0 for a statement without rows, or NULL).
 */
OUTBOX_API size_t outbox_rows_count(const outbox_rows *rows);
/**
 * @param rows the rows of outbox_db_query(); may be NULL.
 * @return the number of columns (0 for a statement without rows, or NULL).
 */
OUTBOX_API size_t outbox_rows_columns(const outbox_rows *rows);
/**
 * One value, in PostgreSQL's text form.
 * @param rows the rows of outbox_db_query(); may be NULL.
 * @param row the row, from 0.
 * @param col the column, from 0.
 * @param[out] len may be NULL; the value's length in bytes (0 for NULL).
 * @return the value, NUL-terminated (borrowed, valid until outbox_rows_free()); NULL for SQL NULL,
 *         a NULL handle or an index out of range.
 */
OUTBOX_API const char *outbox_rows_value(const outbox_rows *rows, size_t row, size_t col, size_t *len);
/**
 * @param rows the rows of outbox_db_query(); may be NULL.
 * @return the rows the statement affected or returned (INSERT, UPDATE, DELETE, SELECT, ...);
 *         -1 when its command reports none (DDL, SET, an empty statement) or for NULL.
 */
OUTBOX_API int64_t outbox_rows_affected(const outbox_rows *rows);
/**
 * @param rows the rows of outbox_db_query(); may be NULL.
 * @return the command tag, e.g. "SELECT 2" or "INSERT 0 1" ("" for an empty statement); borrowed,
 *         valid until outbox_rows_free(); NULL for NULL.
 */
OUTBOX_API const char *outbox_rows_command(const outbox_rows *rows);
/** @return the version of the libpq the library runs with (PQlibVersion(), e.g. 160004). */
OUTBOX_API int outbox_libpq_version(void);
/** Transaction state of the connection. */
typedef enum outbox_tx_state {
    OUTBOX_TX_IDLE = 0,     /**< no transaction open */
    OUTBOX_TX_ACTIVE = 1,   /**< a query is running */
    OUTBOX_TX_INTRANS = 2,  /**< inside a transaction */
    OUTBOX_TX_INERROR = 3,  /**< inside a failed transaction: roll back */
    OUTBOX_TX_UNKNOWN = 4   /**< connection is bad */
} outbox_tx_state;
/** @return the transaction state of the connection; OUTBOX_TX_UNKNOWN for NULL or a bad connection. */
OUTBOX_API outbox_tx_state outbox_db_tx_state(outbox_db *db);

/** Which tables outbox_migrate() creates or upgrades. */
typedef enum outbox_migrate_target {
    OUTBOX_MIGRATE_ALL = 0,
    OUTBOX_MIGRATE_OUTBOX = 1, /**< the outbox (events, the relay's progress, the view) and its counter table */
    OUTBOX_MIGRATE_INBOX = 2   /**< the consumer inbox tables */
} outbox_migrate_target;
/**
 * Creates or upgrades the tables named by the db's configuration, idempotently, recording the
 * schema version in `<schema>.outbox_migrations`. Concurrent migrations serialise on an
 * advisory lock. On an idle connection it runs in its own transaction; inside the caller's
 * transaction it joins it.
 * The outbox's schema version is 2: events written once into `<table>_events`, partitioned by
 * position (partitions made outbox.partitions_ahead ahead, outbox.partition_events positions
 * each), the relay's progress in tables of its own, and `<table>` a view with version 1's columns.
 * A version-1 table is upgraded in place: it becomes `<table>_v1` with its published rows, and
 * its unpublished rows move to the events table in per-aggregate order; writers of the previous
 * version go on inserting into `<table>`.
 * @param[out] version the outbox schema version now installed (may be NULL).
 * @return OUTBOX_OK, OUTBOX_ERR_SCHEMA (tables at a newer version than this library knows),
 *         OUTBOX_ERR_TRANSACTION (the caller's transaction is aborted), OUTBOX_ERR_DATABASE,
 *         OUTBOX_ERR_CONNECTION, OUTBOX_ERR_INVALID_ARGUMENT.
 */
OUTBOX_API outbox_status outbox_migrate(int *version, outbox_db *db, outbox_migrate_target target);
/**@}*/

/** @name Events */
/**@{*/
/** An event under construction; reusable. Destroy with outbox_event_free(). */
typedef struct outbox_event outbox_event;

/**
 * Creates an empty event builder; free with outbox_event_free(). Reusable across writes.
 * @param[out] out the new handle (owned by the caller).
 * @return OUTBOX_OK, OUTBOX_ERR_INVALID_ARGUMENT (out is NULL), OUTBOX_ERR_NO_MEMORY.
 */
OUTBOX_API outbox_status outbox_event_new(outbox_event **out);
/** Frees an event builder. NULL is a no-op. */
OUTBOX_API void outbox_event_free(outbox_event *ev);
/**
 * Sets a field from a NUL-terminated string. Fields:
 * - "aggregate_type" (required; letters, digits, '_' and '-'), "aggregate_id" (required),
 * - "operation" (required): POST, PUT, PATCH, DELETE or FORCE_DELETE (a DELETE named ForceDeleted),
 * - "payload" (required, a JSON object), "previous_payload" (a JSON object), "metadata" (a JSON object),
 * - "user", "event_type" (explicit; wins over naming), "idempotency_key",
 * - "event_id" (an explicit UUID; by default a new time-ordered UUIDv7), "force_delete" ("true"/"false").
 * Values are checked for UTF-8 here; the rest of the validation happens in outbox_write().
 * @return OUTBOX_OK; OUTBOX_ERR_UNKNOWN_KEY for an unknown field, OUTBOX_ERR_INVALID_EVENT for a bad
 *         value, OUTBOX_ERR_INVALID_ARGUMENT (a NULL argument).
 */
OUTBOX_API outbox_status outbox_event_set(outbox_event *ev, const char *field, const char *value);
/**
 * As outbox_event_set(), with an explicit length; a value containing a NUL byte is rejected.
 * @return as outbox_event_set().
 */
OUTBOX_API outbox_status outbox_event_set_n(outbox_event *ev, const char *field, const char *value, size_t len);
/**
 * Clears an optional field.
 * @return OUTBOX_OK, OUTBOX_ERR_INVALID_ARGUMENT (a required field, or NULL).
 */
OUTBOX_API outbox_status outbox_event_unset(outbox_event *ev, const char *field);
/** @return the event's id after a write or render (borrowed, valid until the event changes or is freed), or NULL. */
OUTBOX_API const char *outbox_event_id(const outbox_event *ev);
/** @return the event type after a write or render (borrowed, as outbox_event_id()), or NULL. */
OUTBOX_API const char *outbox_event_type(const outbox_event *ev);
/** @return the per-aggregate sequence number assigned by outbox_write(), or 0 before it. */
OUTBOX_API int64_t outbox_event_seq(const outbox_event *ev);

/**
 * Inserts the event into the outbox **in the connection's current transaction**: the caller
 * BEGINs, writes its business rows, calls outbox_write(), then COMMITs (both persist) or rolls
 * back (neither does). The library never begins, commits or rolls back.
 *
 * The event gets a per-aggregate sequence number; two transactions writing the same aggregate
 * are numbered in commit order (the second waits for the first's commit at this call).
 *
 * Bad input is rejected before anything reaches the database, so the caller's transaction
 * stays usable. A duplicate idempotency key returns OUTBOX_ERR_DUPLICATE and, inside a
 * transaction, also leaves it usable (a savepoint is used for events that carry a key).
 * After a successful write, outbox_event_id() and outbox_event_seq() tell what was written;
 * the next write with the same handle makes a new event (unless "event_id" is set).
 * After a failed write the id is kept, so retrying in a new transaction writes the same event.
 * @return OUTBOX_OK; OUTBOX_ERR_INVALID_EVENT, OUTBOX_ERR_TOO_LARGE (bad input: nothing sent to
 *         the database); OUTBOX_ERR_DUPLICATE (idempotency key used); OUTBOX_ERR_TRANSACTION (the
 *         caller's transaction is already aborted); OUTBOX_ERR_SCHEMA (tables missing: migrate);
 *         OUTBOX_ERR_CONNECTION; OUTBOX_ERR_DATABASE; OUTBOX_ERR_INVALID_ARGUMENT (NULL, busy connection).
 */
OUTBOX_API outbox_status outbox_write(outbox_db *db, outbox_event *ev);

/**
 * The connection's socket, for an event loop that waits on it (outbox_write_send()).
 * @return the file descriptor (a SOCKET on Windows), or -1 for NULL or a closed connection.
 */
OUTBOX_API int outbox_db_socket(const outbox_db *db);

/** What a write begun with outbox_write_send() waits for on outbox_db_socket(). */
typedef enum outbox_write_wait {
    OUTBOX_WRITE_DONE = 0,     /**< nothing: the write is finished */
    OUTBOX_WRITE_READABLE = 1, /**< the socket readable; then outbox_write_poll() */
    OUTBOX_WRITE_WRITABLE = 2, /**< part of the statement is unsent: the socket writable (or readable); then poll */
    OUTBOX_WRITE_BLOCKING = 3  /**< nothing was done: this write takes more than one statement; call outbox_write() */
} outbox_write_wait;

/**
 * outbox_write() without blocking, for a caller that waits in an event loop of its own (libuv,
 * epoll): this call validates the event and sends its statement without waiting for the server;
 * the caller then waits on outbox_db_socket() as `*wait` says and calls outbox_write_poll() until
 * it says OUTBOX_WRITE_DONE. The write is exactly outbox_write()'s: the same statement, in the
 * connection's current transaction (or as its own when none is open), the same results and errors.
 * A statement that cannot be sent at once (a large payload, a full socket buffer) is not waited
 * for either: *wait is then OUTBOX_WRITE_WRITABLE. On a connection the library owns, the first
 * write also prepares its statement, still without blocking (poll then waits once more).
 * An event with an idempotency key takes more than one statement (a savepoint, a lookup after a
 * duplicate): *wait is OUTBOX_WRITE_BLOCKING, nothing is done, and the caller uses outbox_write().
 * Until outbox_write_poll() says OUTBOX_WRITE_DONE or fails, the connection is busy: any other call
 * on `db` fails with OUTBOX_ERR_INVALID_ARGUMENT.
 * @param[out] wait what to wait for: OUTBOX_WRITE_READABLE or OUTBOX_WRITE_WRITABLE once sent,
 *             OUTBOX_WRITE_BLOCKING; OUTBOX_WRITE_DONE after a failure.
 * @return OUTBOX_OK (sent, or OUTBOX_WRITE_BLOCKING); otherwise outbox_write()'s errors before or at
 *         sending: OUTBOX_ERR_INVALID_EVENT, OUTBOX_ERR_TOO_LARGE (nothing sent);
 *         OUTBOX_ERR_TRANSACTION (the caller's transaction is already aborted);
 *         OUTBOX_ERR_CONNECTION; OUTBOX_ERR_INVALID_ARGUMENT (NULL, busy connection).
 */
OUTBOX_API outbox_status outbox_write_send(outbox_write_wait *wait, outbox_db *db, outbox_event *ev);
/**
 * Goes on with the write outbox_write_send() began, once its socket is ready as `*wait` said (a
 * call too early only finds nothing new): reads what the server sent, and when the result is there
 * finishes as outbox_write() does (outbox_event_seq() set) and sets *wait to OUTBOX_WRITE_DONE.
 * After a failure the write is over and the connection usable again (unless lost), as after
 * outbox_write()'s failure.
 * @param[out] wait OUTBOX_WRITE_DONE when the write is finished (or failed), else what to wait for.
 * @param ev the event given to outbox_write_send().
 * @return OUTBOX_OK (finished or still waiting); otherwise outbox_write()'s errors from the server:
 *         OUTBOX_ERR_SCHEMA (tables missing: migrate), OUTBOX_ERR_TRANSACTION, OUTBOX_ERR_CONNECTION,
 *         OUTBOX_ERR_DATABASE, OUTBOX_ERR_TIMEOUT (statement timeout); OUTBOX_ERR_INVALID_ARGUMENT (NULL,
 *         or no write in progress on `db`).
 */
OUTBOX_API outbox_status outbox_write_poll(outbox_write_wait *wait, outbox_db *db, outbox_event *ev);

/** A rendered statement for drivers whose connection cannot be lent (node-postgres, PDO, asyncpg). */
typedef struct outbox_statement outbox_statement;
/**
 * Renders the exact statement outbox_write() would run, with its parameters as text, after the
 * same validation, naming and id assignment. Run it with your driver inside your transaction.
 * Placeholders are $1..$n, or '?' with the option render.placeholders=qmark; each parameter is
 * used once, in order. The statement returns one row with one column, the sequence number.
 * @param cfg may be NULL for the defaults.
 * @param[out] out free with outbox_statement_free().
 * @return OUTBOX_OK, or the validation errors of outbox_write(): OUTBOX_ERR_INVALID_EVENT,
 *         OUTBOX_ERR_TOO_LARGE, OUTBOX_ERR_INVALID_ARGUMENT (a NULL argument).
 */
OUTBOX_API outbox_status outbox_render_write(outbox_statement **out, const outbox_config *cfg, outbox_event *ev);
/** Frees a rendered statement and the strings borrowed from it. NULL is a no-op. */
OUTBOX_API void outbox_statement_free(outbox_statement *st);
/** @return the SQL text (borrowed, valid until outbox_statement_free()). */
OUTBOX_API const char *outbox_statement_sql(const outbox_statement *st);
/** @return the number of parameters. */
OUTBOX_API size_t outbox_statement_param_count(const outbox_statement *st);
/** @return parameter `index` as text (borrowed, as outbox_statement_sql()), or NULL for SQL NULL or a bad index. */
OUTBOX_API const char *outbox_statement_param(const outbox_statement *st, size_t index);
/**
 * @param[out] out the statement as one JSON object {"sql": "...", "params": ["...", null, ...]}
 * (owned: free with outbox_string_free()) — convenient for FFI callers.
 * @return OUTBOX_OK, OUTBOX_ERR_INVALID_ARGUMENT, OUTBOX_ERR_NO_MEMORY.
 */
OUTBOX_API outbox_status outbox_statement_json(char **out, const outbox_statement *st);
/**@}*/

/** @name Relay */
/**@{*/
/** Moves committed events to RabbitMQ with publisher confirms. Destroy with outbox_relay_free(). */
typedef struct outbox_relay outbox_relay;

/**
 * What one relay step did. Size-prefixed so fields can be appended without breaking callers:
 * set `size` to sizeof(outbox_relay_stats) (outbox_relay_stats_init() does) before passing it;
 * the library fills only the fields that fit in `size`.
 *
 * `published`, `failed`, `dead` and `mark_us` count what the step recorded. Every step records
 * its outcomes (receipts, parked events, the relay's cursor) in one statement before it returns,
 * so when outbox_relay_step() returns every outcome so far is committed. A relay standing by
 * (another one is active on the table) reports zeroes.
 *
 * `claimed`, `claim_us` and `mark_us` keep the names of storage version 1 (which claimed events
 * and marked them), so the layout and the API hold: they are the events read, the time reading,
 * and the time recording the outcomes.
 */
typedef struct outbox_relay_stats {
    size_t size;
    int64_t claimed;     /**< events read for the step (new ones, and ones due for a retry) */
    int64_t published;   /**< confirmed by the broker and recorded as published (a receipt) */
    int64_t failed;      /**< nacked or returned: parked, retried later with backoff (or now FAILED) */
    int64_t dead;        /**< of `failed`, those that reached relay.max_attempts and are FAILED */
    int64_t held_back;   /**< not published: an earlier event of their aggregate was not confirmed or is parked */
    int64_t unroutable;  /**< returned by the broker: no queue bound to the exchange */
    int64_t nacked;      /**< negatively confirmed by the broker */
    int64_t unconfirmed; /**< no confirm within relay.confirm_timeout_ms: left PENDING */
    int64_t claim_us;    /**< time spent reading events */
    int64_t publish_us;  /**< time spent publishing and waiting for confirms */
    int64_t mark_us;     /**< time spent recording outcomes (one autocommit statement) */
    int64_t total_us;
    int32_t blocked;     /**< 1 when the broker blocked publishing (resource alarm) during the step */
} outbox_relay_stats;

/** Zeroes the stats and sets their size. */
static inline void outbox_relay_stats_init(outbox_relay_stats *stats) {
    memset(stats, 0, sizeof *stats);
    stats->size = sizeof *stats;
}

typedef enum outbox_log_level {
    OUTBOX_LOG_DEBUG = 0,
    OUTBOX_LOG_INFO = 1,
    OUTBOX_LOG_WARN = 2,
    OUTBOX_LOG_ERROR = 3
} outbox_log_level;

/**
 * A log sink. Called on the thread that runs outbox_relay_step()/outbox_relay_run(); `message`
 * is borrowed for the duration of the call and never contains a password.
 */
typedef void (*outbox_log_fn)(outbox_log_level level, const char *message, void *user_data);

/**
 * Creates a relay. The configuration must name both servers: "pg.url" and "amqp.url"; it is
 * copied. Connections are opened by the first step, and re-opened after a failure.
 * @return OUTBOX_OK, OUTBOX_ERR_INVALID_ARGUMENT (NULL, or no pg.url or no amqp.url: there is no
 *         default broker), OUTBOX_ERR_INTERNAL.
 */
OUTBOX_API outbox_status outbox_relay_new(outbox_relay **out, const outbox_config *cfg);
/** Closes the relay's connections and frees it; must not run concurrently with its step/run. NULL is a no-op. */
OUTBOX_API void outbox_relay_free(outbox_relay *relay);
/**
 * Sets where the relay logs: state changes (connected, active, standing by, stopped) at info, failures with
 * event ids at warn, a summary of every step at debug.
 * NULL `fn` silences it (the default). `user_data` is passed back unchanged.
 * @return OUTBOX_OK, OUTBOX_ERR_INVALID_ARGUMENT (relay is NULL).
 */
OUTBOX_API outbox_status outbox_relay_set_logger(outbox_relay *relay, outbox_log_fn fn, void *user_data);
/**
 * One relay round. One relay per outbox table is active: the one holding the table's session
 * advisory lock. A relay that does not hold it tries to take it; while another relay holds it, the
 * step does nothing and returns OUTBOX_OK (the relay stands by). The active relay reads up to
 * relay.batch_size events in position order (new ones, due parked ones, earlier ones not yet
 * confirmed), publishes them with publisher confirms (per aggregate, an event goes out only after
 * the previous one was confirmed), and records in one autocommit statement receipts for the
 * confirmed ones, the failed ones (with the later events of their aggregates) parked for a retry
 * with backoff, and its cursor. It never changes an event.
 * After outbox_relay_stop() a step still reads and records but publishes nothing new, until
 * outbox_relay_reset().
 * With "relay.overlap" true (default false), once the step's batch has nothing left to send, the
 * step publishes the next batch (read ahead during a full batch) while the batch's confirms come
 * in, records its own batch only, and returns with the next one in flight: the next step (or
 * outbox_relay_settle()) records it. The broker's window then stays full from batch to batch;
 * outbox_relay_run() always steps this way. A relay freed with a batch in flight leaves its
 * events pending, published again by the next relay (duplicates, never loss).
 * @param[in,out] stats may be NULL; see outbox_relay_stats.
 * @return OUTBOX_OK, or OUTBOX_ERR_CONNECTION / OUTBOX_ERR_BROKER / OUTBOX_ERR_TIMEOUT /
 *         OUTBOX_ERR_DATABASE when a server failed (the next step reconnects; no unconfirmed
 *         event is ever recorded as published); OUTBOX_ERR_SCHEMA (the outbox tables are missing);
 *         OUTBOX_ERR_INVALID_ARGUMENT (NULL relay, stats without its size, an amqp.url that does
 *         not parse).
 */
OUTBOX_API outbox_status outbox_relay_step(outbox_relay *relay, outbox_relay_stats *stats);
/**
 * Confirms and records the batch a step left in flight ("relay.overlap"), publishing nothing new
 * and reading nothing; with none in flight it does nothing (always so without "relay.overlap").
 * Call it before outbox_relay_free() after steps with "relay.overlap".
 * @param[out] stats may be NULL; set its size first (outbox_relay_stats_init()). What it recorded
 *         (zeroes when nothing was in flight).
 * @return OUTBOX_OK, OUTBOX_ERR_INVALID_ARGUMENT (NULL relay, or stats without its size), or a
 *         step's server errors (OUTBOX_ERR_CONNECTION, OUTBOX_ERR_BROKER, OUTBOX_ERR_TIMEOUT,
 *         OUTBOX_ERR_DATABASE; the batch's events then stay pending).
 */
OUTBOX_API outbox_status outbox_relay_settle(outbox_relay *relay, outbox_relay_stats *stats);
/**
 * Runs steps until outbox_relay_stop(): wakes on LISTEN/NOTIFY (relay.listen) or every
 * relay.poll_interval_ms, reconnects with backoff, keeps AMQP heartbeats while idle.
 * Every failure (a server, a missing table, an amqp.url that does not parse) is logged and
 * retried with backoff (at least 5 s for configuration errors), never returned.
 * While another relay is active on the table, this one stands by: its steps do nothing until the
 * active relay stops or its connection goes, then it takes over from the stored cursor. On a stop
 * the relay closes its connection, which lets a relay standing by take over at once.
 * @return OUTBOX_OK after a stop, with every event either confirmed-and-recorded or still pending;
 *         OUTBOX_ERR_INVALID_ARGUMENT (relay is NULL).
 */
OUTBOX_API outbox_status outbox_relay_run(outbox_relay *relay);
/**
 * Asks a running step or run to finish what is in flight and return. Safe to call from any
 * thread and from a signal handler. NULL is a no-op.
 */
OUTBOX_API void outbox_relay_stop(outbox_relay *relay);
/**
 * Clears a stop request so outbox_relay_run() can be called again.
 * @return OUTBOX_OK, OUTBOX_ERR_INVALID_ARGUMENT (NULL).
 */
OUTBOX_API outbox_status outbox_relay_reset(outbox_relay *relay);
/**
 * What one step of outbox_relay_run() came to, for metrics and health checks. Size-prefixed: the
 * library sets `size` to the size of the struct it fills; a caller built against a newer header
 * reads a field only when `size` covers it.
 */
typedef struct outbox_relay_step_info {
    size_t size;
    outbox_status status;            /**< OUTBOX_OK, or the failed step's error (the run retries it) */
    const char *error;               /**< the failure's message ("" on success); borrowed for the call */
    const outbox_relay_stats *stats; /**< what the step did (zeroes after a failure); borrowed for the call */
    int32_t pg_up;                   /**< 1 when the relay holds a PostgreSQL connection */
    int32_t amqp_up;                 /**< 1 when the relay holds a RabbitMQ connection */
    const char *amqp_node;           /**< "host:port" of the current or last RabbitMQ node, "" before the first */
    int64_t retry_in_ms;             /**< after a failure, the wait before the next step; 0 on success */
} outbox_relay_step_info;
/**
 * A per-step callback. Called on the thread running outbox_relay_run(), after every step,
 * successful or not; must not call back into the relay. Everything `info` points to is borrowed
 * for the duration of the call.
 */
typedef void (*outbox_relay_step_fn)(const outbox_relay_step_info *info, void *user_data);
/**
 * Sets the relay's per-step callback (one at a time). NULL `fn` removes it. `user_data` is passed
 * back unchanged; the library does not own it.
 * @return OUTBOX_OK, OUTBOX_ERR_INVALID_ARGUMENT (relay is NULL).
 */
OUTBOX_API outbox_status outbox_relay_set_step_callback(outbox_relay *relay, outbox_relay_step_fn fn, void *user_data);
/**@}*/

/** @name Consumers: dedupe (inbox) and the consumer runtime */
/**@{*/
/** What outbox_consumer_dedupe() found. Size-prefixed like outbox_relay_stats. */
typedef struct outbox_dedupe_result {
    size_t size;
    int32_t first_time;   /**< 1: recorded now, process it; 0: already processed, skip it */
    int32_t order;        /**< an outbox_order value (inbox.order_check) */
    int64_t previous_seq; /**< highest sequence of the aggregate processed before (0 = none) */
} outbox_dedupe_result;

/** Order of an event within its aggregate, as the consumer saw it. */
typedef enum outbox_order {
    OUTBOX_ORDER_UNCHECKED = 0, /**< not checked: a duplicate, no sequence, or inbox.order_check=false */
    OUTBOX_ORDER_IN_ORDER = 1,  /**< the next sequence number of its aggregate */
    OUTBOX_ORDER_STALE = 2,     /**< a later (or equal) sequence of its aggregate was already processed */
    OUTBOX_ORDER_GAP = 3        /**< earlier sequence numbers of its aggregate were never processed */
} outbox_order;

/** Zeroes the result and sets its size. */
static inline void outbox_dedupe_result_init(outbox_dedupe_result *r) {
    memset(r, 0, sizeof *r);
    r->size = sizeof *r;
}

/**
 * Records (consumer, event) in the inbox table **in the connection's current transaction** and
 * says whether this is the first time. Commit it together with the handler's own writes: a
 * crash before the commit leaves no trace (the redelivery is processed), and after it every
 * redelivery is answered first_time = 0 and writes nothing.
 * With inbox.order_check (default), it also tracks the highest sequence per aggregate and
 * reports stale or gapped events in `order`. Outside a transaction the row commits at once
 * (autocommit): allowed, for tools that only record, but it gives up the exactly-once effect.
 * @param[out] out may be NULL; otherwise set its size first (outbox_dedupe_result_init()).
 * @param consumer the consumer's name (1..255 bytes).
 * @param event_id the message's OUTBOX_ID (a UUID).
 * @param aggregate_type, aggregate_id may be NULL (no order check); seq 0 = unknown.
 * @return OUTBOX_OK; OUTBOX_ERR_INVALID_ARGUMENT (NULL, a non-UUID id, a bad consumer name; nothing
 *         sent, the transaction stays usable); OUTBOX_ERR_TRANSACTION (aborted transaction);
 *         OUTBOX_ERR_SCHEMA (inbox not migrated); OUTBOX_ERR_DATABASE; OUTBOX_ERR_CONNECTION.
 */
OUTBOX_API outbox_status outbox_consumer_dedupe(outbox_dedupe_result *out, outbox_db *db, const char *consumer,
                                                const char *event_id, const char *aggregate_type,
                                                const char *aggregate_id, int64_t seq);
/**
 * The statement outbox_consumer_dedupe() runs, for drivers whose connection cannot be lent. It
 * returns one row: first_time (boolean), previous_seq (bigint or NULL), positions updated.
 * @return OUTBOX_OK, OUTBOX_ERR_INVALID_ARGUMENT (NULL, non-UUID id, bad consumer name).
 */
OUTBOX_API outbox_status outbox_render_dedupe(outbox_statement **out, const outbox_config *cfg, const char *consumer,
                                              const char *event_id, const char *aggregate_type,
                                              const char *aggregate_id, int64_t seq);
/**
 * What the row of a rendered dedupe statement (outbox_render_dedupe(), run by the caller's own
 * driver) means, as outbox_consumer_dedupe() reports it: the order check's verdict from the row's
 * first_time and previous_seq and the event's aggregate and sequence.
 * @param[out] out set its size first (outbox_dedupe_result_init()).
 * @param cfg inbox.order_check; NULL for the defaults.
 * @param aggregate_type, aggregate_id, seq as passed to outbox_render_dedupe().
 * @param first_time the row's first_time (non-zero: true).
 * @param previous_seq the row's previous_seq; a negative value for NULL.
 * @return OUTBOX_OK; OUTBOX_ERR_INVALID_ARGUMENT (out NULL or without its size).
 */
OUTBOX_API outbox_status outbox_dedupe_interpret(outbox_dedupe_result *out, const outbox_config *cfg,
                                                 const char *aggregate_type, const char *aggregate_id, int64_t seq,
                                                 int first_time, int64_t previous_seq);
/**
 * outbox_dedupe_interpret() from the row as a driver prints it, so no face decodes it itself.
 * @param first_time the row's first column: t/f, true/false (any case) or 1/0.
 * @param previous_seq the row's second column as digits; NULL for SQL NULL.
 * @return OUTBOX_OK; OUTBOX_ERR_INVALID_ARGUMENT (out NULL or without its size, first_time not a
 *         boolean, previous_seq not a number).
 */
OUTBOX_API outbox_status outbox_dedupe_interpret_row(outbox_dedupe_result *out, const outbox_config *cfg,
                                                     const char *aggregate_type, const char *aggregate_id,
                                                     int64_t seq, const char *first_time, const char *previous_seq);
/**
 * Removes inbox rows processed more than `older_than_s` seconds ago. Run as the tables' owner it
 * drops each inbox partition (inbox.partition_s wide, by the time in the event ids) whose ids are
 * all older than that and whose rows were all processed before it, makes partitions ahead
 * (inbox.partitions_ahead), and deletes older rows of ids that are not uuid v7 in batches of
 * `batch`; any other role deletes rows in batches (short statements, no long locks). A partition's
 * rows may so outlive the age by up to inbox.partition_s. An age below inbox.retention_s is refused
 * (OUTBOX_ERR_INVALID_ARGUMENT), so nothing a redelivery could still need is deleted.
 * @param[out] deleted may be NULL.
 * @return OUTBOX_OK, OUTBOX_ERR_INVALID_ARGUMENT (age below inbox.retention_s or over 100 years,
 *         batch <= 0, NULL),
 *         OUTBOX_ERR_DATABASE, OUTBOX_ERR_CONNECTION, OUTBOX_ERR_SCHEMA.
 */
OUTBOX_API outbox_status outbox_inbox_purge(int64_t *deleted, outbox_db *db, int64_t older_than_s, int batch);

/** A consumer of its own durable queue on the exchange. Destroy with outbox_consumer_free(). */
typedef struct outbox_consumer outbox_consumer;
/** One delivered event. Destroy with outbox_message_free(). */
typedef struct outbox_message outbox_message;

/**
 * Creates a consumer named `name` (its queue is consumer.queue, default the name; a quorum
 * queue by default, bound to amqp.exchange, dead letters to `<queue>.dead`). Needs amqp.url;
 * pg.url when outbox_consumer_run() should open its own database connection. Connects lazily.
 * Partitioned subscriber (README "Partitioned subscribers"): consumer.partitions=P > 0 consumes
 * the partition queues `<queue>.p0..` this instance is assigned among the live instances of
 * `name` (consumer.instance, consumer.lease_ms) instead of `<queue>`; it needs pg.url and quorum
 * queues.
 * @return OUTBOX_OK, OUTBOX_ERR_INVALID_ARGUMENT (NULL, a bad name, no amqp.url, or partitions with
 *         consumer.queue_type=classic), OUTBOX_ERR_NO_MEMORY.
 */
OUTBOX_API outbox_status outbox_consumer_new(outbox_consumer **out, const outbox_config *cfg, const char *name);
/**
 * Closes the consumer's connection (unacknowledged messages return to the queue) and frees it;
 * must not run concurrently with its next/run. NULL is a no-op.
 */
OUTBOX_API void outbox_consumer_free(outbox_consumer *consumer);
/**
 * Declares the topology and starts consuming now (otherwise the first next/run does).
 * @return OUTBOX_OK, OUTBOX_ERR_INVALID_ARGUMENT (NULL, or an amqp.url that does not parse; a
 *         partitioned subscriber recorded with another consumer.partitions, no pg.url, or a broker
 *         without the consistent-hash exchange plugin), OUTBOX_ERR_CONNECTION (broker or, for a
 *         partitioned subscriber, PostgreSQL unreachable, or login refused), OUTBOX_ERR_BROKER (e.g.
 *         the queue exists with other arguments), OUTBOX_ERR_DATABASE, OUTBOX_ERR_TIMEOUT.
 */
OUTBOX_API outbox_status outbox_consumer_connect(outbox_consumer *consumer);
/**
 * Waits at most timeout_ms for the next event. Messages that are not events (not JSON, missing
 * OUTBOX_ID/EVENT_TYPE/AGGREGATE_TYPE/AGGREGATE_ID/PAYLOAD, over consumer.max_body_bytes, wrong
 * content type) go to the dead-letter queue with the reason in header x-outbox-dead-reason.
 * @param[out] out the event (free with outbox_message_free()); NULL on timeout.
 * @return OUTBOX_OK with an event, OUTBOX_ERR_TIMEOUT when none came, OUTBOX_ERR_STOPPED after a stop;
 *         OUTBOX_ERR_INVALID_ARGUMENT (NULL, or an amqp.url that does not parse), and the errors of
 *         outbox_consumer_connect() when it connects: OUTBOX_ERR_CONNECTION (broker unreachable or
 *         the connection lost: unacknowledged messages are redelivered), OUTBOX_ERR_BROKER.
 */
OUTBOX_API outbox_status outbox_consumer_next(outbox_message **out, outbox_consumer *consumer, int timeout_ms);
/**
 * Acknowledges: the broker forgets the message. Call after your transaction committed.
 * @return OUTBOX_OK, OUTBOX_ERR_CONNECTION (the connection was lost: the broker will redeliver),
 *         OUTBOX_ERR_TIMEOUT, OUTBOX_ERR_INVALID_ARGUMENT.
 */
OUTBOX_API outbox_status outbox_consumer_ack(outbox_consumer *consumer, const outbox_message *msg);
/**
 * Negative acknowledgement; requeue != 0 redelivers it (and counts a delivery).
 * @return as outbox_consumer_ack().
 */
OUTBOX_API outbox_status outbox_consumer_nack(outbox_consumer *consumer, const outbox_message *msg, int requeue);
/**
 * Sends the message to the dead-letter queue with `reason` in its headers, then acks it.
 * @return OUTBOX_OK, OUTBOX_ERR_BROKER (the broker refused the publish; the message stays
 *         queued), OUTBOX_ERR_TIMEOUT, OUTBOX_ERR_CONNECTION, OUTBOX_ERR_INVALID_ARGUMENT.
 */
OUTBOX_API outbox_status outbox_consumer_dead_letter(outbox_consumer *consumer, const outbox_message *msg,
                                                     const char *reason);
/**
 * outbox_consumer_dedupe() for a delivered message, with the consumer's name.
 * @return as outbox_consumer_dedupe().
 */
OUTBOX_API outbox_status outbox_consumer_dedupe_message(outbox_dedupe_result *out, outbox_db *db,
                                                        const outbox_consumer *consumer, const outbox_message *msg);
/**
 * Opens the handler's transaction on `db` and deduplicates `msg` in it, in one round trip: BEGIN
 * and the statement of outbox_consumer_dedupe_message() are sent together (libpq pipeline mode).
 * The fast path for a hand-written consumer loop; outbox_consumer_run() uses it too. On
 * OUTBOX_OK the transaction is open: apply the effects when `out->first_time`, then COMMIT (or
 * ROLLBACK). On failure no transaction is left open.
 * @param[out] out may be NULL; otherwise set its size first (outbox_dedupe_result_init()).
 * @return as outbox_consumer_dedupe(); OUTBOX_ERR_TRANSACTION when `db` is already in a transaction.
 */
OUTBOX_API outbox_status outbox_consumer_begin(outbox_dedupe_result *out, outbox_db *db,
                                               const outbox_consumer *consumer, const outbox_message *msg);

/**
 * A handler for outbox_consumer_run(): called inside the consumer's transaction on `tx`, once
 * per event (duplicates are skipped). Return 0 for success (commit, ack); non-zero for failure
 * (roll back). With consumer.on_failure=park (the default) a failure parks the event's aggregate:
 * OUTBOX_HANDLER_PERMANENT says the event can never succeed (parked at once); any other non-zero
 * value is transient (retried with backoff, parked after consumer.max_attempts); see "Parked
 * aggregates". With consumer.on_failure=requeue: redelivered, dead-lettered after
 * consumer.delivery_limit attempts. Call outbox_handler_error() before returning non-zero to say why.
 */
typedef int (*outbox_handler_fn)(outbox_db *tx, const outbox_message *msg, void *user_data);
/** Sets the failure reason of the running handler (copied). */
OUTBOX_API void outbox_handler_error(const char *reason);
/**
 * Handles events until outbox_consumer_stop(): for each, BEGIN on `db`, dedupe, the handler,
 * COMMIT, ack. `db` NULL: the consumer opens (and reopens after a loss) its own connection
 * from pg.url. Reconnects to the broker by itself. Never acks a message whose effect was not
 * committed. Failures of its own connections (broker, database) are logged and retried with
 * backoff, never returned.
 * @return OUTBOX_OK after a stop; OUTBOX_ERR_INVALID_ARGUMENT (NULL consumer or fn, no `db` and no
 *         pg.url, a queue name the broker refuses); OUTBOX_ERR_CONNECTION (the lent `db` was lost:
 *         the library cannot reopen a connection it does not own; the unacknowledged message is
 *         redelivered); OUTBOX_ERR_SCHEMA (the inbox table is missing on the lent `db`);
 *         OUTBOX_ERR_INTERNAL.
 */
OUTBOX_API outbox_status outbox_consumer_run(outbox_consumer *consumer, outbox_db *db, outbox_handler_fn fn,
                                             void *user_data);
/** Asks next/run to return; safe from any thread and from a signal handler. NULL is a no-op. */
OUTBOX_API void outbox_consumer_stop(outbox_consumer *consumer);
/**
 * Clears a stop request so next/run can be used again.
 * @return OUTBOX_OK, OUTBOX_ERR_INVALID_ARGUMENT (NULL).
 */
OUTBOX_API outbox_status outbox_consumer_reset(outbox_consumer *consumer);
/**
 * Sets where the consumer logs (as outbox_relay_set_logger()).
 * @return OUTBOX_OK, OUTBOX_ERR_INVALID_ARGUMENT (consumer is NULL).
 */
OUTBOX_API outbox_status outbox_consumer_set_logger(outbox_consumer *consumer, outbox_log_fn fn, void *user_data);

/* ---- A consumer loop of your own (the Python and Node packages' loops): settle and retry ---- */

/** How the loop's transaction for one message ended; passed to outbox_consumer_settle(). */
typedef enum outbox_outcome {
    OUTBOX_OUTCOME_HANDLED = 0,        /**< committed with the handler's effects: acknowledge */
    OUTBOX_OUTCOME_DUPLICATE = 1,      /**< committed; the dedupe said already processed, the handler did not run: acknowledge */
    OUTBOX_OUTCOME_HANDLER_FAILED = 2, /**< the handler failed and the transaction was rolled back: an attempt */
    OUTBOX_OUTCOME_NOT_PROCESSED = 3,  /**< not the handler's failure (database lost, BEGIN, dedupe or COMMIT failed, interrupted): requeue, no attempt */
    OUTBOX_OUTCOME_HELD = 4            /**< committed among its aggregate's held events (parked aggregates): acknowledge */
} outbox_outcome;

/** What outbox_consumer_settle() did with the message. */
typedef enum outbox_settle_action {
    OUTBOX_SETTLED_ACKED = 1,        /**< acknowledged: the broker forgets it */
    OUTBOX_SETTLED_REQUEUED = 2,     /**< negatively acknowledged with requeue: it is delivered again */
    OUTBOX_SETTLED_DEAD_LETTERED = 3 /**< published to the dead-letter queue (confirmed), then acknowledged */
} outbox_settle_action;

/** What outbox_consumer_settle() did. Size-prefixed like outbox_relay_stats. */
typedef struct outbox_settled {
    size_t size;
    int32_t action;  /**< an outbox_settle_action */
    int32_t db_lost; /**< 1: `db` was given and its connection is lost; the failure was not counted. Reopen it. */
    int64_t attempt; /**< OUTBOX_OUTCOME_HANDLER_FAILED: the attempt this was (counted); 0 when none was counted */
} outbox_settled;

/** Zeroes the result and sets its size. */
static inline void outbox_settled_init(outbox_settled *s) {
    memset(s, 0, sizeof *s);
    s->size = sizeof *s;
}

/**
 * Settles a message after your loop's transaction for it ended (committed or rolled back): the one
 * decision every consumer loop makes, outbox_consumer_run() included.
 * - OUTBOX_OUTCOME_HANDLED: acknowledges. OUTBOX_OUTCOME_DUPLICATE: logs it, acknowledges.
 * - OUTBOX_OUTCOME_HANDLER_FAILED: counts an attempt (the broker's delivery count on a quorum
 *   queue, less the requeues that were not the handler's failure; the consumer's own count on a
 *   classic queue). Below consumer.delivery_limit it logs and requeues; at the limit it logs and
 *   dead-letters with the reason "handler failed N time(s): <reason>". When `db` is given and its
 *   connection is lost, the failure is the database's, not the handler's: treated as
 *   OUTBOX_OUTCOME_NOT_PROCESSED, with `out->db_lost` = 1.
 * - OUTBOX_OUTCOME_NOT_PROCESSED: logs, requeues, counts no attempt.
 * Roll back before settling a failure, but not on a lost connection (outbox_db_tx_state() is
 * OUTBOX_TX_UNKNOWN): on an owned `db`, a ROLLBACK through outbox_db_exec() opens a lost connection
 * again, and the loss would no longer be seen here.
 * @param[out] out may be NULL; otherwise set its size first (outbox_settled_init()).
 * @param db the connection the transaction ran on, or NULL when it is not an outbox_db (a driver's
 *        own connection): the caller then judges a lost database itself (NOT_PROCESSED).
 * @param reason the handler's error as text (copied); NULL: "handler failed". Used for failures.
 * @return OUTBOX_OK; OUTBOX_ERR_INVALID_ARGUMENT (consumer or msg NULL, an unknown outcome, out
 *         without its size); OUTBOX_ERR_CONNECTION (the broker connection was lost: the message is
 *         redelivered, uncounted); OUTBOX_ERR_BROKER (the dead-letter publish was refused or
 *         returned: the message stays queued); OUTBOX_ERR_TIMEOUT (no confirm for the dead-letter
 *         publish: the message is redelivered).
 */
OUTBOX_API outbox_status outbox_consumer_settle(outbox_settled *out, outbox_consumer *consumer,
                                                const outbox_message *msg, outbox_db *db, outbox_outcome outcome,
                                                const char *reason);
/**
 * The wait before a loop's next try after `failures` consecutive failures of its connections
 * (broker or database): 100 ms, doubling, at most 30 s; outbox_consumer_run() waits the same.
 * Logs "consumer <name>: <why>; retrying in N ms" through the consumer's logger.
 * @param[out] delay_ms the wait in milliseconds.
 * @param failures 1 for the first failure in a row.
 * @param why what failed, e.g. "CONNECTION: PostgreSQL connection lost" (copied); NULL: nothing is logged.
 * @return OUTBOX_OK; OUTBOX_ERR_INVALID_ARGUMENT (delay_ms or consumer NULL, failures < 1).
 */
OUTBOX_API outbox_status outbox_consumer_retry_delay(int *delay_ms, outbox_consumer *consumer, int failures,
                                                     const char *why);
/* ---- end of: a consumer loop of your own ---- */

/* ---- The consumer loop as a step machine: one loop for every face ---- */

/**
 * The library's exactly-once consumer loop, driven step by step (what outbox_consumer_run() does,
 * for a face that runs statements on its own driver connection, or waits in its own event loop).
 * Ask outbox_loop_next() what to do, do it, report it, again until OUTBOX_LOOP_DONE. Every rule
 * (the statements, what a failure means, settling, reconnecting, backoff) is the library's: the
 * driver only runs a statement, calls the handler and waits. Destroy with outbox_loop_free().
 * One thread at a time; outbox_consumer_stop() from any thread ends it between deliveries.
 */
typedef struct outbox_loop outbox_loop;

/** What the driver of an outbox_loop does next (outbox_loop_next()). */
typedef enum outbox_loop_action {
    OUTBOX_LOOP_BLOCK = 1,  /**< call outbox_loop_block() where blocking is fine (a worker thread in async code) */
    OUTBOX_LOOP_EXEC = 2,   /**< run outbox_loop_statement() on your connection; report outbox_loop_exec_done() or outbox_loop_exec_failed() */
    OUTBOX_LOOP_HANDLE = 3, /**< call your handler with outbox_loop_message(); report outbox_loop_handler_done() */
    OUTBOX_LOOP_WAIT = 4,   /**< wait outbox_loop_wait_ms() (less when stopped), then outbox_loop_waited() */
    OUTBOX_LOOP_OPEN = 5,   /**< open your database connection anew (OUTBOX_LOOP_DRIVER_OWNED); report outbox_loop_opened() */
    OUTBOX_LOOP_DONE = 6    /**< finished; outbox_loop_result() says how */
} outbox_loop_action;

/** Which statement OUTBOX_LOOP_EXEC hands out (a driver may use its own call, e.g. commit()). */
typedef enum outbox_loop_sql {
    OUTBOX_LOOP_SQL_BEGIN = 1,   /**< "BEGIN": start the delivery's transaction */
    OUTBOX_LOOP_SQL_DEDUPE = 2,  /**< the inbox statement; report its first row as text */
    OUTBOX_LOOP_SQL_COMMIT = 3,  /**< "COMMIT" */
    OUTBOX_LOOP_SQL_ROLLBACK = 4, /**< "ROLLBACK" */
    OUTBOX_LOOP_SQL_STATEMENT = 5 /**< another statement of the loop's (parking an aggregate, a retry); report its first row as text */
} outbox_loop_sql;
/**
 * The text of the loop's transaction statements, for a face's own transactions too.
 * @return "BEGIN", "COMMIT" or "ROLLBACK" (borrowed, static); NULL for OUTBOX_LOOP_SQL_DEDUPE
 *         (rendered per message) and unknown kinds.
 */
OUTBOX_API const char *outbox_loop_sql_text(outbox_loop_sql kind);

/** Whose connection the loop's transactions run on (outbox_loop_options.connection). */
typedef enum outbox_loop_conn {
    OUTBOX_LOOP_LIBRARY = 0,      /**< an outbox_db: the `db` given (lent: its loss ends the loop), or NULL: one of the loop's own from pg.url, reopened after a loss */
    OUTBOX_LOOP_DRIVER_LENT = 2,  /**< your driver's connection, lent: OUTBOX_LOOP_EXEC; its loss ends the loop */
    OUTBOX_LOOP_DRIVER_OWNED = 3  /**< your driver's connection, the loop's to (re)open: OUTBOX_LOOP_OPEN first, and after a loss */
} outbox_loop_conn;

/** How a handler ended (outbox_loop_handler_done()). */
typedef enum outbox_handler_result {
    OUTBOX_HANDLER_OK = 0,       /**< commit, then acknowledge */
    OUTBOX_HANDLER_FAILED = 1,   /**< roll back; a transient failure: retried with backoff, parked after consumer.max_attempts (consumer.on_failure=requeue: requeued, dead-lettered at consumer.delivery_limit) */
    OUTBOX_HANDLER_PERMANENT = 2 /**< roll back; the event can never succeed: its aggregate is parked at once (requeue: as FAILED) */
} outbox_handler_result;

/** Options of outbox_loop_new(). Size-prefixed: fill with outbox_loop_options_init(). */
typedef struct outbox_loop_options {
    size_t size;
    int32_t connection;       /**< an outbox_loop_conn; default OUTBOX_LOOP_LIBRARY */
    int32_t idle_timeout_ms;  /**< done after this long without a message; -1 (default): never */
    int64_t limit;            /**< done after this many events handled; 0 (default): no limit */
    const char *placeholders; /**< driver connections: placeholder style of the statements (render.placeholders); NULL: the configuration's */
    int32_t slice_ms;         /**< longest single wait in outbox_loop_block() (default 200), so stops and signals are prompt */
} outbox_loop_options;

/** Sets the defaults and the size. */
static inline void outbox_loop_options_init(outbox_loop_options *o) {
    memset(o, 0, sizeof *o);
    o->size = sizeof *o;
    o->idle_timeout_ms = -1;
    o->slice_ms = 200;
}

/**
 * Creates a loop over `consumer` (which must outlive it).
 * @param[out] out destroy with outbox_loop_free().
 * @param db OUTBOX_LOOP_LIBRARY: the connection to run on (lent, never closed), or NULL for the
 *        loop's own from pg.url; must be NULL for the driver kinds.
 * @param options NULL for the defaults.
 * @return OUTBOX_OK; OUTBOX_ERR_INVALID_ARGUMENT (NULL consumer, an unknown connection kind or
 *         placeholder style, `db` with a driver kind, options without their size).
 */
OUTBOX_API outbox_status outbox_loop_new(outbox_loop **out, outbox_consumer *consumer, outbox_db *db,
                                         const outbox_loop_options *options);
/** Frees the loop; a delivery in hand, unsettled, returns to the queue with the connection. NULL is a no-op. */
OUTBOX_API void outbox_loop_free(outbox_loop *loop);
/**
 * What to do next. Takes a stop request (outbox_consumer_stop()) between deliveries.
 * @return an outbox_loop_action; OUTBOX_LOOP_DONE for NULL.
 */
OUTBOX_API outbox_loop_action outbox_loop_next(outbox_loop *loop);
/**
 * OUTBOX_LOOP_BLOCK: waits for the next message (at most slice_ms), or runs the library
 * connection's statements, or settles the delivery. Failures of the broker or the database are
 * the loop's to handle (the next action says what follows), not returned.
 * @return OUTBOX_OK; OUTBOX_ERR_INVALID_ARGUMENT (NULL, or the next action is not OUTBOX_LOOP_BLOCK).
 */
OUTBOX_API outbox_status outbox_loop_block(outbox_loop *loop);
/**
 * OUTBOX_LOOP_EXEC: the statement to run, in the placeholder style asked for.
 * @param[out] kind may be NULL; an outbox_loop_sql.
 * @return the statement (borrowed, valid until the next report), or NULL when the action is not OUTBOX_LOOP_EXEC.
 */
OUTBOX_API const outbox_statement *outbox_loop_statement(const outbox_loop *loop, int *kind);
/**
 * The statement ran.
 * @param row its first row's values as text (NULL entries for SQL NULL; booleans as t/f, true/false
 *        or 1/0); NULL with `columns` 0 when it returns none (all but OUTBOX_LOOP_SQL_DEDUPE).
 * @return OUTBOX_OK; OUTBOX_ERR_INVALID_ARGUMENT (NULL loop, not at OUTBOX_LOOP_EXEC, a row that is not the dedupe's).
 */
OUTBOX_API outbox_status outbox_loop_exec_done(outbox_loop *loop, const char *const *row, size_t columns);
/**
 * The statement failed. The loop judges it: no SQLSTATE, class 08, or the server shutting down
 * (57P01-57P03) is a lost connection; a failed ROLLBACK too.
 * @param sqlstate the server's SQLSTATE; NULL or "" when the driver has none.
 * @param message the driver's message (copied).
 * @param connection_closed non-zero when the driver says its connection is closed.
 * @return OUTBOX_OK; OUTBOX_ERR_INVALID_ARGUMENT (NULL loop, not at OUTBOX_LOOP_EXEC).
 */
OUTBOX_API outbox_status outbox_loop_exec_failed(outbox_loop *loop, const char *sqlstate, const char *message,
                                                 int connection_closed);
/**
 * OUTBOX_LOOP_HANDLE: the delivery for the handler.
 * @return the message (borrowed, valid until the loop takes the next one), or NULL when there is none.
 */
OUTBOX_API const outbox_message *outbox_loop_message(outbox_loop *loop);
/**
 * OUTBOX_LOOP_HANDLE on OUTBOX_LOOP_LIBRARY: the transaction's connection for the handler.
 * @return a lent outbox_db (borrowed, valid during the handler), or NULL for driver connections.
 */
OUTBOX_API outbox_db *outbox_loop_db(outbox_loop *loop);
/**
 * The handler ended.
 * @param result an outbox_handler_result.
 * @param reason why it failed (copied), logged and dead-lettered with; NULL: "handler failed".
 *        Every face passes "<exception type>: <message>" as its language names them
 *        (Python "ValueError: bad", Node "TypeError: bad", PHP "RuntimeException: bad").
 * @return OUTBOX_OK; OUTBOX_ERR_INVALID_ARGUMENT (NULL loop, not at OUTBOX_LOOP_HANDLE, unknown result).
 */
OUTBOX_API outbox_status outbox_loop_handler_done(outbox_loop *loop, int result, const char *reason);
/**
 * OUTBOX_LOOP_WAIT: how long.
 * @return milliseconds; 0 for NULL.
 */
OUTBOX_API int outbox_loop_wait_ms(const outbox_loop *loop);
/**
 * The wait is over (or was cut short by a stop).
 * @return OUTBOX_OK; OUTBOX_ERR_INVALID_ARGUMENT (NULL).
 */
OUTBOX_API outbox_status outbox_loop_waited(outbox_loop *loop);
/**
 * OUTBOX_LOOP_OPEN: whether the connection opened.
 * @param ok non-zero when it did.
 * @param message why not (copied); may be NULL.
 * @return OUTBOX_OK; OUTBOX_ERR_INVALID_ARGUMENT (NULL loop, not at OUTBOX_LOOP_OPEN).
 */
OUTBOX_API outbox_status outbox_loop_opened(outbox_loop *loop, int ok, const char *message);
/**
 * The driver gives up (Ctrl-C, a cancelled task): the delivery in hand is rolled back and
 * requeued uncounted; keep driving until OUTBOX_LOOP_DONE.
 * @param reason copied; NULL: "interrupted".
 * @return OUTBOX_OK; OUTBOX_ERR_INVALID_ARGUMENT (NULL).
 */
OUTBOX_API outbox_status outbox_loop_abort(outbox_loop *loop, const char *reason);
/**
 * How the loop ended, once at OUTBOX_LOOP_DONE; sets outbox_last_error() for an error.
 * @param[out] handled may be NULL; the events handled (committed) so far.
 * @return OUTBOX_OK (stopped, limit or idle time reached); the error that ended it:
 *         OUTBOX_ERR_CONNECTION (a lent connection was lost: the message is redelivered),
 *         OUTBOX_ERR_INVALID_ARGUMENT (no pg.url, a queue the broker refuses), OUTBOX_ERR_SCHEMA.
 */
OUTBOX_API outbox_status outbox_loop_result(const outbox_loop *loop, int64_t *handled);
/* ---- end of: the consumer loop as a step machine ---- */

/**
 * A copy of a message that lives on its own (e.g. the one outbox_loop_message() lends). Settling
 * the copy settles the delivery.
 * @param[out] out free with outbox_message_free().
 * @return OUTBOX_OK; OUTBOX_ERR_INVALID_ARGUMENT (NULL); OUTBOX_ERR_NO_MEMORY.
 */
OUTBOX_API outbox_status outbox_message_copy(outbox_message **out, const outbox_message *msg);
/** Frees a message and every string borrowed from it. Does not ack it. NULL is a no-op. */
OUTBOX_API void outbox_message_free(outbox_message *msg);
/**
 * An envelope field by its name ("OUTBOX_ID", "EVENT_TYPE", "AGGREGATE_ID", "AGGREGATE_TYPE",
 * "OPERATION", "USER", "CREATED_AT", ...): strings decoded to UTF-8; objects ("PAYLOAD",
 * "PREVIOUS_PAYLOAD", "METADATA") as their exact JSON text. NULL when absent or null.
 * Borrowed: valid until outbox_message_free().
 */
OUTBOX_API const char *outbox_message_field(const outbox_message *msg, const char *name);
/** The raw body (borrowed as above); `len` receives its length (may be NULL). */
OUTBOX_API const char *outbox_message_body(const outbox_message *msg, size_t *len);
/**
 * A property: "message_id", "type", "content_type", "app_id", "correlation_id", "routing_key",
 * "exchange", "consumer_tag", or a header by its name; numbers and booleans as text. NULL when absent.
 */
OUTBOX_API const char *outbox_message_property(const outbox_message *msg, const char *name);
/** The per-aggregate sequence number (header outbox-seq), 0 when absent. */
OUTBOX_API int64_t outbox_message_seq(const outbox_message *msg);
/** 1 when the broker marked it redelivered. */
OUTBOX_API int outbox_message_redelivered(const outbox_message *msg);
/** Earlier deliveries of this message (quorum queues), or -1 when the queue does not say. */
OUTBOX_API int64_t outbox_message_delivery_count(const outbox_message *msg);
/** Inside a handler: what the run loop's dedupe found (first_time is always 1 there). */
OUTBOX_API outbox_order outbox_message_order(const outbox_message *msg);
/** Inside a handler: the highest sequence of the aggregate processed before this event (0 = none). */
OUTBOX_API int64_t outbox_message_previous_seq(const outbox_message *msg);
/**@}*/

/** @name Shared rules
 * The rules every binding needs and none may copy: event field names, placeholder names, how a
 * PostgreSQL error is classified, the environment's URLs. Read them from here.
 */
/**@{*/
/** What an event field's value is (see outbox_event_field()). */
typedef enum outbox_field_kind {
    OUTBOX_FIELD_TEXT = 0, /**< text */
    OUTBOX_FIELD_JSON = 1, /**< JSON text: "payload", "previous_payload", "metadata" */
    OUTBOX_FIELD_FLAG = 2  /**< "true" or "false": "force_delete" */
} outbox_field_kind;
/**
 * Lists the event fields outbox_event_set() takes, in one fixed order (the order the bindings
 * pass them in).
 * @param[out] name borrowed static string (may be NULL).
 * @param[out] kind the kind of its value (may be NULL).
 * @param index 0-based.
 * @return OUTBOX_OK, or OUTBOX_ERR_NOT_FOUND past the last field.
 */
OUTBOX_API outbox_status outbox_event_field(const char **name, outbox_field_kind *kind, size_t index);
/**
 * Lists the envelope's fields, the names outbox_message_field() takes, in the envelope's order.
 * @param[out] name borrowed static string (may be NULL).
 * @param[out] kind OUTBOX_FIELD_JSON for "PAYLOAD", "PREVIOUS_PAYLOAD" and "METADATA" (their JSON
 *             text), else OUTBOX_FIELD_TEXT (may be NULL).
 * @param index 0-based.
 * @return OUTBOX_OK, or OUTBOX_ERR_NOT_FOUND past the last field.
 */
OUTBOX_API outbox_status outbox_envelope_field(const char **name, outbox_field_kind *kind, size_t index);
/**
 * The name of a rendered statement's parameter in the named placeholder styles
 * (render.placeholders=named: ":p1"; pyformat: "%(p1)s"): "p1", "p2", ...
 * @return the name (borrowed, valid until outbox_statement_free()), or NULL for the positional
 *         styles (dollar, qmark, format), a NULL statement or a bad index.
 */
OUTBOX_API const char *outbox_statement_param_name(const outbox_statement *st, size_t index);
/**
 * The write of one event on your driver's own connection, step by step (what outbox_write() does
 * on a connection of the library's): the statements to run in order, and what your driver's error
 * means. Ask outbox_write_plan_next() for the statement, run it in your transaction, report
 * outbox_write_plan_done() or outbox_write_plan_failed(), until it hands out none; then
 * outbox_write_plan_result(). With an idempotency key inside a transaction the INSERT runs in a
 * savepoint, so a reused key leaves your transaction usable. Destroy with outbox_write_plan_free().
 */
typedef struct outbox_write_plan outbox_write_plan;

/** Which statement outbox_write_plan_next() hands out (a driver may use its own call for some). */
typedef enum outbox_write_step {
    OUTBOX_WRITE_SAVEPOINT = 1,   /**< "SAVEPOINT outbox_write" */
    OUTBOX_WRITE_INSERT = 2,      /**< the event's INSERT; report its row (the seq) */
    OUTBOX_WRITE_RELEASE = 3,     /**< "RELEASE SAVEPOINT outbox_write" */
    OUTBOX_WRITE_ROLLBACK_TO = 4, /**< "ROLLBACK TO SAVEPOINT outbox_write" */
    OUTBOX_WRITE_LOOKUP = 5       /**< which event holds the reused key; report its row, or none */
} outbox_write_step;

/**
 * Plans the write of `ev` (validated, named and given its id now, as outbox_render_write() does).
 * @param[out] out destroy with outbox_write_plan_free().
 * @param cfg the configuration (outbox.table, ...); NULL for the defaults. Must outlive the plan.
 * @param ev the event (must outlive the plan); after a successful write outbox_event_seq() is set.
 * @param tx your connection's state: OUTBOX_TX_IDLE (autocommit: the INSERT is its own
 *        transaction), OUTBOX_TX_INTRANS (in a transaction, or one your driver begins at the first
 *        statement), OUTBOX_TX_INERROR (aborted: the plan ends at once with OUTBOX_ERR_TRANSACTION).
 * @param placeholders your driver's placeholder style (render.placeholders); NULL: the configuration's.
 * @return OUTBOX_OK; OUTBOX_ERR_INVALID_ARGUMENT (NULL, an unknown tx state or style),
 *         OUTBOX_ERR_INVALID_EVENT, OUTBOX_ERR_TOO_LARGE (the event: nothing runs).
 */
OUTBOX_API outbox_status outbox_write_plan_new(outbox_write_plan **out, const outbox_config *cfg, outbox_event *ev,
                                               outbox_tx_state tx, const char *placeholders);
/** Frees the plan. NULL is a no-op. */
OUTBOX_API void outbox_write_plan_free(outbox_write_plan *plan);
/**
 * The next statement to run.
 * @param[out] step may be NULL; an outbox_write_step.
 * @return the statement (borrowed, valid until the next report), or NULL when the plan is done.
 */
OUTBOX_API const outbox_statement *outbox_write_plan_next(const outbox_write_plan *plan, int *step);
/**
 * The statement ran.
 * @param row its first row's values as text (NULL entries for SQL NULL); NULL with `columns` 0 for none.
 * @return OUTBOX_OK (an INSERT row without its sequence number ends the plan with
 *         OUTBOX_ERR_INTERNAL); OUTBOX_ERR_INVALID_ARGUMENT (NULL plan, a plan that is done).
 */
OUTBOX_API outbox_status outbox_write_plan_done(outbox_write_plan *plan, const char *const *row, size_t columns);
/**
 * The statement failed; the plan judges it (a unique violation of the key's constraint, or of one
 * your driver does not name, is a reused key; no SQLSTATE with `connection_closed` is a lost connection).
 * @param sqlstate the server's SQLSTATE; NULL or "" when the driver has none.
 * @param constraint the constraint the server named (23505); NULL or "" when the driver does not say.
 * @param message the driver's message (copied).
 * @param connection_closed non-zero when the driver says its connection is gone.
 * @return OUTBOX_OK; OUTBOX_ERR_INVALID_ARGUMENT (NULL plan, a plan that is done).
 */
OUTBOX_API outbox_status outbox_write_plan_failed(outbox_write_plan *plan, const char *sqlstate, const char *constraint,
                                                  const char *message, int connection_closed);
/**
 * How the write ended, once outbox_write_plan_next() hands out nothing; sets outbox_last_error().
 * @return OUTBOX_OK (written: outbox_event_seq()); OUTBOX_ERR_DUPLICATE (a reused idempotency key:
 *         "idempotency_key is already used by event <id>"), OUTBOX_ERR_TRANSACTION (aborted
 *         transaction), OUTBOX_ERR_CONNECTION, OUTBOX_ERR_DATABASE, OUTBOX_ERR_SCHEMA (as the
 *         SQLSTATE says), OUTBOX_ERR_INTERNAL (the INSERT returned no sequence number);
 *         OUTBOX_ERR_INVALID_ARGUMENT (NULL, or the plan is not done).
 */
OUTBOX_API outbox_status outbox_write_plan_result(const outbox_write_plan *plan);
/**
 * The status the library gives a PostgreSQL error of this SQLSTATE (e.g. "23505" ->
 * OUTBOX_ERR_DUPLICATE, "08006" -> OUTBOX_ERR_CONNECTION, "42P01" -> OUTBOX_ERR_SCHEMA), for
 * errors a caller's own driver raised running a rendered statement. Does not touch the last error.
 * @return the status; OUTBOX_ERR_DATABASE for NULL, an unknown or a malformed SQLSTATE.
 */
OUTBOX_API outbox_status outbox_status_for_sqlstate(const char *sqlstate);
/**
 * The library's error for a caller's driver failing on a statement the library rendered (the dedupe
 * statement, say), as the write plan gives its own (outbox_write_plan_failed()): the status
 * outbox_status_for_sqlstate() gives the SQLSTATE; without one, OUTBOX_ERR_CONNECTION when the
 * driver says its connection is gone, else OUTBOX_ERR_DATABASE. Sets outbox_last_error() to
 * "<context>: <message> (SQLSTATE <sqlstate>)", with a hint to roll back for an aborted transaction (25P02).
 * @param context what was being done, e.g. "outbox dedupe"; NULL or "": "outbox".
 * @param sqlstate the server's SQLSTATE; NULL or "" when the driver has none.
 * @param message the driver's message (copied); NULL: "".
 * @param connection_closed non-zero when the driver says its connection is gone.
 * @return never OUTBOX_OK: OUTBOX_ERR_DATABASE, OUTBOX_ERR_CONNECTION, or the SQLSTATE's
 *         (OUTBOX_ERR_DUPLICATE, OUTBOX_ERR_SCHEMA, OUTBOX_ERR_TRANSACTION, OUTBOX_ERR_TIMEOUT, OUTBOX_ERR_NO_MEMORY).
 */
OUTBOX_API outbox_status outbox_driver_error(const char *context, const char *sqlstate, const char *message,
                                             int connection_closed);
/**
 * The name of the unique constraint on idempotency keys (in the outbox's schema; with storage
 * version 2 the primary key of `<table>_keys`, which keeps version 1's index name): a unique
 * violation (23505) naming this constraint is a reused idempotency key.
 * @param[out] out the name (owned: free with outbox_string_free()); NULL on failure.
 * @param cfg which table (outbox.table); NULL for the defaults.
 * @return OUTBOX_OK, OUTBOX_ERR_INVALID_ARGUMENT (out is NULL), OUTBOX_ERR_NO_MEMORY.
 */
OUTBOX_API outbox_status outbox_idempotency_index(char **out, const outbox_config *cfg);
/**
 * Opens a connection the library owns to the configuration's pg.url (for callers that hold the
 * configuration but not the URL: it reads back as "***"). Combine with outbox_config_from_env()
 * for the OUTBOX_PG_URL fallback.
 * @param[out] out the new handle; close with outbox_db_close().
 * @param cfg copied into the handle, as outbox_db_open() does.
 * @return OUTBOX_OK, OUTBOX_ERR_INVALID_ARGUMENT (a NULL argument, or no pg.url), OUTBOX_ERR_CONNECTION
 *         (unreachable, refused, bad credentials; the message never contains the password),
 *         OUTBOX_ERR_NO_MEMORY.
 */
OUTBOX_API outbox_status outbox_db_open_config(outbox_db **out, const outbox_config *cfg);
/**
 * Takes the URLs from the environment: pg.url from OUTBOX_PG_URL and amqp.url from
 * OUTBOX_AMQP_URL, each when set and non-empty. With `overwrite` 0 only a URL the configuration
 * does not have yet is filled in; otherwise the environment's wins.
 * @return OUTBOX_OK, OUTBOX_ERR_INVALID_ARGUMENT (cfg is NULL).
 */
OUTBOX_API outbox_status outbox_config_from_env(outbox_config *cfg, int overwrite);
/**@}*/

/** @name Operations
 * Operator tools over the outbox (the `outbox stats`, `retry-failed`, `purge` and `replay`
 * commands call these). Stats, lag, retry and purge are bounded by the backlog or an index, so
 * they stay fast on millions of events; replay reads an aggregate's events through the outbox
 * view, and the events table has no per-aggregate index, so it reads every partition. Like every
 * call on an outbox_db, they use its connection: one thread at a time per handle; different
 * handles may be used from different threads at once.
 */
/**@{*/
/**
 * Reads the outbox's operating figures as one JSON object: "pending", "pending_due", "failed",
 * "published_last_minute", "published_last_hour" (exact counts: pending and failed over the
 * events above the relay's cursor and the parked ones, published from the relay's receipts),
 * "oldest_pending_age_s", "last_published_age_s" (seconds or null), "lag_s" (seconds since the
 * oldest due PENDING event became due), "total_estimate" and "published_estimate" (planner
 * estimates from pg_class.reltuples, named in the "estimates" array: never a full count),
 * "relay_health" ("idle", "ok" or "lagging": lag over 60 s) and "per_aggregate_type" (an array of
 * {"aggregate_type","pending","failed"}). New members may be added; none is removed or retyped.
 * A JSON string keeps the ABI stable as figures are added, with no struct layout to version.
 * @param[out] json_out the JSON text (owned: free with outbox_string_free()); NULL on failure.
 * @return OUTBOX_OK, OUTBOX_ERR_DATABASE, OUTBOX_ERR_CONNECTION, OUTBOX_ERR_SCHEMA (missing table),
 *         OUTBOX_ERR_TRANSACTION (the connection's transaction is aborted),
 *         OUTBOX_ERR_INVALID_ARGUMENT (a NULL argument), OUTBOX_ERR_NO_MEMORY.
 */
OUTBOX_API outbox_status outbox_stats(char **json_out, outbox_db *db);
/**
 * Puts FAILED events back to PENDING, due now (next_attempt_at = now()); their retry_count and
 * error_message are kept as history. FAILED events are parked (`<table>_parked`): the statement
 * updates those rows. One statement: atomic, in the caller's transaction if one is open.
 * @param[out] moved how many events were moved (may be NULL); 0 on failure.
 * @param aggregate_type only events of this aggregate type; NULL: any.
 * @param event_id only this event (a UUID); NULL: any.
 * @param max_retries only events with retry_count < max_retries; <= 0: any.
 * @return OUTBOX_OK (also when nothing matched), OUTBOX_ERR_INVALID_ARGUMENT (db NULL, event_id
 *         not a UUID), OUTBOX_ERR_DATABASE, OUTBOX_ERR_CONNECTION, OUTBOX_ERR_SCHEMA,
 *         OUTBOX_ERR_TRANSACTION.
 */
OUTBOX_API outbox_status outbox_retry_failed(int64_t *moved, outbox_db *db, const char *aggregate_type,
                                             const char *event_id, int max_retries);
/**
 * Removes events published more than older_than_s seconds ago. It drops each partition of the
 * events table that lies wholly at or below the relay's cursor and whose newest receipt is older
 * than the age, with the receipts and idempotency keys of its events: no DELETE. A partition goes
 * whole or not at all, so events leave outbox.partition_events at a time. Taking a partition out
 * (a detach: milliseconds, whatever it holds) takes the events table's ACCESS EXCLUSIVE lock
 * briefly (tried 100 ms at a time); its file is dropped after that lock is gone, so writers never
 * wait for the file system. Both go through the schema's `<table>_drop_partition` and
 * `<table>_drop_detached` functions (the owner's rights; packaging/roles.sql grants them to
 * outbox_operator); a purge also drops what an interrupted one had taken out. Then it deletes the published rows older than the age of a version-1 table kept by an
 * upgrade (`<table>_v1`), `batch` rows per DELETE, each its own short transaction, until none is
 * left. Never removes a PENDING or FAILED event (a parked event keeps its copy in
 * `<table>_parked`); writers and relays go on meanwhile. Must be called outside a transaction.
 * @param batch rows per DELETE of the version-1 table's rows (> 0); it has no other effect.
 * @param[out] deleted how many events were removed: the rows of the dropped partitions plus the
 *             deleted version-1 rows (may be NULL); on failure, how many were removed (and
 *             committed) before it.
 * @return OUTBOX_OK, OUTBOX_ERR_INVALID_ARGUMENT (db NULL, older_than_s < 0 or over 100 years,
 *         batch <= 0), OUTBOX_ERR_TRANSACTION (a transaction is open), OUTBOX_ERR_DATABASE,
 *         OUTBOX_ERR_CONNECTION, OUTBOX_ERR_SCHEMA.
 */
OUTBOX_API outbox_status outbox_purge_published(int64_t *deleted, outbox_db *db, int64_t older_than_s, int batch);
/**
 * Republishes the history of one aggregate: its events with seq >= from_seq, whatever their
 * status, in seq order, on a connection of its own to amqp.url and amqp.exchange, with publisher
 * confirms, each marked with the header outbox-replay = "true". The events are not changed.
 * Subscribers see duplicates of events they had; their dedupe (inbox) skips them unless they
 * deduplicate under another consumer name. Blocks until every message is confirmed.
 * @param[out] published how many messages the broker confirmed (may be NULL).
 * @param cfg where to publish (amqp.* keys) and which table to read; NULL: the db handle's config.
 * @param from_seq the first seq to replay; <= 1: from the aggregate's first event.
 * @return OUTBOX_OK (also when there is nothing to replay), OUTBOX_ERR_INVALID_ARGUMENT (a NULL or
 *         empty aggregate, or no amqp.url), OUTBOX_ERR_CONNECTION (broker unreachable), OUTBOX_ERR_BROKER (a message
 *         was nacked or unroutable, or the exchange is missing), OUTBOX_ERR_TIMEOUT (no confirm within
 *         relay.confirm_timeout_ms), OUTBOX_ERR_DATABASE, OUTBOX_ERR_SCHEMA.
 */
OUTBOX_API outbox_status outbox_replay(int64_t *published, outbox_db *db, const outbox_config *cfg,
                                       const char *aggregate_type, const char *aggregate_id, int64_t from_seq);
/**
 * outbox_replay() from an event or a time, as the `outbox replay --event/--since` command does:
 * from the event `event_id` (NULL or "": the aggregate's first), and only events created at or
 * after `since` (an ISO 8601 timestamp; NULL or "": any), whichever starts later. When nothing was
 * created since `since`, nothing is published.
 * @param[out] published how many messages the broker confirmed (may be NULL).
 * @param[out] from_seq the seq the replay started from, 0 when nothing was replayed (may be NULL).
 * @return OUTBOX_OK (also when there is nothing to replay), OUTBOX_ERR_NOT_FOUND (event_id is not an
 *         event of the aggregate), OUTBOX_ERR_INVALID_ARGUMENT (a NULL or empty aggregate, event_id not
 *         a UUID, no amqp.url), OUTBOX_ERR_DATABASE (e.g. `since` is not a timestamp),
 *         OUTBOX_ERR_CONNECTION, OUTBOX_ERR_BROKER, OUTBOX_ERR_TIMEOUT, OUTBOX_ERR_SCHEMA, as outbox_replay().
 */
OUTBOX_API outbox_status outbox_replay_from(int64_t *published, int64_t *from_seq, outbox_db *db,
                                            const outbox_config *cfg, const char *aggregate_type,
                                            const char *aggregate_id, const char *event_id, const char *since);
/**
 * Parked aggregates (consumer.on_failure=park): a handler's failure holds the event's aggregate in
 * PostgreSQL (`<inbox>_held`, `<inbox>_held_events`) instead of holding the queue; its later events
 * wait behind it, acknowledged. The consumer loops retry its head with backoff
 * (consumer.retry_initial_ms doubling to consumer.retry_max_ms) and park it for an operator after
 * consumer.max_attempts attempts, or at once for a permanent failure. Lists the held aggregates of
 * `consumer` (NULL: every subscriber), oldest failure first, as a JSON array of objects:
 * "consumer" (null for the relay's), "source" ("consumer" or "relay"), "aggregate_type",
 * "aggregate_id", "state" ("retrying", "redriving" or "parked"), "attempts", "head_event_id",
 * "head_event_type", "head_seq", "last_error", "first_failed_at", "last_failed_at",
 * "next_attempt_at" (ISO 8601 UTC or null), "waiting" (events held behind the head) and
 * "parked_age_s". New members may be added; none is removed or retyped.
 * @param[out] json_out the JSON text (owned: free with outbox_string_free()); NULL on failure.
 * @param consumer a subscriber's name; NULL or "": all of them.
 * @param include_relay non-zero: the relay's parked aggregates (consumer null) too.
 * @param limit at most this many rows (> 0).
 * @return OUTBOX_OK, OUTBOX_ERR_INVALID_ARGUMENT (a NULL argument, limit <= 0), OUTBOX_ERR_SCHEMA
 *         (the inbox is not migrated: run outbox migrate), OUTBOX_ERR_DATABASE, OUTBOX_ERR_CONNECTION.
 */
OUTBOX_API outbox_status outbox_parked_list(char **json_out, outbox_db *db, const char *consumer, int include_relay,
                                            int limit);
/**
 * Redrives a held aggregate: its head is tried once more, now, by whichever running instance of
 * `consumer` claims it first; its held events then go through the handler in seq order. A head
 * that fails again stays parked with its new error. For the relay (consumer NULL or ""), the
 * aggregate's parked events are due again now.
 * @param[out] redriven 1 when the aggregate was held, else 0 (may be NULL).
 * @return OUTBOX_OK (also when it was not held), OUTBOX_ERR_INVALID_ARGUMENT (db or aggregate_id
 *         NULL or empty, text that is not UTF-8), OUTBOX_ERR_SCHEMA, OUTBOX_ERR_DATABASE,
 *         OUTBOX_ERR_CONNECTION.
 */
OUTBOX_API outbox_status outbox_parked_redrive(int64_t *redriven, outbox_db *db, const char *consumer,
                                               const char *aggregate_type, const char *aggregate_id);
/**
 * Redrives every parked aggregate of `consumer`, as outbox_parked_redrive() does one.
 * @param[out] redriven how many (may be NULL).
 * @return OUTBOX_OK, OUTBOX_ERR_INVALID_ARGUMENT (db or consumer NULL or empty), OUTBOX_ERR_SCHEMA,
 *         OUTBOX_ERR_DATABASE, OUTBOX_ERR_CONNECTION.
 */
OUTBOX_API outbox_status outbox_parked_redrive_all(int64_t *redriven, outbox_db *db, const char *consumer);
/**
 * Skips a held aggregate's head: it is recorded in `<inbox>_skipped` with `by` and `reason`, and in
 * the inbox (a redelivery of it is a duplicate, never applied); the aggregate's next held event is
 * due now, or the aggregate is live again. Waits for a retry of the head in progress. Runs a
 * transaction of its own. For the relay (consumer NULL or ""): its parked aggregate's head, which
 * must be FAILED (publishing it was given up; a head it still retries is OUTBOX_ERR_NOT_FOUND), is
 * never published, recorded in `<inbox>_skipped` with consumer "", and the aggregate's next parked
 * event is due now.
 * @param[out] skipped_id the id of the event skipped (owned: free with outbox_string_free(); may be NULL).
 * @param event_id when not NULL or "", the head must be this event (what the operator saw).
 * @param by who skips (non-empty); @param reason why (may be "").
 * @return OUTBOX_OK, OUTBOX_ERR_NOT_FOUND (the aggregate is not held, or its head is another event),
 *         OUTBOX_ERR_INVALID_ARGUMENT (a NULL or empty aggregate_id or by; event_id not a
 *         UUID), OUTBOX_ERR_TRANSACTION (a transaction is open), OUTBOX_ERR_SCHEMA,
 *         OUTBOX_ERR_DATABASE, OUTBOX_ERR_CONNECTION.
 */
OUTBOX_API outbox_status outbox_parked_skip(char **skipped_id, outbox_db *db, const char *consumer,
                                            const char *aggregate_type, const char *aggregate_id,
                                            const char *event_id, const char *by, const char *reason);
/**
 * What an operator alerts on, per subscriber, as a JSON array of {"consumer", "parked" (aggregates
 * waiting for an operator), "retrying", "oldest_parked_age_s", "lag_s"}, then the relay's
 * {"consumer": null, "parked", "retrying", "oldest_parked_age_s", "oldest_unpublished_age_s"}. A
 * subscriber's lag is how far the newest event it processed is behind the newest event the relay
 * published, in the events' time (uuid v7 ids); 0 when caught up. The subscribers are those with
 * rows in the inbox (at most 200) and those holding aggregates; the figures cost a few index
 * probes per subscriber, never a count of events.
 * @param[out] json_out the JSON text (owned: free with outbox_string_free()).
 * @return OUTBOX_OK, OUTBOX_ERR_INVALID_ARGUMENT, OUTBOX_ERR_SCHEMA, OUTBOX_ERR_DATABASE,
 *         OUTBOX_ERR_CONNECTION.
 */
OUTBOX_API outbox_status outbox_parked_summary(char **json_out, outbox_db *db);
/**
 * outbox_parked_summary()'s figures as Prometheus text exposition (format 0.0.4), for a process's
 * own `/metrics` (a consumer process serves it from its web framework; `outbox relay
 * --metrics-addr` appends it to its own): per subscriber, label `subscriber`,
 * `outbox_parked_aggregates`, `outbox_retrying_aggregates`, `outbox_oldest_parked_age_seconds` and
 * `outbox_subscriber_lag_seconds`; the relay's `outbox_relay_parked_aggregates`,
 * `outbox_relay_oldest_parked_age_seconds` and `outbox_oldest_unpublished_age_seconds`. Gauges in
 * seconds and counts; one series per subscriber (at most 200 from the inbox).
 * @param[out] text_out the text (owned: free with outbox_string_free()); NULL on failure.
 * @return OUTBOX_OK, OUTBOX_ERR_INVALID_ARGUMENT (a NULL argument), OUTBOX_ERR_SCHEMA,
 *         OUTBOX_ERR_DATABASE, OUTBOX_ERR_CONNECTION, OUTBOX_ERR_TRANSACTION.
 */
OUTBOX_API outbox_status outbox_metrics_text(char **text_out, outbox_db *db);
/** A progress callback: `done` so far; called on the calling thread, between batches. */
typedef void (*outbox_progress_fn)(int64_t done, void *user_data);
/**
 * outbox_purge_published() that reports its progress: `fn` (may be NULL) is called with the
 * count removed so far after the partitions are dropped and after each committed batch.
 * @param[out] deleted as outbox_purge_published() (may be NULL).
 * @return as outbox_purge_published(): OUTBOX_OK, OUTBOX_ERR_INVALID_ARGUMENT (db NULL, older_than_s
 *         < 0 or over 100 years, batch <= 0), OUTBOX_ERR_TRANSACTION, OUTBOX_ERR_DATABASE,
 *         OUTBOX_ERR_CONNECTION, OUTBOX_ERR_SCHEMA.
 */
OUTBOX_API outbox_status outbox_purge_published_progress(int64_t *deleted, outbox_db *db, int64_t older_than_s,
                                                         int batch, outbox_progress_fn fn, void *user_data);
/**
 * An estimate of how many events outbox_purge_published() would remove, for progress displays:
 * the planner's row estimate (pg_class.reltuples) of the partitions it would drop, plus a count
 * of the version-1 table's rows it would delete.
 * @param[out] estimate the estimate; 0 on failure.
 * @return OUTBOX_OK, OUTBOX_ERR_INVALID_ARGUMENT (a NULL argument, older_than_s < 0 or over 100
 *         years), OUTBOX_ERR_DATABASE, OUTBOX_ERR_CONNECTION, OUTBOX_ERR_SCHEMA, OUTBOX_ERR_TRANSACTION.
 */
OUTBOX_API outbox_status outbox_purge_estimate(int64_t *estimate, outbox_db *db, int64_t older_than_s);
/**
 * The lag alone, as one small query bounded by the backlog (outbox_stats() computes it with
 * everything else): seconds since the oldest due PENDING event became due, 0 when none is due.
 * @param[out] lag_s the lag; 0 on failure.
 * @return OUTBOX_OK, OUTBOX_ERR_INVALID_ARGUMENT (a NULL argument), OUTBOX_ERR_DATABASE,
 *         OUTBOX_ERR_CONNECTION, OUTBOX_ERR_SCHEMA, OUTBOX_ERR_TRANSACTION.
 */
OUTBOX_API outbox_status outbox_lag(double *lag_s, outbox_db *db);
/**
 * outbox_migrate() that says what it did: the versions of the outbox and inbox schemas before
 * and after (0 = not installed; a table it was not asked to migrate reports 0 and 0).
 * @param[out] outbox_from, outbox_to, inbox_from, inbox_to each may be NULL.
 * @return as outbox_migrate(): OUTBOX_OK, OUTBOX_ERR_SCHEMA, OUTBOX_ERR_TRANSACTION,
 *         OUTBOX_ERR_DATABASE, OUTBOX_ERR_CONNECTION, OUTBOX_ERR_INVALID_ARGUMENT (db NULL, an unknown target).
 */
OUTBOX_API outbox_status outbox_migrate_versions(int *outbox_from, int *outbox_to, int *inbox_from, int *inbox_to,
                                                 outbox_db *db, outbox_migrate_target target);

/** A watch on an exchange (`outbox tail`): a temporary queue bound to it. Destroy with outbox_tail_close(). */
typedef struct outbox_tail outbox_tail;
/**
 * Connects to amqp.url, declares the exchange (amqp.exchange_type) and binds a temporary,
 * exclusive queue to it (routing key "#" when watching amqp.exchange of a topic type).
 * @param[out] out the new handle; close with outbox_tail_close().
 * @param exchange the exchange to watch; NULL or "": amqp.exchange.
 * @return OUTBOX_OK, OUTBOX_ERR_INVALID_ARGUMENT (a NULL argument, no amqp.url or one that does not
 *         parse, a bad exchange name), OUTBOX_ERR_CONNECTION (broker unreachable or login refused),
 *         OUTBOX_ERR_BROKER (e.g. the exchange exists with another type), OUTBOX_ERR_TIMEOUT,
 *         OUTBOX_ERR_NO_MEMORY.
 */
OUTBOX_API outbox_status outbox_tail_open(outbox_tail **out, const outbox_config *cfg, const char *exchange);
/** Closes the watch (its queue goes with it). NULL is a no-op. */
OUTBOX_API void outbox_tail_close(outbox_tail *tail);
/**
 * Waits at most timeout_ms for the next message through the exchange, event or not: read it
 * with outbox_message_body(), outbox_message_property() and (for an event) outbox_message_field().
 * Not acknowledged: never pass it to outbox_consumer_ack() and friends.
 * @param[out] out the message (free with outbox_message_free()); NULL on timeout.
 * @return OUTBOX_OK with a message, OUTBOX_ERR_TIMEOUT when none came, OUTBOX_ERR_INVALID_ARGUMENT
 *         (a NULL argument), OUTBOX_ERR_CONNECTION (the connection was lost), OUTBOX_ERR_BROKER.
 */
OUTBOX_API outbox_status outbox_tail_next(outbox_message **out, outbox_tail *tail, int timeout_ms);
/**
 * @return the exchange watched, or the name of the temporary queue when `queue` is non-zero
 *         (borrowed, valid until outbox_tail_close()); NULL for a NULL handle.
 */
OUTBOX_API const char *outbox_tail_name(const outbox_tail *tail, int queue);
/**@}*/

#ifdef __cplusplus
}
#endif

#endif /* OUTBOX_H */
