'use strict';
// Relay and consumer round trips: effects happen exactly once on at-least-once delivery.
const test = require('node:test');
const assert = require('node:assert/strict');
const net = require('node:net');
const { env, event, pgClient, AMQP_URL, PG_URL, outbox } = require('./helpers');

async function until(what, fn, ms = 20000) {
  const deadline = Date.now() + ms;
  for (;;) {
    const v = await fn();
    if (v) return v;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

test('consume(): dedupe in the handler\'s pg transaction, redelivery after failure, dead letter at the limit, duplicates skipped', async (t) => {
  const e = await env(t, { 'consumer.on_failure': 'requeue', 'consumer.delivery_limit': 3 }); // the broker's way
  const name = e.consumerName('indexer');
  await e.admin.query(`CREATE TABLE "${e.schema}".indexed (id text PRIMARY KEY, n int NOT NULL)`);
  const logs = [];
  const consumer = e.outbox.consumer(name, { logger: (level, msg) => logs.push(`${level} ${msg}`) });
  t.after(() => consumer.close());
  await consumer.connect(); // the queue exists before anything is published
  const relay = e.outbox.relay();
  t.after(() => relay.close());

  const writer = await pgClient();
  t.after(() => writer.end());
  await writer.query('BEGIN');
  for (let i = 0; i < 10; i++) await e.outbox.write(writer, event({ aggregateId: `p${i}`, payload: { i } }));
  await e.outbox.write(writer, event({ aggregateId: 'poison', payload: { poison: true } }));
  await writer.query('COMMIT');
  assert.equal((await e.drain(relay)).published, 11);

  const client = await pgClient();
  t.after(() => client.end());
  let flaky = 0;
  const seen = [];
  const done = consumer.consume(async (m, tx) => {
    seen.push(m.aggregateId);
    assert.equal(tx, client);
    if (m.payload.poison) throw new Error('poison pill');
    if (m.aggregateId === 'p3' && flaky++ === 0) throw new Error('flaky once');
    await tx.query(`INSERT INTO "${e.schema}".indexed VALUES ($1, 1) ON CONFLICT (id) DO UPDATE SET n = indexed.n + 1`,
      [m.aggregateId]);
  }, { client });

  const ch = await e.amqp.createChannel();
  await until('10 effects and 1 dead letter', async () =>
    (await e.count(`SELECT count(*) FROM "${e.schema}".indexed`)) === 10 &&
    (await ch.checkQueue(`${name}.dead`)).messageCount === 1);

  // A relay publishes the same 10 events again (a redelivery as after lost receipts): the
  // relay's progress is forgotten but for the poison event, and a relay that starts afresh
  // publishes the rest once more.
  relay.close();
  await e.admin.query(`DELETE FROM "${e.schema}".outbox_receipts`);
  await e.admin.query(`UPDATE "${e.schema}".outbox_relay SET cursor = 0`);
  await e.admin.query(`INSERT INTO "${e.schema}".outbox_receipts (from_position, to_position)
    SELECT position, position FROM "${e.schema}".outbox_events WHERE aggregate_id = 'poison'`);
  const again = e.outbox.relay();
  t.after(() => again.close());
  assert.equal((await e.drain(again)).published, 10);
  await until('10 duplicates skipped', () => logs.filter((l) => l.includes('already processed')).length === 10);
  consumer.stop();
  await done;

  const rows = await e.admin.query(`SELECT id, n FROM "${e.schema}".indexed ORDER BY id`);
  assert.deepEqual(rows.rows.map((r) => r.n), Array(10).fill(1), 'every effect exactly once');
  assert.equal(await e.count(`SELECT count(*) FROM "${e.schema}".outbox_inbox WHERE consumer = $1`, [name]), 10);
  assert.equal(seen.filter((x) => x === 'poison').length, 3, 'the poison event was tried delivery_limit times');
  assert.equal(seen.filter((x) => x === 'p3').length, 2, 'the flaky one was redelivered once');
  const dead = await ch.get(`${name}.dead`, { noAck: true });
  assert.ok(dead, 'a dead letter');
  assert.equal(JSON.parse(dead.content.toString()).AGGREGATE_ID, 'poison');
  assert.match(String(dead.properties.headers['x-outbox-dead-reason']), /handler failed 3 time\(s\): Error: poison pill/);
  assert.ok(logs.some((l) => l.startsWith('info') && l.includes(`consumer ${name} connected`)), 'native logs arrive');
  await ch.close();
});

for (const mode of ['own client', 'lent client']) {
  test(`consume() with ${mode}: a database lost under the handler is no attempt; a real failure is attempt 1; dead letter at the limit`, async (t) => {
    // consumer.delivery_limit=2: the database goes away under the handler on the first delivery
    // (not counted), the handler fails for real on the second (attempt 1, requeued), the third is
    // processed once. An event that always fails is dead-lettered at attempt 2. The counting, the
    // decision and the reason text are the C library's (outbox_consumer_settle).
    const e = await env(t, { 'consumer.on_failure': 'requeue', 'consumer.delivery_limit': 2 });
    const name = e.consumerName('dblost');
    await e.admin.query(`CREATE TABLE "${e.schema}".indexed (id text PRIMARY KEY)`);
    const logs = [];
    const consumer = e.outbox.consumer(name, { logger: (level, msg) => logs.push(`${level} ${msg}`) });
    t.after(() => consumer.close());
    await consumer.connect();
    const relay = e.outbox.relay();
    t.after(() => relay.close());
    const writer = await pgClient();
    t.after(() => writer.end());
    await writer.query('BEGIN');
    await e.outbox.write(writer, event({ aggregateId: 'healthy', payload: { ok: true } }));
    await e.outbox.write(writer, event({ aggregateId: 'poison', payload: { poison: true } }));
    await writer.query('COMMIT');
    assert.equal((await e.drain(relay)).published, 2);

    const calls = { healthy: 0, poison: 0 };
    const handler = async (m, tx) => {
      const n = ++calls[m.aggregateId];
      if (m.aggregateId === 'poison') throw new Error('boom');
      if (n === 1) {
        const pid = (await tx.query('SELECT pg_backend_pid() AS pid')).rows[0].pid;
        await e.admin.query('SELECT pg_terminate_backend($1::int)', [pid]);
        await tx.query('SELECT 1'); // the handler sees its connection fail
      }
      if (n === 2) throw new Error('transient');
      await tx.query(`INSERT INTO "${e.schema}".indexed VALUES ($1)`, [m.aggregateId]);
    };
    const ch = await e.amqp.createChannel();
    t.after(() => ch.close().catch(() => {})); // (the environment may have closed its connection first)
    const finished = async () => (await e.count(`SELECT count(*) FROM "${e.schema}".indexed`)) === 1 &&
      (await ch.checkQueue(`${name}.dead`)).messageCount === 1;
    if (mode === 'lent client') {
      // A lent client that broke cannot be reopened by the loop: consume() rejects with CONNECTION,
      // the message is redelivered (uncounted) to the next consume() on a new client.
      const first = await pgClient();
      first.on('error', () => {});
      await assert.rejects(consumer.consume(handler, { client: first }),
        (err) => err.code === 'CONNECTION' && /PostgreSQL connection lost in the handler/.test(err.message));
      await first.end().catch(() => {});
      const second = await pgClient();
      t.after(() => second.end());
      const done = consumer.consume(handler, { client: second });
      await until('the healthy effect and the dead letter', finished);
      consumer.stop();
      await done;
    } else {
      const done = consumer.consume(handler);
      await until('the healthy effect and the dead letter', finished);
      consumer.stop();
      await done;
    }
    assert.deepEqual(calls, { healthy: 3, poison: 2 }, 'lost database, one real failure, then processed; poison tried twice');
    const rows = await e.admin.query(`SELECT id FROM "${e.schema}".indexed`);
    assert.deepEqual(rows.rows.map((r) => r.id), ['healthy']);
    const dead = await ch.get(`${name}.dead`, { noAck: true });
    assert.ok(dead, 'a dead letter');
    assert.equal(JSON.parse(dead.content.toString()).AGGREGATE_ID, 'poison');
    assert.equal(String(dead.properties.headers['x-outbox-dead-reason']), 'handler failed 2 time(s): Error: boom');
    assert.ok(logs.some((l) => l.includes('not processed, redelivering without counting an attempt: ' +
      'PostgreSQL connection lost in the handler')), 'the library logs the uncounted redelivery');
  });
}

test('consume(): a COMMIT the server refuses counts as the handler\'s failure, dead-lettered at the limit', async (t) => {
  // A deferred unique constraint refuses the COMMIT: the effect's failure, counted as the handler's
  // (as in C and Python), so the event is dead-lettered at consumer.delivery_limit with the server's
  // reason instead of being retried forever; the healthy event is processed once.
  const e = await env(t, { 'consumer.on_failure': 'requeue', 'consumer.delivery_limit': 2 });
  const name = e.consumerName('commitfail');
  await e.admin.query(`CREATE TABLE "${e.schema}".indexed (id text PRIMARY KEY)`);
  await e.admin.query(`CREATE TABLE "${e.schema}".deferred_keys (k int UNIQUE DEFERRABLE INITIALLY DEFERRED)`);
  const consumer = e.outbox.consumer(name);
  t.after(() => consumer.close());
  await consumer.connect();
  const relay = e.outbox.relay();
  t.after(() => relay.close());
  const writer = await pgClient();
  t.after(() => writer.end());
  await writer.query('BEGIN');
  await e.outbox.write(writer, event({ aggregateId: 'refused' }));
  await e.outbox.write(writer, event({ aggregateId: 'healthy' }));
  await writer.query('COMMIT');
  assert.equal((await e.drain(relay)).published, 2);
  const calls = { refused: 0, healthy: 0 };
  const handler = async (m, tx) => {
    calls[m.aggregateId]++;
    if (m.aggregateId === 'refused') await tx.query(`INSERT INTO "${e.schema}".deferred_keys VALUES (1), (1)`);
    await tx.query(`INSERT INTO "${e.schema}".indexed VALUES ($1)`, [m.aggregateId]);
  };
  const ch = await e.amqp.createChannel();
  t.after(() => ch.close().catch(() => {}));
  const done = consumer.consume(handler);
  await until('the healthy effect and the dead letter', async () =>
    (await e.count(`SELECT count(*) FROM "${e.schema}".indexed`)) === 1 &&
    (await ch.checkQueue(`${name}.dead`)).messageCount === 1);
  consumer.stop();
  await done;
  assert.deepEqual(calls, { refused: 2, healthy: 1 });
  const dead = await ch.get(`${name}.dead`, { noAck: true });
  assert.equal(JSON.parse(dead.content.toString()).AGGREGATE_ID, 'refused');
  const reason = String(dead.properties.headers['x-outbox-dead-reason']);
  assert.ok(reason.startsWith('handler failed 2 time(s): COMMIT failed: ') && reason.includes('duplicate key'), reason);
});

test('async iterator: fields, nack/redelivery, dedupe on a Database, ack, purge; relay.run() resolves after stop()', async (t) => {
  // LISTEN/NOTIFY wake-ups, with a short polling fallback: a NOTIFY that arrives while a step is
  // running is not seen by the core's idle wait (see the report), so polling picks that event up.
  const e = await env(t, { 'inbox.retention_s': 0, 'relay.listen': true, 'write.notify': true, 'relay.poll_interval_ms': 200 });
  const name = e.consumerName('iter');
  const consumer = new outbox.Consumer(name, e.options);
  t.after(() => consumer.close());
  await consumer.connect();
  const relay = new outbox.Relay(e.options);
  t.after(() => relay.close());
  const running = relay.run();
  assert.equal(relay.running, true);

  const writer = await pgClient();
  t.after(() => writer.end());
  const written = [];
  for (let i = 1; i <= 3; i++) {
    await writer.query('BEGIN');
    written.push(await e.outbox.write(writer, event({ operation: i === 1 ? 'POST' : 'PATCH', payload: { XPRD02: i } })));
    await writer.query('COMMIT');
  }

  const db = await e.outbox.connect(PG_URL);
  t.after(() => db.close());
  const got = [];
  for await (const m of consumer) {
    const r = await db.transaction(() => m.dedupe(db));
    assert.equal(r.firstTime, true);
    await m.ack();
    await assert.rejects(m.ack(), { code: 'INVALID_ARGUMENT', message: /already settled/ });
    got.push(m);
    if (got.length === 3) break;
  }
  const first = got[0];
  assert.equal(first.id, written[0].eventId);
  assert.equal(first.eventType, 'ProductCreated');
  assert.equal(first.aggregateType, 'PRD');
  assert.equal(first.aggregateId, '123');
  assert.equal(first.routingKey, 'prd.post');
  assert.equal(first.property('message_id'), first.id);
  assert.equal(first.property('outbox-seq'), '1');
  assert.equal(first.redelivered, false);
  assert.equal(first.deliveryCount, 0);
  assert.deepEqual(first.payload, { XPRD02: 1 });
  assert.equal(first.envelope.EVENT_TYPE, 'ProductCreated');
  assert.deepEqual(got.map((m) => m.id), written.map((w) => w.eventId), 'per-aggregate order');
  assert.deepEqual(got.map((m) => m.seq), [1, 2, 3]);
  assert.deepEqual(got.map((m) => m.order), ['IN_ORDER', 'IN_ORDER', 'IN_ORDER']);

  // nack with requeue: the same message comes again, marked redelivered, its delivery counted.
  const fourth = await e.outbox.write(writer, event({ aggregateId: '4' }));
  const m1 = await consumer.next(10000);
  assert.equal(m1.id, fourth.eventId);
  await m1.nack(true);
  const m2 = await consumer.next(10000);
  assert.equal(m2.id, fourth.eventId);
  assert.equal(m2.redelivered, true);
  assert.equal(m2.deliveryCount, 1);
  await m2.ack();
  consumer.stop();

  const t0 = Date.now();
  relay.stop();
  await running;
  assert.ok(Date.now() - t0 < 5000, 'run() resolved promptly after stop()');
  assert.equal(relay.running, false);

  // The inbox is partitioned by the time in the event ids: a purge drops whole partitions, so the
  // rows of the current one stay, whatever the age (the rows of ids that are not v7 would go).
  assert.equal(await db.purgeInbox(0), 0, 'the current partition is not past the cutoff yet');
  assert.equal(await e.count(`SELECT count(*) FROM "${e.schema}".outbox_inbox`), 3);
});

test('dedupe with node-postgres: first time, duplicate, stale and gap', async (t) => {
  const e = await env(t);
  const client = await pgClient();
  t.after(() => client.end());
  const key = (id, seq) => ({ consumer: 'search-indexer', eventId: id, aggregateType: 'PRD', aggregateId: '1', seq });
  const ids = ['01936f3c-8a2e-7c4d-9f1e-2b3c4d5e6f71', '01936f3c-8a2e-7c4d-9f1e-2b3c4d5e6f72',
    '01936f3c-8a2e-7c4d-9f1e-2b3c4d5e6f73'];
  await client.query('BEGIN');
  assert.deepEqual(await e.outbox.dedupe(client, key(ids[0], 1)), { firstTime: true, order: 'IN_ORDER', previousSeq: 0 });
  await client.query('COMMIT');
  assert.equal((await outbox.dedupe(client, key(ids[0], 1), e.options)).firstTime, false);
  assert.deepEqual(await e.outbox.dedupe(client, key(ids[2], 3)), { firstTime: true, order: 'GAP', previousSeq: 1 });
  assert.deepEqual(await e.outbox.dedupe(client, key(ids[1], 2)), { firstTime: true, order: 'STALE', previousSeq: 3 });
  const db = await e.outbox.connect(PG_URL);
  t.after(() => db.close());
  assert.equal((await db.dedupe(key(ids[1], 2))).firstTime, false, 'the Database path sees the same inbox');
  await assert.rejects(e.outbox.dedupe(client, key('not-a-uuid', 1)), { code: 'INVALID_ARGUMENT' });
  // The verdict is the library's (outbox_dedupe_interpret): inbox.order_check=false is honoured here too.
  const unchecked = new outbox.Outbox({ ...e.options, 'inbox.order_check': false });
  const late = '01936f3c-8a2e-7c4d-9f1e-2b3c4d5e6f74';
  assert.deepEqual(await unchecked.dedupe(client, { ...key(late, 9), aggregateId: '2' }),
    { firstTime: true, order: 'UNCHECKED', previousSeq: 0 });
  // An aborted transaction is refused before anything runs; the driver's errors are the library's.
  await client.query('BEGIN');
  await assert.rejects(client.query('SELECT 1/0'));
  await assert.rejects(e.outbox.dedupe(client, key(late, 10)), { code: 'TRANSACTION', message: /roll it back/ });
  await client.query('ROLLBACK');
  const missing = new outbox.Outbox({ 'outbox.schema': `${e.schema}_missing` });
  await assert.rejects(missing.dedupe(client, key(late, 10)),
    (err) => err.code === 'SCHEMA' && err.message.startsWith('outbox dedupe: ') && err.cause.code === '42P01');
});

test('relay: every step records its outcomes before it returns', async (t) => {
  const e = await env(t, { 'relay.batch_size': '10' });
  await e.collector(); // a bound queue: every event routable
  const relay = e.outbox.relay();
  t.after(() => relay.close());
  const client = await pgClient();
  t.after(() => client.end());
  await client.query('BEGIN');
  for (let i = 0; i < 200; i++) await e.outbox.write(client, event({ aggregateId: `settle${i}` }));
  await client.query('COMMIT');
  let published = 0;
  for (let i = 0; i < 3; i++) {
    const s = await relay.step();
    assert.equal(s.claimed, 10);
    assert.equal(s.published, s.claimed);
    published += s.published;
  }
  assert.equal(await e.count(`SELECT count(*) FROM "${e.schema}".outbox WHERE status = 'PUBLISHED'`), published);
});

test('a broker list in amqp.url: past a dead first node to a live one, saying which node', async (t) => {
  // A port that was just free: nothing listens there, so connecting is refused (a node that is down).
  const server = net.createServer().listen(0, '127.0.0.1');
  await new Promise((r) => server.once('listening', r));
  const dead = server.address().port;
  await new Promise((r) => server.close(r));
  const e = await env(t, { 'amqp.url': `amqp://outbox:outbox@127.0.0.1:${dead}/%2f,${AMQP_URL}` });
  const live = new URL(AMQP_URL.replace(/^amqp/, 'http'));
  const logs = [];
  const name = e.consumerName('list');
  const consumer = e.outbox.consumer(name, { logger: (level, msg) => logs.push(`consumer ${msg}`) });
  t.after(() => consumer.close());
  await consumer.connect();
  const relay = e.outbox.relay({ logger: (level, msg) => logs.push(`relay ${msg}`) });
  t.after(() => relay.close());
  const client = await pgClient();
  t.after(() => client.end());
  await client.query('BEGIN');
  for (let i = 0; i < 3; i++) await e.outbox.write(client, event({ aggregateId: `list${i}` }));
  await client.query('COMMIT');
  assert.equal((await e.drain(relay)).published, 3);
  const seen = [];
  const done = consumer.consume(async (m) => { seen.push(m.aggregateId); }, { client });
  await until('3 events consumed', () => seen.length === 3);
  consumer.stop();
  await done;
  assert.deepEqual(seen.sort(), ['list0', 'list1', 'list2']);
  const node = `connected to RabbitMQ node ${live.hostname}:${live.port}`;
  assert.ok(logs.some((l) => l.startsWith('relay') && l.includes(node)), logs.join('\n'));
  assert.ok(logs.some((l) => l.startsWith('consumer') && l.includes(node)), logs.join('\n'));
});

// The library's loop reopens a closed broker connection (the next address of amqp.url first) and
// goes on, whatever database connection consume() was given: only this consumer's connections are
// closed (tests run side by side), as a node restart or an operator would.
for (const mode of ['client', 'pool', 'own']) {
  test(`consume() with ${mode}: goes on consuming after its broker connections are closed`, async (t) => {
    const { execFileSync } = require('node:child_process');
    const path = require('node:path');
    const e = await env(t);
    const name = e.consumerName('reconnect');
    await e.admin.query(`CREATE TABLE "${e.schema}".effects (id text PRIMARY KEY)`);
    const consumer = e.outbox.consumer(name);
    t.after(() => consumer.close());
    await consumer.connect();
    const relay = e.outbox.relay();
    t.after(() => relay.close());
    const writer = await pgClient();
    t.after(() => writer.end());
    const publish = async (from) => {
      for (let i = from; i < from + 2; i++) await e.outbox.write(writer, event({ aggregateId: `r${i}`, payload: { i } }));
      assert.equal((await e.drain(relay)).published, 2);
    };
    await publish(0);
    const seen = [];
    const handler = async (m, tx) => {
      await tx.query(`INSERT INTO "${e.schema}".effects VALUES ($1)`, [m.id]);
      seen.push(m.id);
      if (seen.length === 2) {
        const script = path.join(__dirname, '..', '..', 'tests', 'support', 'close_amqp_connections.sh');
        execFileSync(script, [`outbox-consumer ${name}`], { timeout: 120000 });
        await publish(2);
      }
      if (seen.length === 4) consumer.stop();
    };
    let options = {};
    if (mode === 'client') {
      options = { client: await pgClient() };
      t.after(() => options.client.end());
    } else if (mode === 'pool') {
      const pg = require('pg');
      options = { pool: new pg.Pool({ connectionString: PG_URL, max: 2 }) };
      t.after(() => options.pool.end());
    }
    await consumer.consume(handler, options);
    assert.equal(new Set(seen).size, 4);
    assert.equal(await e.count(`SELECT count(*) FROM "${e.schema}".effects`), 4);
  });
}
