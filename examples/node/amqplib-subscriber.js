#!/usr/bin/env node
'use strict';
// search-indexer subscriber (Node.js), exactly as the documents write it: amqplib, its own
// durable queue bound to the fanout exchange with an empty routing key, JSON.parse of the body,
// event.EVENT_TYPE / event.AGGREGATE_ID / event.PAYLOAD. It needs nothing from this project:
// the relay's messages are the documents' envelope, unchanged.
//
//   node amqplib-subscriber.js [--count N] [--queue NAME] [--exchange NAME]
// Environment: OUTBOX_AMQP_URL, OUTBOX_EXCHANGE (default corewrite.fanout), OUTBOX_QUEUE.
// The documents name the queue 'search-indexer'; the default here is 'search-indexer-amqplib',
// as 'search-indexer' is the (quorum) queue of the subscriber on the outbox consumer.
// Elasticsearch is replaced by a stand-in that prints each call as a JSON line.
const amqp = require('amqplib');

function arg(name, fallback) {
  const i = process.argv.indexOf(name);
  return i > 0 && i + 1 < process.argv.length ? process.argv[i + 1] : fallback;
}
const url = process.env.OUTBOX_AMQP_URL || 'amqp://outbox:outbox@127.0.0.1:56729/%2f';
const exchangeName = arg('--exchange', process.env.OUTBOX_EXCHANGE || 'corewrite.fanout');
const queueName = arg('--queue', process.env.OUTBOX_QUEUE || 'search-indexer-amqplib');
let remaining = Number(arg('--count', '0'));
let connection;

// Stand-in for the documents' Elasticsearch client.
const elasticsearch = {
  async index(req) { console.log(JSON.stringify({ es: 'index', ...req })); },
  async update(req) { console.log(JSON.stringify({ es: 'update', ...req })); },
  async delete(req) { console.log(JSON.stringify({ es: 'delete', ...req })); },
};

async function startSearchIndexer() {
  connection = await amqp.connect(url);
  const channel = await connection.createChannel();

  // Bind to fanout exchange
  const exchange = exchangeName;
  await channel.assertExchange(exchange, 'fanout', { durable: true });

  // Create queue for this subscriber
  const queue = await channel.assertQueue(queueName, {
    durable: true,
    autoDelete: false
  });

  // Bind queue to exchange
  await channel.bindQueue(queue.queue, exchange, '');

  // Consume events
  channel.consume(queue.queue, async (msg) => {
    if (msg) {
      const event = JSON.parse(msg.content.toString());
      try {
        await handleEvent(event);
        channel.ack(msg); // Acknowledge successful processing
        if (remaining > 0 && --remaining === 0) await connection.close();
      } catch (error) {
        console.error('Failed to process event:', error);
        channel.nack(msg, false, true); // Requeue for retry
      }
    }
  });

  console.log('Search indexer started. Waiting for events...');
}

async function handleEvent(event) {
  switch (event.EVENT_TYPE) {
    case 'ProductCreated':
      await elasticsearch.index({
        index: 'products',
        id: event.AGGREGATE_ID,
        body: event.PAYLOAD
      });
      console.log(`Indexed product: ${event.AGGREGATE_ID}`);
      break;

    case 'ProductUpdated':
      await elasticsearch.update({
        index: 'products',
        id: event.AGGREGATE_ID,
        body: { doc: event.PAYLOAD }
      });
      console.log(`Updated product index: ${event.AGGREGATE_ID}`);
      break;

    case 'ProductDeleted':
      await elasticsearch.delete({
        index: 'products',
        id: event.AGGREGATE_ID
      });
      console.log(`Removed product from index: ${event.AGGREGATE_ID}`);
      break;
  }
}

process.once('SIGINT', () => connection && connection.close());
process.once('SIGTERM', () => connection && connection.close());
startSearchIndexer().catch((e) => {
  console.error(`search-indexer: ${e.message}`);
  process.exit(1);
});
