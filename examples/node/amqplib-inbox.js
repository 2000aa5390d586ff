'use strict';
// The outbox inbox for subscribers written with amqplib, as the documents write theirs. The
// documents ask every subscriber to be idempotent ("Subscribers must handle duplicate events");
// this is how: each event is applied in one PostgreSQL transaction together with its inbox row
// (the library's dedupe statement, `outbox.dedupe` on a node-postgres client, as the package's
// own consumer does it), so an event delivered twice is recognised and skipped, never applied twice.
//
//   const inbox = await openInbox('search-indexer', (schema) => `CREATE TABLE IF NOT EXISTS ...`);
//   channel.consume(queue, async (msg) => {
//     const event = JSON.parse(msg.content.toString());
//     await inbox.applyOnce(msg, event, handleEvent);  // BEGIN, inbox row, handleEvent (first time only), COMMIT
//     channel.ack(msg);
//   });
//   inbox.query(text, values)                          // for handleEvent: runs in that transaction
//
// Command line shared by the subscribers:
//   --queue NAME          consumer name, hence its queue and inbox rows (default: the role)
//   --exchange NAME       exchange (default corewrite.fanout, or OUTBOX_EXCHANGE)
//   --crash-after-apply   kill the process (SIGKILL) right after the first event it applies is
//                         committed, before its ack: the broker redelivers that event, and the
//                         next run's inbox skips it
// Environment: OUTBOX_PG_URL, OUTBOX_AMQP_URL, OUTBOX_SCHEMA (default public), OUTBOX_EXCHANGE.
const outbox = require('outbox');
const pg = require('pg');

function option(name, fallback) {
  const i = process.argv.indexOf(name);
  return i > 0 && i + 1 < process.argv.length ? process.argv[i + 1] : fallback;
}

const settings = {
  amqpUrl: process.env.OUTBOX_AMQP_URL || 'amqp://outbox:outbox@127.0.0.1:56729/%2f',
  pgUrl: process.env.OUTBOX_PG_URL || 'postgresql://outbox:outbox@127.0.0.1:54329/outbox',
  schema: process.env.OUTBOX_SCHEMA || 'public',
  exchange: option('--exchange', process.env.OUTBOX_EXCHANGE || 'corewrite.fanout'),
  crashAfterApply: process.argv.includes('--crash-after-apply'),
};

// The relay's per-aggregate sequence number travels in the message header outbox-seq.
function seqOf(msg) {
  const seq = msg.properties.headers && msg.properties.headers['outbox-seq'];
  return seq === undefined || seq === null ? 0 : Number(seq);
}

async function openInbox(role, setupSql) {
  const name = option('--queue', role);
  const options = { 'outbox.schema': settings.schema };
  await outbox.migrate(settings.pgUrl, options, 'inbox'); // the inbox tables, idempotently
  const client = new pg.Client({ connectionString: settings.pgUrl });
  await client.connect();
  await client.query(setupSql(`"${settings.schema}"`)); // the subscriber's own table(s)
  let inProgress = Promise.resolve();

  async function apply(msg, event, handle) {
    const key = { consumer: name, eventId: event.OUTBOX_ID, aggregateType: event.AGGREGATE_TYPE,
      aggregateId: event.AGGREGATE_ID, seq: seqOf(msg) };
    const what = `${event.EVENT_TYPE} ${event.AGGREGATE_TYPE}:${event.AGGREGATE_ID} (event ${event.OUTBOX_ID}, seq ${key.seq}`;
    await client.query('BEGIN');
    let seen;
    try {
      seen = await outbox.dedupe(client, key, options); // the inbox row: firstTime false if already there
      if (seen.firstTime) await handle(event);
      await client.query('COMMIT');
    } catch (error) {
      await client.query('ROLLBACK').catch(() => {}); // neither the inbox row nor the effect
      throw error;
    }
    if (!seen.firstTime) {
      console.log(`[${name}] skipped ${what}): already processed, in the inbox` +
        `${msg.fields.redelivered ? '; redelivered by the broker' : '; published again'}`);
      return seen;
    }
    console.log(`[${name}] applied ${what}, ${seen.order})`);
    if (settings.crashAfterApply) {
      console.log(`[${name}] --crash-after-apply: killed after the COMMIT of event ${event.OUTBOX_ID}, before its ack`);
      process.kill(process.pid, 'SIGKILL');
    }
    return seen;
  }

  return {
    name,
    settings,
    /** Applies `handle(event)` once: in the transaction that records the event in the inbox. */
    applyOnce(msg, event, handle) {
      const run = inProgress.then(() => apply(msg, event, handle));
      inProgress = run.catch(() => {});
      return run;
    },
    /** A statement in the current event's transaction. */
    query: (text, values) => client.query(text, values),
    /** On SIGINT/SIGTERM: no new deliveries, let the event in progress finish, then close. */
    stopOn(connection, channel, consumerTag) {
      const stop = async () => {
        await channel.cancel(consumerTag).catch(() => {});
        await inProgress;
        await connection.close().catch(() => {});
        await client.end();
        console.log(`[${name}] stopped`);
      };
      for (const sig of ['SIGINT', 'SIGTERM']) process.once(sig, () => { stop().catch(() => process.exit(1)); });
    },
  };
}

module.exports = { openInbox, option };
