'use strict';
// Database: a PostgreSQL connection the library opened (outbox_db_open). Every call runs on a
// worker thread and returns a Promise; calls on one Database run one at a time, in call order.
const native = require('./native');
const { Handle } = require('./handle');
const { typeError } = require('./errors');

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

  /** Writes an event in the connection's current transaction (outbox_write), in one native call. */
  write(event) {
    return this._op((h) => native.write_fields(h, event));
  }

  /**
   * Writes the events in order in the current transaction, in one trip to a worker thread. Stops
   * at the first failure, whose error carries `index`; the events before it are written.
   */
  writeMany(events) {
    return this._op((h) => native.write_many(h, events));
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

  /** 'IDLE' | 'ACTIVE' | 'INTRANS' | 'INERROR' | 'UNKNOWN' (outbox_db_tx_state) */
  txState() {
    return this._op(native.db_tx_state);
  }

  /** Creates or upgrades the tables (outbox_migrate); resolves with the schema version. */
  migrate(target = 'all') {
    return this._op((h) => native.migrate(h, targetOf(target)));
  }

  /** outbox_consumer_dedupe in the connection's current transaction. */
  dedupe(key) {
    return this._op((h) => native.consumer_dedupe(h, key));
  }

  /** Removes inbox rows older than olderThanSeconds, whole partitions at a time (outbox_inbox_purge). */
  purgeInbox(olderThanSeconds, batch = 1000) {
    return this._op((h) => native.inbox_purge(h, olderThanSeconds, batch));
  }
}

module.exports = { Database, targetOf };
