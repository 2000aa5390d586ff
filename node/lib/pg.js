'use strict';
// node-postgres: what writes and dedupes on a caller's client need (one connection, not a pool;
// its transaction state; named prepared statements), and the dedupe statement run on it.
const crypto = require('crypto');
const native = require('./native');
const { outboxError, typeError, fromPg } = require('./errors');
const { dedupeResult } = require('./constants');

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

// A rendered statement as a node-postgres query, named (prepared once per connection) unless off.
function pgQuery(prefix, st, prepared) {
  const q = { text: st.text, values: st.values, rowMode: 'array' };
  if (prepared) q.name = statementName(prefix, st.text);
  return q;
}

/** The inbox statement outbox_consumer_dedupe runs, for node-postgres: { text, values }. */
function renderDedupe(cfg, key) {
  checkKey(key);
  const st = native.render_dedupe(cfg, key.consumer, key.eventId, nullable(key.aggregateType),
    nullable(key.aggregateId), key.seq === undefined || key.seq === null ? 0 : key.seq);
  try {
    return { text: native.statement_sql(st), values: native.statement_params(st) };
  } finally {
    native.statement_free(st);
  }
}

/** Records (consumer, event) in the inbox in the client's current transaction. */
async function dedupeOn(cfg, client, key, prepared) {
  checkClient(client);
  const st = renderDedupe(cfg, key);
  if (txStatus(client) === 'E') {
    throw outboxError('TRANSACTION', "the caller's transaction is aborted; roll it back before deduplicating");
  }
  const r = await query(client, pgQuery('outbox_dedupe', st, prepared), 'outbox dedupe');
  const row = r.rows[0];
  const previous = row[1] === null || row[1] === undefined ? null : BigInt(row[1]);
  // The library's order check (outbox_dedupe_interpret), not a copy of it.
  return dedupeResult(native.dedupe_interpret(cfg, nullable(key.aggregateType), nullable(key.aggregateId),
    key.seq === undefined || key.seq === null ? 0 : key.seq, row[0] === true || row[0] === 't', previous));
}

module.exports = { checkClient, txStatus, pgQuery, renderDedupe, dedupeOn };
