'use strict';
// node-postgres: what writes and dedupes on a caller's client need (one connection, not a pool;
// its transaction state), and the dedupe statement run on it.
const native = require('./native');
const { typeError } = require('./errors');

const PASS_A_CLIENT = 'pass the pg.Client, or the client from `await pool.connect()`, that ran BEGIN';

// One node-postgres connection (a pg.Client, a pooled client), not a pool, whose INSERT would commit
// on its own: pools (pg.Pool, pg-promise's $pool, ...) are known by what they count or hold.
function checkClient(client) {
  if (client === null || typeof client !== 'object' || typeof client.query !== 'function') {
    throw typeError(`expected a node-postgres client: ${PASS_A_CLIENT}`);
  }
  const kind = (client.constructor && client.constructor.name) || '';
  if (['totalCount', 'idleCount', 'waitingCount'].some((k) => typeof client[k] === 'number') ||
    (client.$pool !== undefined && client.$pool !== null) || /pool/i.test(kind)) {
    throw typeError('a pool runs each query on any free connection, outside your transaction, so the event ' +
      `would outlive a ROLLBACK: ${PASS_A_CLIENT}`);
  }
  if (typeof client.release !== 'function' && typeof client.getTransactionStatus !== 'function' &&
    !('processID' in client && typeof client.connection === 'object' && client.connection !== null)) {
    throw typeError(`expected one node-postgres connection, not a ${kind || 'plain object'}: ${PASS_A_CLIENT}`);
  }
}

// The client's transaction status ('I', 'T', 'E'), which the addon reads; null when it cannot say.
const txOf = (client) => (typeof client.getTransactionStatus === 'function' ? client.getTransactionStatus() : null);

/** Records (consumer, event) in the inbox in the client's current transaction. */
async function dedupeOn(cfg, client, key, prepared) {
  checkClient(client);
  const query = native.render_dedupe(cfg, key, prepared, txOf(client)); // refuses an aborted transaction
  const res = await client.query(query).catch((e) => {
    throw native.driver_error('outbox dedupe', e); // the library's error for it (outbox_driver_error)
  });
  return native.dedupe_interpret(cfg, key, res.rows[0]); // the library's order check
}

module.exports = { checkClient, txOf, dedupeOn };
