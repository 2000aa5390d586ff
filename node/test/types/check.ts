// Compiled (never run) by test/types.test.js with tsc --strict, as a CommonJS TypeScript module
// of a project that installed the tarball: index.d.ts must describe the package as it is used,
// with the real node-postgres types (pg.Client and PoolClient accepted as they are, no casts).
import * as outbox from 'outbox';
import { Outbox, OutboxError, Relay, Consumer, Message, Database, type OutboxEvent, type WriteResult } from 'outbox';
import { Client, Pool, type PoolClient } from 'pg';

async function main(): Promise<void> {
  const options = { 'outbox.schema': 'app', 'event.type_map': 'PRD=Product', 'relay.batch_size': 500, 'relay.listen': true };
  const ev: OutboxEvent = {
    aggregateType: 'PRD',
    aggregateId: 123,
    operation: 'POST',
    payload: { PRD_ID: '123' },
    previousPayload: '{"a":1}',
    metadata: Buffer.from('{}'),
    idempotencyKey: 'k',
    forceDelete: false,
  };

  const client = new Client({ connectionString: 'postgresql://localhost/x' });
  await client.query('BEGIN');
  const w: WriteResult = await outbox.write(client, ev, options);
  const id: string = w.eventId;
  const seq: number = w.seq;
  await client.query('COMMIT');
  const rendered = outbox.renderWrite(ev);
  await client.query(rendered.text, rendered.values);

  const pool = new Pool();
  const pooled = await pool.connect();
  const ob = new Outbox(options);
  await ob.write(pooled, ev);
  const d = await ob.dedupe(pooled, { consumer: 'c', eventId: id, aggregateType: 'PRD', aggregateId: '1', seq });
  const first: boolean = d.firstTime;
  const order: 'UNCHECKED' | 'IN_ORDER' | 'STALE' | 'GAP' = d.order;
  pooled.release();

  const db: Database = await ob.connect('postgresql://localhost/x');
  await db.transaction(async (tx) => tx.write(ev));
  const state: string = await db.txState();
  const version: number = await db.migrate('inbox');
  const purged: number = await db.purgeInbox(8 * 86400);
  const held: outbox.ParkedAggregate[] = await db.parked('billing', { includeRelay: false, limit: 10 });
  const waiting: number = held.length ? held[0].waiting + held[0].attempts : 0;
  const redriven: number = (await db.redrive('billing', 'ORD', 42)) + (await db.redriveAll('billing'));
  const skipped: string = await db.skip('billing', 'ORD', '42', { by: 'ops', reason: 'bad data', eventId: null });
  await db.close();
  await outbox.migrate('postgresql://localhost/x', options, 'all');

  const relay: Relay = ob.relay({ logger: (level, message) => console.log(level.toUpperCase(), message) });
  const stats = await relay.step();
  const published: number = stats.published + stats.heldBack;
  const running = relay.run();
  relay.stop();
  await running;
  await relay.close();

  const consumer: Consumer = new Consumer('search-indexer', { 'amqp.url': 'amqp://localhost', 'pg.url': 'postgresql://x' });
  await consumer.connect();
  for await (const m of consumer) {
    const e = m.envelope;
    const t: string = e.EVENT_TYPE + m.eventType + m.aggregateId;
    const body: Buffer = m.body;
    await m.dedupe(db);
    await m.ack();
    break;
  }
  const next: Message | null = await consumer.next(100);
  if (next) await next.deadLetter('reason');
  await consumer.consume(async (m: Message, tx) => {
    await tx.query({ text: 'SELECT $1::text', values: [m.payload.PRD_ID] });
  }, { client });
  await consumer.consume(() => undefined, { pool });
  // The handler's client has options.client's type (here pg's Client, with its generic query).
  await consumer.consume(async (m, tx) => {
    await tx.query('INSERT INTO app.search_index (id, doc) VALUES ($1, $2)', [m.aggregateId, m.payloadText]);
    const r = await tx.query<{ n: number }>('SELECT 1 AS n');
    const n: number = r.rows[0].n;
    tx.on('notice', (msg) => console.log(msg.message)); // pg.Client's own API
    console.log(n);
  }, { client });
  await consumer.consume(async (m, tx) => {
    await tx.query({ text: 'INSERT INTO app.search_index (id, doc) VALUES ($1, $2)', values: [m.aggregateId, m.payloadText] });
  }, { pool });
  await consumer.consume(async (m, tx) => {
    const r = await tx.query('SELECT $1::text AS id', [m.id]);
    console.log(r.rows.length, r.rowCount);
  });
  const pc: PoolClient = await pool.connect();
  await outbox.dedupe(pc, { consumer: 'c', eventId: id });
  pc.release();
  consumer.stop();
  await consumer.close();

  try {
    await outbox.connect('postgresql://nowhere');
  } catch (err) {
    if (err instanceof OutboxError) {
      const code: outbox.ErrorCode = err.code;
      const status: number = err.status;
      console.log(code, status, outbox.status[code]);
    }
  }
  console.log(first, order, state, version, purged, published, outbox.version, outbox.configKeys()[0].help);
}

void main;
