'use strict';
// Outbox: a configuration (options keyed by the C configuration keys) and everything done with it: writes and dedupes
// in the caller's node-postgres transaction (the library's statements), connections, migrations, relays, consumers.
const native = require('./native');
const { makeConfig } = require('./config');
const { typeError } = require('./errors');
const { checkClient, txOf, dedupeOn } = require('./pg');
const { Database, eventFields, targetOf } = require('./database');
const { Relay } = require('./relay');
const { Consumer } = require('./consumer');

class Outbox {
  /** options: configuration keys, and preparedStatements (default true: named statements on node-postgres) */
  constructor(options) {
    this._options = Object.freeze({ ...(options || {}) });
    this._prepared = this._options.preparedStatements !== false;
    this._cfg = makeConfig(this._options); // freed by its finalizer
  }

  /** The configured value of a key (secrets read back as '***'). */
  get(key) {
    return native.config_get(this._cfg, key);
  }

  /** { text, values, eventId, eventType }: the statement outbox_write would run, for node-postgres. */
  renderWrite(event) {
    return native.render_write_fields(this._cfg, eventFields(event));
  }

  /** Writes the event with the caller's node-postgres client, in the caller's transaction: the library's write plan
   * (outbox_write_plan_*), each statement run on the client, what an error means the library's to judge. */
  async write(client, event) {
    checkClient(client);
    const fields = eventFields(event);
    const { plan, eventId, eventType, next } = native.write_plan_new(this._cfg, fields, txOf(client), this._prepared);
    let error;
    for (let query = next; query !== null;) {
      // Only the driver's call is caught (a synchronous throw too): an error of the addon's is not the driver's.
      const r = await (async () => client.query(query))().then((res) => ({ ok: true, res }), (e) => ({ ok: false, e }));
      if (!r.ok) error = r.e;
      query = r.ok ? native.write_plan_done(plan, r.res.rows[0]) : native.write_plan_failed(plan, r.e);
    }
    return { eventId, eventType, seq: native.write_plan_result(plan, error) };
  }

  /** { text, values }: the inbox statement outbox_consumer_dedupe runs, for node-postgres. */
  renderDedupe(key) {
    return native.render_dedupe(this._cfg, key);
  }

  /** Records (consumer, event) in the inbox in the client's current transaction. */
  dedupe(client, key) {
    return dedupeOn(this._cfg, client, key, this._prepared);
  }

  /** Opens a connection the library owns (outbox_db_open), with this configuration. */
  async connect(conninfo) {
    if (typeof conninfo !== 'string') throw typeError('conninfo must be a string (a libpq URL or key=value list)');
    return new Database(await native.db_open(conninfo, this._cfg));
  }

  /** Creates or upgrades the tables on a connection of its own; resolves with the version. */
  async migrate(conninfo, target = 'all') {
    targetOf(target); // checked before connecting
    const db = await this.connect(conninfo);
    try {
      return await db.migrate(target);
    } finally {
      await db.close();
    }
  }

  relay(options) {
    return new Relay({ ...this._options, ...(options || {}) });
  }

  consumer(name, options) {
    return new Consumer(name, { ...this._options, ...(options || {}) });
  }
}

module.exports = { Outbox };
