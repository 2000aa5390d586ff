'use strict';
// Shared by the subscribers on the outbox consumer: command line, environment, setup.
//   --count N        exit after N events (default: run until SIGINT/SIGTERM)
//   --name NAME      consumer name, hence queue (default: the subscriber's role)
//   --exchange NAME  exchange (default corewrite.fanout; env OUTBOX_EXCHANGE)
// Environment: OUTBOX_PG_URL, OUTBOX_AMQP_URL, OUTBOX_SCHEMA (default public).
const outbox = require('outbox');
const pg = require('pg');

function arg(name, fallback) {
  const i = process.argv.indexOf(name);
  return i > 0 && i + 1 < process.argv.length ? process.argv[i + 1] : fallback;
}

function settings(role) {
  const pgUrl = process.env.OUTBOX_PG_URL || 'postgresql://outbox:outbox@127.0.0.1:54329/outbox';
  const amqpUrl = process.env.OUTBOX_AMQP_URL || 'amqp://outbox:outbox@127.0.0.1:56729/%2f';
  const schema = process.env.OUTBOX_SCHEMA || 'public';
  const count = Number(arg('--count', '0'));
  if (!Number.isInteger(count) || count < 0) throw new Error('--count must be a whole number');
  return {
    role,
    name: arg('--name', role),
    count,
    pgUrl,
    schema,
    options: {
      'pg.url': pgUrl,
      'amqp.url': amqpUrl,
      'outbox.schema': schema,
      'amqp.exchange': arg('--exchange', process.env.OUTBOX_EXCHANGE || 'corewrite.fanout'),
      logger: (level, message) => {
        if (level !== 'debug') console.error(`[${role}] ${level}: ${message}`);
      },
    },
  };
}

/**
 * Runs a subscriber: inbox tables, its own tables (setupSql), a consumer whose handler gets
 * (message, client) inside the transaction that also records the event in the inbox.
 */
async function run(role, setupSql, handle) {
  const s = settings(role);
  await outbox.migrate(s.pgUrl, { 'outbox.schema': s.schema }, 'inbox');
  const setup = new pg.Client({ connectionString: s.pgUrl });
  await setup.connect();
  await setup.query(setupSql(`"${s.schema}"`));
  await setup.end();

  const consumer = new outbox.Consumer(s.name, s.options);
  await consumer.connect();
  for (const sig of ['SIGINT', 'SIGTERM']) process.once(sig, () => consumer.stop());
  console.log(`[${role}] waiting for events on its queue '${consumer.queue}'`);
  let remaining = s.count;
  await consumer.consume(async (message, client) => {
    await handle(message, client, `"${s.schema}"`);
    if (remaining > 0 && --remaining === 0) consumer.stop(); // after this event commits and is acked
  });
  await consumer.close();
}

function main(role, setupSql, handle) {
  run(role, setupSql, handle).catch((e) => {
    console.error(`[${role}] ${e.code || 'ERROR'}: ${e.message}`);
    process.exit(1);
  });
}

module.exports = { main, arg };
