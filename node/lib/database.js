'use strict';
// Database: a PostgreSQL connection the library opened (outbox_db_open). Every call runs on a
// worker thread and returns a Promise; calls on one Database run one at a time, in call order.
const native = require('./native');
const { Serial } = require('./serial');
const { newEvent, eventFields } = require('./event');
const { outboxError, typeError } = require('./errors');
const { TX_STATES, MIGRATE_TARGETS, dedupeResult } = require('./constants');

class Database {
  /** @private use outbox.connect() */
  constructor(handle, outbox) {
    this._h = handle;
    this._outbox = outbox;
    this._q = new Serial();
    this._closing = null;
  }

  get closed() {
    return this._closing !== null;
  }

  _op(fn) {
    if (this._closing !== null) {
      return Promise.reject(outboxError('CONNECTION', 'the connection is closed'));
    }
    return this._q.run(() => fn(this._h));
  }

  /** SQL without parameters or results: BEGIN, COMMIT, ROLLBACK, DDL (outbox_db_exec). */
  exec(sql) {
    if (typeof sql !== 'string') return Promise.reject(typeError('sql must be a string'));
    return this._op((h) => native.db_exec(h, sql));
  }

  /**
   * Writes an event in the connection's current transaction (outbox_write).
   * @returns {Promise<{eventId: string, eventType: string, seq: number}>}
   */
  write(event) {
    // One native call builds, writes and frees the event (see write_fields in the addon).
    return this._op((h) => native.write_fields(h, eventFields(event)));
  }

  /**
   * Writes several events in order in the connection's current transaction, with one trip to a
   * worker thread for all of them (outbox_write each). Stops at the first failure, whose error
   * carries `index`; the events before it are written — the caller's transaction decides.
   * @returns {Promise<Array<{eventId: string, eventType: string, seq: number}>>}
   */
  writeMany(events) {
    if (!Array.isArray(events)) return Promise.reject(typeError('events must be an array'));
    return this._op(async (h) => {
      const evs = [];
      try {
        for (let i = 0; i < events.length; i++) {
          try {
            evs.push(newEvent(events[i]));
          } catch (e) {
            e.index = i;
            throw e;
          }
        }
        await native.write_each(h, evs);
        return evs.map((ev) => ({ eventId: native.event_id(ev), eventType: native.event_type(ev), seq: native.event_seq(ev) }));
      } finally {
        for (const ev of evs) native.event_free(ev);
      }
    });
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
    return this._op((h) => TX_STATES[native.db_tx_state(h)]);
  }

  /** Creates or upgrades the tables (outbox_migrate); resolves with the schema version. */
  migrate(target = 'all') {
    if (!(target in MIGRATE_TARGETS)) return Promise.reject(typeError("target must be 'all', 'outbox' or 'inbox'"));
    return this._op((h) => native.migrate(h, MIGRATE_TARGETS[target]));
  }

  /** outbox_consumer_dedupe in the connection's current transaction. */
  dedupe(key) {
    if (key === null || typeof key !== 'object') return Promise.reject(typeError('dedupe key must be an object'));
    return this._op(async (h) => dedupeResult(await native.consumer_dedupe(h, key.consumer, key.eventId,
      key.aggregateType == null ? null : String(key.aggregateType),
      key.aggregateId == null ? null : String(key.aggregateId), key.seq == null ? 0 : key.seq)));
  }

  /**
   * Removes inbox rows processed more than olderThanSeconds ago (outbox_inbox_purge): whole
   * partitions, so rows may stay up to inbox.partition_s longer; an age below inbox.retention_s
   * is refused (INVALID_ARGUMENT). Resolves with the number removed.
   */
  purgeInbox(olderThanSeconds, batch = 1000) {
    return this._op((h) => native.inbox_purge(h, olderThanSeconds, batch));
  }

  /** Closes the connection once pending calls settled. Idempotent. */
  close() {
    if (this._closing === null) {
      this._closing = this._q.run(() => {
        native.db_close(this._h);
      });
    }
    return this._closing;
  }
}

module.exports = { Database };
