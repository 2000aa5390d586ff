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

  /** SQL without parameters or results: BEGIN, COMMIT, ROLLBACK, DDL (outbox_db_exec). */
  exec(sql) {
    return this._op((h) => native.db_exec(h, sql));
  }

  /**
   * Writes an event in the connection's current transaction (outbox_write; one native call
   * builds, writes and frees it).
   * @returns {Promise<{eventId: string, eventType: string, seq: number}>}
   */
  write(event) {
    return this._op((h) => native.write_fields(h, event));
  }

  /**
   * Writes several events in order in the connection's current transaction, with one trip to a
   * worker thread for all of them. Stops at the first failure, whose error carries `index`; the
   * events before it are written — the caller's transaction decides.
   */
  writeMany(events) {
    return this._op((h) => native.write_many(h, events));
  }

  /** BEGIN; fn(db); COMMIT — or ROLLBACK when fn throws (and rethrow). */
  async transaction(fn) {
    if (typeof fn !== 'function') throw typeError('transaction needs a function');
    await this.exec('BEGIN');
    let result;
    try {
      result = await fn(this);
    } catch (e) {
      await this.exec('ROLLBACK').catch(() => {});
      throw e;
    }
    await this.exec('COMMIT');
    return result;
  }

  /** 'IDLE' | 'ACTIVE' | 'INTRANS' | 'INERROR' | 'UNKNOWN' */
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

  /**
   * Removes inbox rows processed more than olderThanSeconds ago (outbox_inbox_purge): whole
   * partitions, so rows may stay up to inbox.partition_s longer; an age below inbox.retention_s
   * is refused (INVALID_ARGUMENT). Resolves with the number removed.
   */
  purgeInbox(olderThanSeconds, batch = 1000) {
    return this._op((h) => native.inbox_purge(h, olderThanSeconds, batch));
  }
}

module.exports = { Database, targetOf };
