'use strict';
// Shared by the node:test suites: the real services (OUTBOX_PG_URL / OUTBOX_AMQP_URL), a fresh
// schema per test, unique exchange and queue names, and cleanup. A service that cannot be reached
// makes the test fail (connect() rejects), never skip.
const crypto = require('crypto');
const pg = require('pg');
const amqp = require('amqplib');
const { outbox } = require('./outbox');

const PG_URL = process.env.OUTBOX_PG_URL || 'postgresql://outbox:outbox@127.0.0.1:54329/outbox';
const AMQP_URL = process.env.OUTBOX_AMQP_URL || 'amqp://outbox:outbox@127.0.0.1:56729/%2f';

function unique(prefix) {
  return `${prefix}_${process.pid}_${crypto.randomBytes(4).toString('hex')}`;
}

async function pgClient() {
  const c = new pg.Client({ connectionString: PG_URL });
  c.on('error', () => {}); // terminated backends in the broken-connection tests
  await c.connect();
  return c;
}

/**
 * A test environment: fresh schema (migrated), unique exchange, options for the library, an
 * admin pg client, and cleanup of everything (schema, queues, exchanges) at the end.
 */
async function env(t, extra = {}) {
  const schema = unique('njs');
  const exchange = `${schema}.fanout`;
  const admin = await pgClient();
  const options = {
    'outbox.schema': schema,
    'event.type_map': 'PRD=Product,ORD=Order',
    'pg.url': PG_URL,
    'amqp.url': AMQP_URL,
    'amqp.exchange': exchange,
    'relay.listen': false,
    'relay.confirm_timeout_ms': 5000,
    ...extra,
  };
  const ob = new outbox.Outbox(options);
  await ob.migrate(PG_URL);
  const conn = await amqp.connect(AMQP_URL);
  conn.on('error', () => {});
  const queues = new Set();
  const exchanges = new Set([exchange]);
  const closers = [];
  const e = {
    schema,
    exchange,
    options,
    outbox: ob,
    admin,
    amqp: conn,
    /** registers a consumer's queue (and its dead-letter pieces) for deletion */
    consumerName(prefix = 'c') {
      const name = unique(`${schema}_${prefix}`);
      queues.add(name);
      queues.add(`${name}.dead`);
      exchanges.add(`${name}.dlx`);
      return name;
    },
    /** a queue or exchange of this test by its full name (a partitioned subscriber's), deleted at the end */
    addQueue(q) {
      queues.add(q);
    },
    addExchange(x) {
      exchanges.add(x);
    },
    /** another exchange of this test, deleted at the end */
    exchangeName(suffix) {
      const x = `${exchange}.${suffix}`;
      exchanges.add(x);
      return x;
    },
    onCleanup(fn) {
      closers.push(fn);
    },
    /** An exclusive queue bound to the exchange, collecting every message (amqplib). */
    async collector() {
      const ch = await conn.createChannel();
      await ch.assertExchange(exchange, 'fanout', { durable: true });
      const q = await ch.assertQueue('', { exclusive: true, autoDelete: true });
      await ch.bindQueue(q.queue, exchange, '');
      const messages = [];
      const waiters = [];
      await ch.consume(q.queue, (m) => {
        messages.push(m);
        for (const w of waiters.splice(0)) w();
      }, { noAck: true });
      return {
        messages,
        async waitFor(n, ms = 10000) {
          const deadline = Date.now() + ms;
          while (messages.length < n) {
            const left = deadline - Date.now();
            if (left <= 0) throw new Error(`expected ${n} messages, got ${messages.length}`);
            await new Promise((resolve) => {
              const timer = setTimeout(resolve, Math.min(left, 200));
              waiters.push(() => {
                clearTimeout(timer);
                resolve();
              });
            });
          }
          return messages;
        },
      };
    },
    /** Relay steps until nothing is left to claim (at most `max`). */
    async drain(relay, max = 20) {
      const total = { published: 0, claimed: 0 };
      for (let i = 0; i < max; i++) {
        const s = await relay.step();
        total.published += s.published;
        total.claimed += s.claimed;
        if (s.claimed === 0) break;
      }
      return total;
    },
    async count(sql, params = []) {
      const r = await admin.query(sql, params);
      return Number(r.rows[0].count);
    },
  };
  t.after(async () => {
    for (const fn of closers.reverse()) {
      await Promise.resolve().then(fn).catch(() => {});
    }
    try {
      const ch = await conn.createChannel();
      ch.on('error', () => {});
      for (const q of queues) await ch.deleteQueue(q).catch(() => {});
      for (const x of exchanges) await ch.deleteExchange(x).catch(() => {});
      await ch.close().catch(() => {});
    } finally {
      await conn.close().catch(() => {});
      await admin.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`).catch(() => {});
      await admin.end().catch(() => {});
    }
  });
  return e;
}

function event(overrides = {}) {
  return {
    aggregateType: 'PRD',
    aggregateId: '123',
    operation: 'POST',
    payload: { PRD_ID: '123', XPRD01: 'Widget Pro', XPRD02: 99.99 },
    metadata: { source: 'productManagement' },
    user: 'user@example.com',
    ...overrides,
  };
}

/** Rejects with an error whose code is `code` (and message contains `part`). */
async function rejectsWithCode(promiseOrFn, code, part) {
  let err;
  try {
    await (typeof promiseOrFn === 'function' ? promiseOrFn() : promiseOrFn);
  } catch (e) {
    err = e;
  }
  if (!err) throw new Error(`expected an error with code ${code}, got none`);
  if (err.code !== code) {
    throw new Error(`expected code ${code}, got ${err.code}: ${err.message}`);
  }
  if (part && !err.message.includes(part)) {
    throw new Error(`expected the message to contain '${part}': ${err.message}`);
  }
  return err;
}

// A 10 ms timer that records how often it ran and its latest tick's lateness: whether the event loop
// kept running while a call waited. stop() ends it and returns { ticks, maxLate }.
function tickMonitor() {
  const { performance } = require('node:perf_hooks');
  let last = performance.now();
  const seen = { ticks: 0, maxLate: 0 };
  const timer = setInterval(() => {
    const now = performance.now();
    seen.maxLate = Math.max(seen.maxLate, now - last - 10);
    last = now;
    seen.ticks++;
  }, 10);
  return { stop: () => (clearInterval(timer), seen) };
}

module.exports = { PG_URL, AMQP_URL, unique, pgClient, env, event, rejectsWithCode, outbox, tickMonitor };
