// Compiled (never run) by test/types.test.js with tsc --strict, as an ES module of a project that
// installed the tarball: the `import` condition of the exports map (index.d.mts), named and default.
import pg from 'pg';
import outbox, { write, connect, migrate, Outbox, OutboxError, PermanentFailure, Relay, Consumer, type OutboxEvent } from 'outbox';

const PG_URL = process.env.OUTBOX_PG_URL ?? 'postgresql://localhost/app';
const options = { 'outbox.schema': 'app', 'event.type_map': 'PRD=Product' };
const ev: OutboxEvent = { aggregateType: 'PRD', aggregateId: 1n, operation: 'PATCH', payload: { PRD_ID: '1' } };

await migrate(PG_URL, options);
const client = new pg.Client({ connectionString: PG_URL });
await client.connect();
await client.query('BEGIN');
await client.query('INSERT INTO app.products (id, name) VALUES ($1, $2)', ['1', 'Widget']);
const w = await write(client, ev, options);
const seq: number = w.seq;
await client.query('COMMIT');

const pool = new pg.Pool({ connectionString: PG_URL });
const pooled = await pool.connect();
await outbox.write(pooled, ev, options);
pooled.release();

const db = await connect(PG_URL, options);
const many = await db.writeMany([ev, ev]);
await db.close();

const ob = new Outbox(options);
const relay: Relay = ob.relay({ 'pg.url': PG_URL, 'amqp.url': 'amqp://localhost' });
await relay.step();
const consumer: Consumer = ob.consumer('x', { 'amqp.url': 'amqp://localhost' });
await consumer.consume(async (m, tx) => {
  await tx.query('SELECT $1::text', [m.payload.PRD_ID]);
}, { client });
try {
  await connect('postgresql://nowhere');
} catch (e) {
  if (e instanceof OutboxError) console.log(e.code, e.status);
  const permanent: Error = new PermanentFailure('never valid');
}
console.log(seq, many.length, outbox.version, outbox.status.DUPLICATE);
