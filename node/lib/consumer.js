'use strict';
// Consumer: a durable queue of one's own on the exchange (outbox_consumer_*), as
//   - an async iterator of Messages (ack/nack/deadLetter them yourself), or
//   - consume(handler): for each event BEGIN on a node-postgres client, record it in the inbox
//     (the library's dedupe statement, on that client), run handler(message, client) the first
//     time only, COMMIT, then ack; a failing handler rolls back and the message is redelivered,
//     until consumer.delivery_limit attempts, then dead-lettered with the error text.
const native = require('./native');
const { Serial } = require('./serial');
const { makeConfig, loggerOf } = require('./config');
const { dedupeOn } = require('./pg');
const { outboxError, typeError } = require('./errors');
const { ORDERS } = require('./constants');

const SLICE_MS = 500; // longest native wait, so stop() and other calls on the handle are prompt

const L = native.loop; // the loop's actions and kinds, from outbox.h

function reasonOf(err) {
  return err && err.message ? err.message : String(err);
}

function parseJson(text) {
  return text === null ? null : JSON.parse(text);
}

class Message {
  /** @private made by Consumer */
  constructor(consumer, handle) {
    this._consumer = consumer;
    this._h = handle;
    this._settled = false;
    const f = (name) => native.message_field(handle, name);
    this.id = f('OUTBOX_ID');
    this.eventType = f('EVENT_TYPE');
    this.aggregateType = f('AGGREGATE_TYPE');
    this.aggregateId = f('AGGREGATE_ID');
    this.operation = f('OPERATION');
    this.user = f('USER');
    this.createdAt = f('CREATED_AT');
    /** exact JSON text of PAYLOAD / PREVIOUS_PAYLOAD / METADATA (null when absent) */
    this.payloadText = f('PAYLOAD');
    this.previousPayloadText = f('PREVIOUS_PAYLOAD');
    this.metadataText = f('METADATA');
    this.seq = native.message_seq(handle);
    this.redelivered = native.message_redelivered(handle);
    this.deliveryCount = native.message_delivery_count(handle);
    this.routingKey = native.message_property(handle, 'routing_key');
    /** the raw body, as the relay published it */
    this.body = native.message_body(handle);
    /** set by dedupe: 'UNCHECKED' | 'IN_ORDER' | 'STALE' | 'GAP', and the aggregate's previous seq */
    this.order = ORDERS[native.message_order(handle)];
    this.previousSeq = native.message_previous_seq(handle);
  }

  get payload() {
    return parseJson(this.payloadText);
  }

  get previousPayload() {
    return parseJson(this.previousPayloadText);
  }

  get metadata() {
    return parseJson(this.metadataText);
  }

  /** The body parsed: the documents' envelope ({ OUTBOX_ID, EVENT_TYPE, AGGREGATE_ID, PAYLOAD, ... }). */
  get envelope() {
    return JSON.parse(this.body.toString('utf8'));
  }

  /** An envelope field by name (outbox_message_field). */
  field(name) {
    return native.message_field(this._h, name);
  }

  /** A property or header by name (outbox_message_property): 'message_id', 'outbox-seq', ... */
  property(name) {
    return native.message_property(this._h, name);
  }

  get settled() {
    return this._settled;
  }

  /** Acknowledge (after your transaction committed). */
  ack() {
    return this._consumer._settle(this, (c, m) => native.consumer_ack(c, m));
  }

  /** Negative acknowledgement; requeue (default) redelivers it. */
  nack(requeue = true) {
    return this._consumer._settle(this, (c, m) => native.consumer_nack(c, m, !!requeue));
  }

  /** To the dead-letter queue with `reason` in header x-outbox-dead-reason, then acked. */
  deadLetter(reason) {
    if (typeof reason !== 'string') return Promise.reject(typeError('reason must be a string'));
    return this._consumer._settle(this, (c, m) => native.consumer_dead_letter(c, m, reason));
  }

  /**
   * Records this event in the consumer's inbox in the current transaction of `target`: a
   * node-postgres client (the rendered statement) or a Database (outbox_consumer_dedupe_message).
   */
  async dedupe(target) {
    const r = await this._consumer.dedupe(target, this);
    this.order = r.order;
    this.previousSeq = r.previousSeq;
    return r;
  }
}

// The loop's database connection on node-postgres: a lent client, a client per event from a pool,
// or a client of its own on 'pg.url'. It runs the statement the loop hands out and reports how it
// went; what that means (a lost connection, the handler's failure) is the library's to judge.
class LoopClient {
  constructor(consumer, lent, pool) {
    this._consumer = consumer;
    this._lent = lent;
    this._pool = pool;
    this.client = lent || null;
  }

  async exec(loop) {
    const st = native.loop_statement(loop);
    try {
      if (!this.client && this._pool) this.client = await this._pool.connect();
      const res = await this.client.query(st.kind === L.SQL_DEDUPE ? { text: st.sql, values: st.params,
        rowMode: 'array' } : st.sql);
      native.loop_exec_done(loop, st.kind === L.SQL_DEDUPE && res.rows.length ? res.rows[0] : null);
      if (st.kind === L.SQL_COMMIT || st.kind === L.SQL_ROLLBACK) this._release();
    } catch (e) {
      const sqlstate = typeof e.code === 'string' && /^[0-9A-Z]{5}$/.test(e.code) ? e.code : null;
      native.loop_exec_failed(loop, sqlstate, reasonOf(e), false);
      if (st.kind === L.SQL_ROLLBACK) this._release(e);
    }
  }

  _release(err) {
    if (this._pool && this.client) {
      this.client.release(err);
      this.client = null;
    }
  }

  // The loop asks for a connection (at the start, and after one was lost).
  async open(loop) {
    if (this._pool) {
      this._release(new Error('connection lost'));
      native.loop_opened(loop, true, '');
      return;
    }
    await this.close();
    const pg = require('pg');
    const c = new pg.Client({ connectionString: this._consumer._options['pg.url'] });
    c.on('error', (e) => this._consumer._logAt('warn', `consumer ${this._consumer.name}: PostgreSQL: ${e.message}`));
    try {
      await c.connect();
    } catch (e) {
      native.loop_opened(loop, false, reasonOf(e));
      return;
    }
    this.client = c;
    native.loop_opened(loop, true, '');
  }

  async close() {
    if (this._lent) return;
    const c = this.client;
    this.client = null;
    if (c && this._pool) c.release();
    else if (c) await c.end().catch(() => {});
  }
}

class Consumer {
  /**
   * @param {string} name the consumer's name (its queue unless consumer.queue is set)
   * @param {Record<string, string|number|boolean|Function>} options configuration keys (needs
   *   'amqp.url'; 'pg.url' for consume() without a client), and `logger: (level, message) => void`.
   */
  constructor(name, options) {
    if (typeof name !== 'string') throw typeError('consumer name must be a string');
    this._options = { ...(options || {}) };
    const cfg = makeConfig(this._options);
    try {
      this._h = native.consumer_new(cfg, name);
      this.queue = native.config_get(cfg, 'consumer.queue') || name;
    } finally {
      native.config_free(cfg);
    }
    this.name = name;
    this._cfg = makeConfig(this._options); // renders the dedupe statement (freed by its finalizer)
    this._log = loggerOf(this._options);
    if (this._log) native.consumer_set_logger(this._h, this._log);
    this._q = new Serial();
    this._stopping = false;
    this._needsReset = false;
    this._wake = null; // resolves a backoff sleep early on stop()
    this._closing = null;
  }

  _op(fn) {
    if (this._closing !== null) return Promise.reject(outboxError('INVALID_ARGUMENT', 'the consumer is closed'));
    return this._q.run(() => fn(this._h));
  }

  _logAt(level, message) {
    if (this._log) this._log(['debug', 'info', 'warn', 'error'].indexOf(level), message);
  }

  // A new iteration or consume() after a stop(): clear the stop request first.
  _start() {
    this._stopping = false;
    if (this._needsReset) {
      this._needsReset = false;
      this._op((h) => native.consumer_reset(h)).catch(() => {});
    }
  }

  /** Declares the topology and starts consuming (otherwise the first next() does). */
  connect() {
    return this._op((h) => native.consumer_connect(h));
  }

  /**
   * The next event, waiting at most timeoutMs; null on timeout. Rejects with code STOPPED after
   * stop(). Messages that are not events are dead-lettered by the library and skipped.
   */
  next(timeoutMs = 1000) {
    return this._op(async (h) => {
      try {
        return new Message(this, await native.consumer_next(h, timeoutMs));
      } catch (e) {
        if (e.code === 'TIMEOUT') return null;
        throw e;
      }
    });
  }

  /** Events until stop() (or close()). */
  async *[Symbol.asyncIterator]() {
    this._start();
    while (!this._stopping && this._closing === null) {
      let m;
      try {
        m = await this.next(SLICE_MS);
      } catch (e) {
        if (e.code === 'STOPPED' || this._stopping) return;
        throw e;
      }
      if (m) yield m;
    }
  }

  _settle(msg, fn) {
    if (!(msg instanceof Message) || msg._consumer !== this) {
      return Promise.reject(typeError('expected a Message of this consumer'));
    }
    if (msg._settled) return Promise.reject(outboxError('INVALID_ARGUMENT', 'the message was already settled'));
    msg._settled = true;
    return this._op(async (h) => {
      try {
        return await fn(h, msg._h);
      } catch (e) {
        msg._settled = false;
        throw e;
      }
    });
  }

  /** Dedupe `msg` on a node-postgres client (rendered statement) or a Database. */
  async dedupe(target, msg) {
    if (!(msg instanceof Message)) throw typeError('expected a Message');
    const { Database } = require('./database');
    if (target instanceof Database) {
      const { dedupeResult } = require('./constants');
      return target._op((dbh) => this._op(async (ch) => dedupeResult(
        await native.consumer_dedupe_message(dbh, ch, msg._h))));
    }
    return dedupeOn(this._cfg, target, {
      consumer: this.name,
      eventId: msg.id,
      aggregateType: msg.aggregateType,
      aggregateId: msg.aggregateId,
      seq: msg.seq,
    }, this._options.preparedStatements !== false);
  }

  _sleep(ms) {
    return new Promise((resolve) => {
      const t = setTimeout(() => {
        this._wake = null;
        resolve();
      }, ms);
      this._wake = () => {
        clearTimeout(t);
        this._wake = null;
        resolve();
      };
    });
  }

  /**
   * Handles events until stop(), each exactly once in effect: the library's consumer loop
   * (outbox_loop_*), the same in every language:
   *   BEGIN -> dedupe (inbox row) -> await handler(message, client) -> COMMIT -> ack.
   * A failing handler: ROLLBACK, then requeue, or dead-letter after consumer.delivery_limit.
   * Database or broker failures: the message goes back to the queue, retried with backoff; a lost
   * broker connection is reopened (the next address of amqp.url first).
   * @param {(message: Message, client: object) => unknown} handler
   * @param {{ client?: object, pool?: object }} [options] a node-postgres Client, or a Pool to take
   *   one from per event; neither: a client of its own on 'pg.url'.
   * @returns {Promise<void>} resolves after stop()
   */
  async consume(handler, options = {}) {
    if (typeof handler !== 'function') throw typeError('consume needs a handler (message, client) => ...');
    if (this._consuming) throw outboxError('INVALID_ARGUMENT', 'this consumer is already consuming');
    const { client: lent, pool } = options || {};
    if (lent !== undefined && (lent === null || typeof lent.query !== 'function')) {
      throw typeError('options.client must be a node-postgres client');
    }
    if (pool !== undefined && (pool === null || typeof pool.connect !== 'function')) {
      throw typeError('options.pool must be a node-postgres Pool');
    }
    if (!lent && !pool && !this._options['pg.url']) {
      throw outboxError('INVALID_ARGUMENT', "the consumer needs 'pg.url', options.client or options.pool");
    }
    this._consuming = true;
    this._start();
    const db = new LoopClient(this, lent, pool);
    const loop = await this._op((h) => native.loop_new(h, lent ? L.DRIVER_LENT : L.DRIVER_OWNED, -1, 0, 'dollar'));
    try {
      await this._drive(loop, db, handler);
    } finally {
      this._consuming = false;
      native.loop_free(loop);
      await db.close();
    }
  }

  // Runs the library's loop to its end: each action it asks for, reported back.
  async _drive(loop, db, handler) {
    for (;;) {
      switch (native.loop_next(loop)) {
        case L.BLOCK:
          await this._op((h) => native.loop_block(loop, h));
          break;
        case L.EXEC:
          await db.exec(loop);
          break;
        case L.HANDLE:
          await this._callHandler(loop, db, handler);
          break;
        case L.WAIT:
          await this._sleep(native.loop_wait_ms(loop));
          native.loop_waited(loop);
          break;
        case L.OPEN:
          await db.open(loop);
          break;
        default:
          native.loop_result(loop);
          return;
      }
    }
  }

  async _callHandler(loop, db, handler) {
    const msg = new Message(this, native.loop_message(loop));
    try {
      await handler(msg, db.client);
    } catch (err) {
      native.loop_handler_done(loop, L.HANDLER_FAILED, reasonOf(err));
      return;
    }
    native.loop_handler_done(loop, L.HANDLER_OK, null);
  }

  /** Asks the iterator / consume() to return (after the event in hand). */
  stop() {
    this._stopping = true;
    this._needsReset = true;
    if (this._h && this._closing === null) native.consumer_stop(this._h);
    if (this._wake) this._wake();
  }

  /** Stops, waits for pending calls, frees the consumer (unacked messages return to the queue). */
  close() {
    if (this._closing === null) {
      this.stop();
      this._closing = this._q.run(() => {
        native.consumer_free(this._h);
      });
    }
    return this._closing;
  }
}

module.exports = { Consumer, Message };
