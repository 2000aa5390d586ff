'use strict';
// outbox: a transactional outbox for PostgreSQL and RabbitMQ (liboutbox's C API, from Node).
//
//   const outbox = require('outbox');
//   await client.query('BEGIN');                     // node-postgres, your transaction
//   await client.query('INSERT INTO products ...');
//   await outbox.write(client, { aggregateType: 'PRD', aggregateId: '123', operation: 'POST',
//                                payload: { PRD_ID: '123' } }, { 'event.type_map': 'PRD=Product' });
//   await client.query('COMMIT');                    // both persist, or neither does
//
// Everything that touches PostgreSQL or RabbitMQ returns a Promise and runs off the main thread.
const native = require('./native');
const { Outbox } = require('./outbox');
const { Database } = require('./database');
const { Relay } = require('./relay');
const { Consumer, Message } = require('./consumer');
const { OutboxError, STATUS } = require('./errors');
const { configKeys } = require('./config');

// One Outbox per options object (and one for none), so repeated calls reuse its configuration.
const byOptions = new WeakMap();
let defaults = null;
function outboxFor(options) {
  if (options === undefined || options === null) return (defaults ??= new Outbox());
  if (typeof options !== 'object') return new Outbox(options);
  if (!byOptions.has(options)) byOptions.set(options, new Outbox(options));
  return byOptions.get(options);
}

module.exports = {
  Outbox, Database, Relay, Consumer, Message, OutboxError,
  /** status name -> number, as outbox_status */
  status: Object.freeze({ ...STATUS }),
  /** the 1:1 native layer (bindings/node): one function per C function */
  native,
  version: native.version(),
  /** Writes an event in the node-postgres client's current transaction. */
  write: async (client, event, options) => outboxFor(options).write(client, event),
  /** { text, values, eventId, eventType } for running the write yourself. */
  renderWrite: (event, options) => outboxFor(options).renderWrite(event),
  /** Records (consumer, event) in the inbox in the client's current transaction. */
  dedupe: async (client, key, options) => outboxFor(options).dedupe(client, key),
  /** { text, values } of the inbox statement. */
  renderDedupe: (key, options) => outboxFor(options).renderDedupe(key),
  /** A connection the library opens and owns (outbox_db_open). */
  connect: async (conninfo, options) => outboxFor(options).connect(conninfo),
  /** Creates or upgrades the tables on a connection of its own; resolves with the version. */
  migrate: async (conninfo, options, target) => outboxFor(options).migrate(conninfo, target),
  /** Every configuration key with its help text. */
  configKeys,
};
