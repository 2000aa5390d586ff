'use strict';
// Consumer: a durable queue of one's own on the exchange (outbox_consumer_*), as
//   - an async iterator of Messages (ack/nack/deadLetter them yourself), or
//   - consume(handler): the library's consumer loop (outbox_loop_*) on a node-postgres client: for
//     each event BEGIN, the inbox row, handler(message, client) the first time only, COMMIT, ack;
//     a failing handler rolls back and the message is redelivered, until consumer.delivery_limit
//     attempts, then dead-lettered with the error text.
const native = require('./native');
const { Handle } = require('./handle');
const { Database } = require('./database');
const { makeConfig, loggerOf } = require('./config');
const { dedupeOn } = require('./pg');
const { outboxError, typeError } = require('./errors');

const SLICE_MS = 500; // longest native wait, so stop() and other calls on the handle are prompt
const L = native.loop; // the loop's actions and statements, from outbox.h
const reasonOf = (err) => (err && err.message ? err.message : String(err));

class Message {
  /** @private made by Consumer: the event's fields, seq, delivery and body (outbox_message_*) */
  constructor(consumer, handle) {
    Object.assign(this, native.message_info(handle));
    this._consumer = consumer;
    this._h = handle;
    this._settled = false;
  }

  get payload() {
    return this.payloadText === null ? null : JSON.parse(this.payloadText);
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

  /** Acknowledge (after your transaction committed). */
  ack() {
    return this._consumer._settle(this, native.consumer_ack);
  }

  /** Negative acknowledgement; requeue (default) redelivers it. */
  nack(requeue = true) {
    return this._consumer._settle(this, (c, m) => native.consumer_nack(c, m, !!requeue));
  }

  /** To the dead-letter queue with `reason` in header x-outbox-dead-reason, then acked. */
  deadLetter(reason) {
    return this._consumer._settle(this, (c, m) => native.consumer_dead_letter(c, m, reason));
  }

  /** Records this event in the consumer's inbox in the current transaction of `target`: a node-postgres client or a Database. */
  async dedupe(target) {
    const r = await this._consumer.dedupe(target, this);
    [this.order, this.previousSeq] = [r.order, r.previousSeq];
    return r;
  }
}

// The loop's database connection on node-postgres: a lent client, a client per event from a pool,
// or a client of its own on 'pg.url'. It runs the statement the loop hands out and reports how it
// went; what that means (a lost connection, the handler's failure) is the library's to judge.
class LoopClient {
  constructor(consumer, lent, pool) {
    Object.assign(this, { consumer, lent, pool, client: lent || null });
  }

  async exec(loop) {
    const query = native.loop_statement(loop); // and its kind
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

  // The loop asks for a connection (at the start, and after one was lost).
  async open(loop) {
    if (this.pool) {
      this.release(new Error('connection lost'));
      return native.loop_opened(loop, true, '');
    }
    await this.close();
    const { name, _options: options, _log: log } = this.consumer;
    const c = new (require('pg').Client)({ connectionString: options['pg.url'] });
    c.on('error', (e) => log && log('warn', `consumer ${name}: PostgreSQL: ${e.message}`));
    try {
      await c.connect();
    } catch (e) {
      return native.loop_opened(loop, false, reasonOf(e));
    }
    this.client = c;
    return native.loop_opened(loop, true, '');
  }

  async close() {
    const c = this.lent ? null : this.client;
    if (!c) return;
    this.client = null;
    if (this.pool) c.release();
    else await c.end().catch(() => {});
  }
}

class Consumer extends Handle {
  /**
   * @param {string} name the consumer's name (its queue unless consumer.queue is set)
   * @param {Record<string, string|number|boolean|Function>} options configuration keys (needs
   *   'amqp.url'; 'pg.url' for consume() without a client), and `logger: (level, message) => void`.
   */
  constructor(name, options) {
    if (typeof name !== 'string') throw typeError('consumer name must be a string');
    const opts = { ...(options || {}) };
    const cfg = makeConfig(opts); // kept: it renders the dedupe statement
    const log = loggerOf(opts);
    super(native.consumer_new(cfg, name), native.consumer_free, ['INVALID_ARGUMENT', 'the consumer is closed']);
    Object.assign(this, { name, queue: native.config_get(cfg, 'consumer.queue') || name, _options: opts, _cfg: cfg });
    this._log = log;
    if (log) native.consumer_set_logger(this._h, log);
    this._stopping = false;
    this._needsReset = false;
    this._wake = null; // ends a backoff wait early on stop()
  }

  // A new iteration or consume() after a stop(): clear the stop request first.
  _start() {
    this._stopping = false;
    if (this._needsReset) {
      this._needsReset = false;
      this._op(native.consumer_reset).catch(() => {});
    }
  }

  /** Declares the topology and starts consuming (otherwise the first next() does). */
  connect() {
    return this._op(native.consumer_connect);
  }

  /**
   * The next event, waiting at most timeoutMs; null on timeout. Rejects with code STOPPED after
   * stop(). Messages that are not events are dead-lettered by the library and skipped.
   */
  next(timeoutMs = 1000) {
    return this._op((h) => native.consumer_next(h, timeoutMs).then((m) => new Message(this, m), (e) => {
      if (e.code === 'TIMEOUT') return null;
      throw e;
    }));
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
    return this._op((h) => fn(h, msg._h)).catch((e) => {
      msg._settled = false;
      throw e;
    });
  }

  /** Dedupe `msg` on a node-postgres client (rendered statement) or a Database (outbox_consumer_dedupe_message). */
  async dedupe(target, msg) {
    if (!(msg instanceof Message)) throw typeError('expected a Message');
    if (target instanceof Database) {
      return target._op((dbh) => this._op((h) => native.consumer_dedupe_message(dbh, h, msg._h)));
    }
    const { id: eventId, aggregateType, aggregateId, seq } = msg;
    return dedupeOn(this._cfg, target, { consumer: this.name, eventId, aggregateType, aggregateId, seq },
      this._options.preparedStatements !== false);
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
    for (let action; (action = native.loop_next(loop)) !== L.DONE;) {
      if (action === L.BLOCK) await this._op((h) => native.loop_block(loop, h));
      else if (action === L.EXEC) await db.exec(loop);
      else if (action === L.OPEN) await db.open(loop);
      else if (action === L.WAIT) {
        await new Promise((resolve) => {
          const t = setTimeout(resolve, native.loop_wait_ms(loop));
          this._wake = () => resolve(clearTimeout(t));
        });
        this._wake = null;
        native.loop_waited(loop);
      } else {
        try {
          await handler(new Message(this, native.loop_message(loop)), db.client);
        } catch (err) {
          native.loop_handler_done(loop, L.HANDLER_FAILED, reasonOf(err));
          continue;
        }
        native.loop_handler_done(loop, L.HANDLER_OK, null);
      }
    }
    native.loop_result(loop);
  }

  /** Asks the iterator / consume() to return (after the event in hand). */
  stop() {
    this._stopping = true;
    this._needsReset = true;
    if (this._closing === null) native.consumer_stop(this._h);
    if (this._wake) this._wake();
  }
}

module.exports = { Consumer, Message };
