'use strict';
// Consumer: a durable queue of one's own on the exchange (outbox_consumer_*), as an async iterator of Messages (settle
// them yourself), or consume(handler): the library's consumer loop (outbox_loop_*), its statements on node-postgres.
const native = require('./native');
const { Handle } = require('./handle');
const { Database } = require('./database');
const { makeConfig, loggerOf } = require('./config');
const { dedupeOn } = require('./pg');
const { PermanentFailure, outboxError, typeError } = require('./errors');

const SLICE_MS = 500; // longest native wait, so stop() and other calls on the handle are prompt
const L = native.loop; // the loop's actions and statements, from outbox.h
const MESSAGE_KEYS = native.message_keys; // id, eventType, ..., payloadText, seq, body, order, ...
const reasonOf = (err) => (err instanceof Error ? `${err.name}: ${err.message}` : String(err)); // outbox.h's form

class Message {
  /** @private made by Consumer: the event's fields, seq, delivery and body (outbox_message_*) */
  constructor(consumer, handle) {
    for (let i = 0; i < MESSAGE_KEYS.length; i++) this[MESSAGE_KEYS[i]] = native.message_value(handle, i);
    Object.assign(this, { _consumer: consumer, _h: handle, _settled: false });
  }

  get payload() {
    return this.payloadText === null ? null : JSON.parse(this.payloadText);
  }

  get envelope() {
    return JSON.parse(this.body.toString('utf8'));
  }

  field(name) {
    return native.message_field(this._h, name);
  }

  property(name) {
    return native.message_property(this._h, name);
  }

  ack() {
    return this._consumer._settle(this, native.consumer_ack);
  }

  nack(requeue = true) {
    return this._consumer._settle(this, (c, m) => native.consumer_nack(c, m, !!requeue));
  }

  deadLetter(reason) {
    return this._consumer._settle(this, (c, m) => native.consumer_dead_letter(c, m, reason));
  }

  /** Records this event in the inbox in the transaction of `target` (a node-postgres client or a Database). */
  async dedupe(target) {
    const r = await this._consumer.dedupe(target, this);
    [this.order, this.previousSeq] = [r.order, r.previousSeq];
    return r;
  }
}

// The loop's connection: a lent node-postgres client, a pool's client per event, or its own on 'pg.url'. It runs the
// statements the loop hands out, reports how they went; what that means is the library's to judge.
class LoopClient {
  constructor(consumer, lent, pool) {
    Object.assign(this, { consumer, lent, pool, client: lent || null });
  }

  async exec(loop) {
    const query = native.loop_statement(loop, this.consumer._prepared); // a node-postgres query, with its kind
    try {
      if (!this.client && this.pool) this.client = await this.pool.connect();
      native.loop_exec_done(loop, (await this.client.query(query)).rows[0]);
      if (query.kind === L.SQL_COMMIT || query.kind === L.SQL_ROLLBACK) this.release();
    } catch (e) {
      native.loop_exec_failed(loop, e);
      if (query.kind === L.SQL_ROLLBACK) this.release(e);
    }
  }

  release(err) {
    if (this.pool && this.client) {
      this.client.release(err);
      this.client = null;
    }
  }

  // A connection, at the start and after one was lost: a pool's next client, or one of its own.
  async open(loop) {
    if (this.pool) {
      this.release(new Error('connection lost'));
      return native.loop_opened(loop, true, '');
    }
    await this.close();
    const { name, _options: { 'pg.url': connectionString }, _log: log, _cfg: cfg } = this.consumer;
    const connectionTimeoutMillis = 1000 * native.config_get(cfg, 'pg.connect_timeout_s'); // as the library connects
    const c = new (require('pg').Client)({ connectionString, connectionTimeoutMillis, keepAlive: true });
    c.on('error', (e) => log && log('warn', `consumer ${name}: PostgreSQL: ${e.message}`));
    const failed = await c.connect().then(() => null, (e) => (e && e.message ? e.message : String(e)));
    if (failed !== null) return native.loop_opened(loop, false, failed);
    this.client = c;
    return native.loop_opened(loop, true, '');
  }

  async close() {
    const c = this.lent ? null : this.client;
    this.client = this.lent || null;
    if (c && this.pool) c.release();
    else if (c) await c.end().catch(() => {});
  }
}

class Consumer extends Handle {
  /** name: its queue unless consumer.queue is set; options: needs 'amqp.url' ('pg.url' for consume()). */
  constructor(name, options) {
    if (typeof name !== 'string') throw typeError('consumer name must be a string');
    const opts = { ...(options || {}) };
    const cfg = makeConfig(opts); // kept: it renders the dedupe statement
    const log = loggerOf(opts);
    super(native.consumer_new(cfg, name), native.consumer_free, ['INVALID_ARGUMENT', 'the consumer is closed']);
    this.name = name;
    this.queue = native.config_get(cfg, 'consumer.queue') || name;
    Object.assign(this, { _options: opts, _cfg: cfg, _log: log, _prepared: opts.preparedStatements !== false });
    Object.assign(this, { _stopping: false, _needsReset: false, _wake: null });
    if (log) native.consumer_set_logger(this._h, log);
  }

  // A new iteration or consume() after a stop(): clear the stop request first.
  _start() {
    this._stopping = false;
    if (this._needsReset) this._op(native.consumer_reset).catch(() => {});
    this._needsReset = false;
  }

  connect() {
    return this._op(native.consumer_connect);
  }

  /** The next event, or null after timeoutMs; rejects with STOPPED after stop(). */
  next(timeoutMs = 1000) {
    const none = (e) => (e.code === 'TIMEOUT' ? null : Promise.reject(e));
    return this._op((h) => native.consumer_next(h, timeoutMs).then((m) => new Message(this, m), none));
  }

  async *[Symbol.asyncIterator]() {
    this._start();
    const stopped = (e) => (e.code === 'STOPPED' || this._stopping ? false : Promise.reject(e));
    while (!this._stopping && this._closing === null) {
      const m = await this.next(SLICE_MS).catch(stopped);
      if (m === false) return;
      if (m) yield m;
    }
  }

  _settle(msg, fn) {
    if (!(msg instanceof Message) || msg._consumer !== this) {
      return Promise.reject(typeError('expected a Message of this consumer'));
    }
    if (msg._settled) return Promise.reject(outboxError('INVALID_ARGUMENT', 'the message was already settled'));
    msg._settled = true;
    return this._op((h) => fn(h, msg._h)).catch((e) => {
      msg._settled = false;
      throw e;
    });
  }

  /** Records `msg` in the inbox on a node-postgres client or a Database (outbox_consumer_dedupe_message). */
  async dedupe(target, msg) {
    if (!(msg instanceof Message)) throw typeError('expected a Message');
    if (target instanceof Database) {
      return target._op((dbh) => this._op((h) => native.consumer_dedupe_message(dbh, h, msg._h)));
    }
    const { id: eventId, aggregateType, aggregateId, seq } = msg;
    const key = { consumer: this.name, eventId, aggregateType, aggregateId, seq };
    return dedupeOn(this._cfg, target, key, this._prepared);
  }

  /** For each event until stop(): a transaction with the inbox row and handler(message, client) the first time only,
   * then ack; on options.client, a client from options.pool, or its own on pg.url. A failure parks its aggregate. */
  async consume(handler, options = {}) {
    if (typeof handler !== 'function') throw typeError('consume needs a handler (message, client) => ...');
    if (this._consuming) throw outboxError('INVALID_ARGUMENT', 'this consumer is already consuming');
    const { client: lent, pool } = options || {};
    const bad = lent !== undefined && typeof lent?.query !== 'function' ? 'client must be a node-postgres client'
      : pool !== undefined && typeof pool?.connect !== 'function' ? 'pool must be a node-postgres Pool' : null;
    if (bad) throw typeError(`options.${bad}`);
    const none = !lent && !pool && !this._options['pg.url'];
    if (none) throw outboxError('INVALID_ARGUMENT', "the consumer needs 'pg.url', options.client or options.pool");
    this._consuming = true;
    this._start();
    const db = new LoopClient(this, lent, pool);
    let loop = null;
    try { // from loop_new on: the flag is reset whatever fails
      loop = await this._op((h) => native.loop_new(h, lent ? L.DRIVER_LENT : L.DRIVER_OWNED, -1, 0, 'dollar'));
      await this._drive(loop, db, handler);
    } finally {
      this._consuming = false;
      if (loop !== null) native.loop_free(loop);
      await db.close();
    }
  }

  // Runs the library's loop to its end: each action it asks for, reported back.
  async _drive(loop, db, handler) {
    const act = {
      [L.BLOCK]: () => this._op((h) => native.loop_block(loop, h)),
      [L.EXEC]: () => db.exec(loop),
      [L.OPEN]: () => db.open(loop),
      [L.WAIT]: () => this._wait(loop),
      [L.HANDLE]: () => this._handle(loop, handler, db.client),
    };
    for (let action; (action = native.loop_next(loop)) in act;) await act[action]();
    native.loop_result(loop); // throws the error the loop ended with
  }

  // A backoff, which stop() ends early.
  async _wait(loop) {
    await new Promise((resolve) => {
      const timer = setTimeout(resolve, native.loop_wait_ms(loop));
      this._wake = () => resolve(clearTimeout(timer));
    });
    this._wake = null;
    native.loop_waited(loop);
  }

  async _handle(loop, handler, client) {
    const msg = new Message(this, native.loop_message(loop));
    try {
      await handler(msg, client);
    } catch (err) { // PermanentFailure (or err.permanent === true): parked at once; else retried
      const permanent = err instanceof PermanentFailure || err?.permanent === true;
      return native.loop_handler_done(loop, permanent ? L.HANDLER_PERMANENT : L.HANDLER_FAILED, reasonOf(err));
    }
    return native.loop_handler_done(loop, L.HANDLER_OK, null);
  }

  /** Asks the iterator and consume() to return (after the event in hand). */
  stop() {
    Object.assign(this, { _stopping: true, _needsReset: true });
    if (this._closing === null) native.consumer_stop(this._h);
    if (this._wake) this._wake();
  }
}

module.exports = { Consumer, Message };
