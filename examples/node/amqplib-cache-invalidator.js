#!/usr/bin/env node
'use strict';
// cache-invalidator subscriber (Node.js), as the documents write it: amqplib, its own durable
// queue on the fanout exchange, the documents' handleEvent and getCacheKeys. Each event is
// applied once through the outbox inbox (amqplib-inbox.js). Redis is replaced by a stand-in that
// records each deleted key in <schema>.cache_invalidations, in the transaction that records the
// event in the inbox.
//
//   node amqplib-cache-invalidator.js [--queue NAME] [--exchange NAME] [--crash-after-apply]
// Environment: OUTBOX_AMQP_URL, OUTBOX_PG_URL, OUTBOX_SCHEMA, OUTBOX_EXCHANGE (amqplib-inbox.js).
const amqp = require('amqplib');
const { openInbox } = require('./amqplib-inbox');

let inbox;

// Stand-in for the documents' Redis client.
const redis = {
  async del(key) {
    await inbox.query(`INSERT INTO "${inbox.settings.schema}".cache_invalidations (cache_key) VALUES ($1)`, [key]);
  },
};

async function startCacheInvalidator() {
  inbox = await openInbox('cache-invalidator',
    (schema) => `CREATE TABLE IF NOT EXISTS ${schema}.cache_invalidations (cache_key text NOT NULL,
                 at timestamptz NOT NULL DEFAULT now())`);
  const connection = await amqp.connect(inbox.settings.amqpUrl);
  const channel = await connection.createChannel();
  await channel.prefetch(1); // one event at a time: in queue order, one transaction at a time

  const exchange = inbox.settings.exchange;
  await channel.assertExchange(exchange, 'fanout', { durable: true });
  const queue = await channel.assertQueue(inbox.name, { durable: true, autoDelete: false });
  await channel.bindQueue(queue.queue, exchange, '');

  const { consumerTag } = await channel.consume(queue.queue, async (msg) => {
    if (msg) {
      const event = JSON.parse(msg.content.toString());
      try {
        await inbox.applyOnce(msg, event, handleEvent); // handleEvent only the first time, with its inbox row
        channel.ack(msg);
      } catch (error) {
        console.error('Failed to process event:', error);
        channel.nack(msg, false, true); // Requeue for retry
      }
    }
  });
  inbox.stopOn(connection, channel, consumerTag);

  console.log(`Cache invalidator started. Waiting for events on queue '${queue.queue}'...`);
}

async function handleEvent(event) {
  const cacheKeys = getCacheKeys(event);
  for (const key of cacheKeys) {
    await redis.del(key);
    console.log(`Invalidated cache: ${key}`);
  }
}

function getCacheKeys(event) {
  const keys = [];
  const id = event.AGGREGATE_ID;
  const dim = event.AGGREGATE_TYPE;

  // Invalidate record cache
  keys.push(`${dim}:${id}`);

  // Invalidate list caches
  keys.push(`${dim}:list:*`);

  // Dimension-specific invalidation
  if (dim === 'PRD' && event.PAYLOAD.XPRD05) {
    // Invalidate category cache
    keys.push(`CAT:${event.PAYLOAD.XPRD05}:products`);
  }

  return keys;
}

startCacheInvalidator().catch((e) => {
  console.error(`cache-invalidator: ${e.code || 'ERROR'}: ${e.message}`);
  process.exit(1);
});
