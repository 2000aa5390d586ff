'use strict';
// Outbox: a configuration (options keyed by the C configuration keys) and everything done with
// it: writes and dedupes in the caller's node-postgres transaction (statements rendered by the
// library, run on the caller's client), connections the library opens, migrations, and the
// relays and consumers that share the configuration.
const crypto = require('crypto');
const native = require('./native');
const { makeConfig } = require('./config');
const { eventFields } = require('./event');
const { outboxError, typeError, fromPg, NETWORK_ERRNOS } = require('./errors');
const { MIGRATE_TARGETS, dedupeResult } = require('./constants');

const PASS_A_CLIENT = 'pass the pg.Client, or the client from `await pool.connect()`, that ran BEGIN';

// A pool runs each query on whichever of its connections is free: an INSERT through it commits on
// its own, outside the caller's transaction, and survives their ROLLBACK. Pools of node-postgres
// (pg.Pool), pg-promise ($pool) and the like are recognised by what they count or hold.
function looksLikePool(client) {
  return typeof client.totalCount === 'number' || typeof client.idleCount === 'number' ||
    typeof client.waitingCount === 'number' || (client.$pool !== undefined && client.$pool !== null) ||
    /pool/i.test((client.constructor && client.constructor.name) || '');
}

// One node-postgres connection: a pg.Client (it has a processID slot and its protocol
// connection) or a pooled client (it also has release()).
function isSingleClient(client) {
  return typeof client.release === 'function' || typeof client.getTransactionStatus === 'function' ||
    ('processID' in client && typeof client.connection === 'object' && client.connection !== null);
}

function checkClient(client) {
  if (client === null || typeof client !== 'object' || typeof client.query !== 'function') {
    throw typeError(`expected a node-postgres client: ${PASS_A_CLIENT}`);
  }
  if (looksLikePool(client)) {
    throw typeError('a pool runs each query on any free connection, outside your transaction, so the event ' +
      `would outlive a ROLLBACK: ${PASS_A_CLIENT}`);
  }
  if (!isSingleClient(client)) {
    throw typeError(`expected one node-postgres connection, not a ${(client.constructor && client.constructor.name) ||
      'plain object'}: ${PASS_A_CLIENT}`);
  }
}

const W = native.write; // the write plan's steps and transaction states, from outbox.h
// The write plan's transaction state for txStatus(): a client that cannot say is taken as in a
// transaction (the plan goes on without a savepoint when there is none).
const TX = { I: W.TX_IDLE, T: W.TX_INTRANS, E: W.TX_INERROR, null: W.TX_INTRANS };

// A node-postgres error that means the connection is gone (no SQLSTATE).
function isLost(e) {
  return Boolean(e) && (NETWORK_ERRNOS.has(e.code) ||
    /not queryable|Connection terminated|connection is closed|Client was closed|ended/i.test(e.message || ''));
}

// 'I' idle, 'T' in a transaction, 'E' in a failed transaction, null when the client cannot say.
function txStatus(client) {
  if (typeof client.getTransactionStatus !== 'function') return null;
  const s = client.getTransactionStatus();
  return s === 'I' || s === 'T' || s === 'E' ? s : null;
}

async function query(client, q, context) {
  try {
    return await client.query(q);
  } catch (e) {
    throw fromPg(e, context);
  }
}

function checkKey(key) {
  if (key === null || typeof key !== 'object') {
    throw typeError('dedupe key must be an object { consumer, eventId, aggregateType?, aggregateId?, seq? }');
  }
}

function nullable(v) {
  return v === undefined || v === null ? null : String(v);
}

// A statement name per distinct SQL text: node-postgres prepares a named statement once per
// connection and then only binds parameters, so the server does not parse and plan the write's
// CTE again for every event.
const statementNames = new Map();
function statementName(prefix, text) {
  let name = statementNames.get(text);
  if (name === undefined) {
    name = `${prefix}_${crypto.createHash('sha256').update(text).digest('hex').slice(0, 24)}`;
    if (statementNames.size > 1000) statementNames.clear();
    statementNames.set(text, name);
  }
  return name;
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
    const q = { text: st.text, values: st.values, rowMode: 'array' };
    if (this._prepared) q.name = statementName(prefix, st.text);
    return q;
  }

  /** The inbox statement outbox_consumer_dedupe runs, for node-postgres: { text, values }. */
  renderDedupe(key) {
    checkKey(key);
    const st = native.render_dedupe(this._cfg, key.consumer, key.eventId, nullable(key.aggregateType),
      nullable(key.aggregateId), key.seq === undefined || key.seq === null ? 0 : key.seq);
    try {
      return { text: native.statement_sql(st), values: native.statement_params(st) };
    } finally {
      native.statement_free(st);
    }
  }

  /**
   * Records (consumer, event) in the inbox in the client's current transaction.
   * @returns {Promise<{firstTime: boolean, order: string, previousSeq: number}>}
   */
  async dedupe(client, key) {
    checkClient(client);
    const st = this.renderDedupe(key);
    if (txStatus(client) === 'E') {
      throw outboxError('TRANSACTION', "the caller's transaction is aborted; roll it back before deduplicating");
    }
    const r = await query(client, this._query('outbox_dedupe', st), 'outbox dedupe');
    const row = r.rows[0];
    const previous = row[1] === null || row[1] === undefined ? null : BigInt(row[1]);
    // The library's order check (outbox_dedupe_interpret), not a copy of it.
    return dedupeResult(native.dedupe_interpret(this._cfg, nullable(key.aggregateType), nullable(key.aggregateId),
      key.seq === undefined || key.seq === null ? 0 : key.seq, row[0] === true || row[0] === 't', previous));
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

module.exports = { Outbox, checkClient, txStatus };
