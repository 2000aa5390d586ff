'use strict';
// outbox: a transactional outbox for PostgreSQL and RabbitMQ (liboutbox's C API; README.md, index.d.ts). Everything
// that touches PostgreSQL or RabbitMQ returns a Promise and runs off the main thread.
const native = require('./native');
const { Outbox } = require('./outbox');
const { Database } = require('./database');
const { Relay } = require('./relay');
const { Consumer, Message } = require('./consumer');
const { OutboxError, PermanentFailure, STATUS } = require('./errors');
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
  Outbox, Database, Relay, Consumer, Message, OutboxError, PermanentFailure,
  status: Object.freeze({ ...STATUS }),
  native,
  version: native.version(),
  write: async (client, event, options) => outboxFor(options).write(client, event),
  renderWrite: (event, options) => outboxFor(options).renderWrite(event),
  dedupe: async (client, key, options) => outboxFor(options).dedupe(client, key),
  renderDedupe: (key, options) => outboxFor(options).renderDedupe(key),
  connect: async (conninfo, options) => outboxFor(options).connect(conninfo),
  migrate: async (conninfo, options, target) => outboxFor(options).migrate(conninfo, target),
  configKeys,
};
