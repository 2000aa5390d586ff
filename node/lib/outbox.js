'use strict';
// Outbox: a configuration (options keyed by the C configuration keys) and everything done with
// it: writes and dedupes in the caller's node-postgres transaction (statements rendered by the
// library, run on the caller's client), connections the library opens, migrations, and the
// relays and consumers that share the configuration.
const native = require('./native');
const { makeConfig } = require('./config');
const { eventFields } = require('./event');
const { typeError, NETWORK_ERRNOS } = require('./errors');
const { MIGRATE_TARGETS } = require('./constants');
const { checkClient, txStatus, pgQuery, renderDedupe, dedupeOn } = require('./pg');

const W = native.write; // the write plan's steps and transaction states, from outbox.h
// The write plan's transaction state for txStatus(): a client that cannot say is taken as in a
// transaction (the plan goes on without a savepoint when there is none).
const TX = { I: W.TX_IDLE, T: W.TX_INTRANS, E: W.TX_INERROR, null: W.TX_INTRANS };

// A node-postgres error that means the connection is gone (no SQLSTATE).
function isLost(e) {
  return Boolean(e) && (NETWORK_ERRNOS.has(e.code) ||
    /not queryable|Connection terminated|connection is closed|Client was closed|ended/i.test(e.message || ''));
}

class Outbox {
  /**
   * @param {Record<string, string|number|boolean>} [options] configuration keys, and
   *   `preparedStatements` (default true): run rendered statements as named prepared statements
   *   on node-postgres (turn off behind a transaction-pooling proxy such as PgBouncer).
   */
  constructor(options) {
    this._options = Object.freeze({ ...(options || {}) });
    this._prepared = this._options.preparedStatements !== false;
    this._cfg = makeConfig(this._options); // freed by its finalizer
  }

  get options() {
    return this._options;
  }

  /** The configured value of a key (secrets read back as '***'). */
  get(key) {
    return native.config_get(this._cfg, key);
  }

  /**
   * The statement outbox_write would run, for node-postgres: { text, values } ($n placeholders)
   * plus the event's id and type. Validates the event (throws OutboxError).
   */
  renderWrite(event) {
    return native.render_write_fields(this._cfg, eventFields(event));
  }

  /**
   * Writes the event with the caller's node-postgres client, in the caller's transaction (the
   * library never begins, commits or rolls back). A duplicate idempotency key is DUPLICATE and,
   * inside a transaction, leaves it usable (a savepoint, as outbox_write does).
   * @returns {Promise<{eventId: string, eventType: string, seq: number}>}
   */
  async write(client, event) {
    checkClient(client);
    // The library's write plan (outbox_write_plan_*): each statement it hands out runs on the
    // client; what an error means (a reused key, a lost connection) is the library's to judge.
    const tx = TX[txStatus(client)];
    const { plan, eventId, eventType, next: first } = native.write_plan_new(this._cfg, eventFields(event), tx);
    let error = null;
    for (let st = first; st !== null;) {
      try {
        const res = await client.query(st.step === W.INSERT ? this._query('outbox_write', st) :
          { text: st.text, values: st.values, rowMode: 'array' });
        st = native.write_plan_done(plan, res.rows && res.rows.length ? res.rows[0] : null);
      } catch (e) {
        error = e;
        const sqlstate = e && typeof e.code === 'string' && /^[0-9A-Z]{5}$/.test(e.code) ? e.code : null;
        st = native.write_plan_failed(plan, sqlstate, e && typeof e.constraint === 'string' ? e.constraint : null,
          e && e.message ? e.message : String(e), sqlstate === null && isLost(e));
      }
    }
    try {
      return { eventId, eventType, seq: native.write_plan_result(plan) };
    } catch (e) {
      if (error && e.cause === undefined) e.cause = error;
      throw e;
    }
  }

  _query(prefix, st) {
    return pgQuery(prefix, st, this._prepared);
  }

  /** The inbox statement outbox_consumer_dedupe runs, for node-postgres: { text, values }. */
  renderDedupe(key) {
    return renderDedupe(this._cfg, key);
  }

  /**
   * Records (consumer, event) in the inbox in the client's current transaction.
   * @returns {Promise<{firstTime: boolean, order: string, previousSeq: number}>}
   */
  dedupe(client, key) {
    return dedupeOn(this._cfg, client, key, this._prepared);
  }

  /** Opens a connection the library owns (outbox_db_open), with this configuration. */
  async connect(conninfo) {
    if (typeof conninfo !== 'string') throw typeError('conninfo must be a string (a libpq URL or key=value list)');
    const { Database } = require('./database');
    const h = await native.db_open(conninfo, this._cfg);
    return new Database(h, this);
  }

  /** Creates or upgrades the tables (idempotent) on a connection of its own; resolves with the version. */
  async migrate(conninfo, target = 'all') {
    if (!(target in MIGRATE_TARGETS)) throw typeError("target must be 'all', 'outbox' or 'inbox'");
    const db = await this.connect(conninfo);
    try {
      return await db.migrate(target);
    } finally {
      await db.close();
    }
  }

  /** A relay with this configuration plus `options`. */
  relay(options) {
    const { Relay } = require('./relay');
    return new Relay({ ...this._options, ...(options || {}) });
  }

  /** A consumer named `name` with this configuration plus `options`. */
  consumer(name, options) {
    const { Consumer } = require('./consumer');
    return new Consumer(name, { ...this._options, ...(options || {}) });
  }
}

module.exports = { Outbox };
