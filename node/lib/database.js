'use strict';
// Database: a PostgreSQL connection the library opened (outbox_db_open). Calls return Promises and
// run one at a time, in call order, on the Database's own thread; write() on the event loop.
const native = require('./native');
const { Handle } = require('./handle');
const { outboxError, typeError } = require('./errors');

const FIELDS = native.fields; // camelCase name -> C name (outbox_event_field)
const JSON_FIELDS = new Set(native.json_fields);

// An event as the addon takes it: [C field name, value, ...], JSON fields' objects as JSON text (cheaper
// here), the rest checked there; not an object: null, refused there. index: writeMany's (map passes it).
function eventFields(event, index) {
  if (event === null || typeof event !== 'object' || Array.isArray(event)) return null;
  const out = [];
  for (const key of Object.keys(event)) {
    const value = event[key];
    if (value === undefined || value === null) continue;
    const name = Object.hasOwn(FIELDS, key) ? FIELDS[key] : key; // unknown names reach the library: UNKNOWN_KEY
    const json = typeof value === 'object' && JSON_FIELDS.has(name) && !(value instanceof Uint8Array);
    try {
      out.push(name, json ? JSON.stringify(value) : value);
    } catch (cause) { // what JSON.stringify refuses (a cycle, a BigInt): INVALID_EVENT, as Python's InvalidEvent
      const err = outboxError('INVALID_EVENT', `${key} is not JSON-serialisable: ${cause.message}`, { cause });
      throw index === undefined ? err : Object.assign(err, { index }); // writeMany's, as the addon's errors
    }
  }
  return out;
}

// A row of the library's JSON with camelCase keys (aggregate_type -> aggregateType).
const camelKey = (k) => k.replace(/_(\w)/g, (_, c) => c.toUpperCase());
const camel = (o) => Object.fromEntries(Object.entries(o).map(([k, v]) => [camelKey(k), v]));

// A migration target by name (outbox_migrate_target).
function targetOf(target) {
  if (!Object.hasOwn(native.enums.migrate, target)) throw typeError("target must be 'all', 'outbox' or 'inbox'");
  return native.enums.migrate[target];
}

class Database extends Handle {
  /** @private use outbox.connect() */
  constructor(handle) {
    super(handle, native.db_close, ['CONNECTION', 'the connection is closed']);
  }

  /** A statement without parameters or results: transaction control, DDL (outbox_db_exec). */
  exec(sql) {
    return this._op((h) => native.db_exec(h, sql));
  }

  /** Writes an event in the current transaction (outbox_write_send/poll; keyed: outbox_write). */
  write(event) {
    return this._op((h) => native.write_fields(h, eventFields(event)));
  }

  /** Writes the events in order in the current transaction, in one trip to a worker thread. Stops at the first
   * failure, whose error carries `index`; the events before it are written. */
  writeMany(events) {
    return this._op((h) => native.write_many(h, Array.isArray(events) ? events.map(eventFields) : events));
  }

  /** fn(db) in a transaction: committed after it, rolled back when it throws (and rethrown). */
  async transaction(fn) {
    if (typeof fn !== 'function') throw typeError('transaction needs a function');
    await this._op(native.db_begin);
    let result;
    try {
      result = await fn(this);
    } catch (e) {
      await this._op(native.db_rollback).catch(() => {});
      throw e;
    }
    await this._op(native.db_commit);
    return result;
  }

  txState() {
    return this._op(native.db_tx_state);
  }

  /** Creates or upgrades the tables (outbox_migrate); resolves with the schema version. */
  migrate(target = 'all') {
    return this._op((h) => native.migrate(h, targetOf(target)));
  }

  dedupe(key) {
    return this._op((h) => native.consumer_dedupe(h, key));
  }

  /** Removes inbox rows older than olderThanSeconds, whole partitions at a time (outbox_inbox_purge). */
  purgeInbox(olderThanSeconds, batch = 1000) { return this._op((h) => native.inbox_purge(h, olderThanSeconds, batch)); }

  /** Aggregates held after a handler's failure, oldest first (outbox_parked_list); consumer null: all. */
  async parked(consumer = null, { includeRelay = true, limit = 100 } = {}) {
    return JSON.parse(await this._op((h) => native.parked_list(h, consumer, includeRelay, limit))).map(camel);
  }

  /** Retries a held aggregate's head now, then its held events in order (outbox_parked_redrive); 1 if held. */
  redrive(consumer, aggregateType, aggregateId) {
    return this._op((h) => native.parked_redrive(h, consumer, aggregateType, String(aggregateId)));
  }

  /** Redrives every parked aggregate of the consumer (outbox_parked_redrive_all); resolves with how many. */
  redriveAll(consumer) { return this._op((h) => native.parked_redrive_all(h, consumer)); }

  /** The gauges an operator alerts on, as Prometheus text for a /metrics of your own (outbox_metrics_text). */
  metricsText() { return this._op((h) => native.metrics_text(h)); }

  /** Skips a held aggregate's head, recorded with by and reason (outbox_parked_skip); resolves with its id. */
  skip(consumer, aggregateType, aggregateId, { by, reason = '', eventId = null } = {}) {
    return this._op((h) => native.parked_skip(h, consumer, aggregateType, String(aggregateId), eventId, by, reason));
  }
}

module.exports = { Database, eventFields, targetOf };
