#!/usr/bin/env node
'use strict';
// search-indexer subscriber (Node.js), as the documents write it with amqplib: its own durable
// queue bound to the fanout exchange, JSON.parse of the body, handleEvent on event.EVENT_TYPE /
// event.AGGREGATE_ID / event.PAYLOAD, ack, nack to requeue. Two additions: prefetch(1), and each
// event applied once through the outbox inbox (amqplib-inbox.js), so a redelivery never indexes twice.
// Elasticsearch is replaced by a stand-in that keeps the documents in <schema>.search_index,
// written in the transaction that records the event in the inbox.
//
//   node amqplib-search-indexer.js [--queue NAME] [--exchange NAME] [--crash-after-apply]
// Environment: OUTBOX_AMQP_URL, OUTBOX_PG_URL, OUTBOX_SCHEMA, OUTBOX_EXCHANGE (amqplib-inbox.js).
const amqp = require('amqplib');
const { openInbox } = require('./amqplib-inbox');

let inbox;

// Stand-in for the documents' Elasticsearch client.
const elasticsearch = {
  async index({ id, body }) {
    await inbox.query(`INSERT INTO "${inbox.settings.schema}".search_index (id, doc) VALUES ($1, $2)
                       ON CONFLICT (id) DO UPDATE SET doc = EXCLUDED.doc`, [id, body]);
  },
  async update({ id, body }) {
    await inbox.query(`UPDATE "${inbox.settings.schema}".search_index SET doc = doc || $2 WHERE id = $1`, [id, body.doc]);
  },
  async delete({ id }) {
    await inbox.query(`DELETE FROM "${inbox.settings.schema}".search_index WHERE id = $1`, [id]);
  },
};

async function startSearchIndexer() {
  inbox = await openInbox('search-indexer',
    (schema) => `CREATE TABLE IF NOT EXISTS ${schema}.search_index (id text PRIMARY KEY, doc jsonb NOT NULL)`);
  const connection = await amqp.connect(inbox.settings.amqpUrl);
  const channel = await connection.createChannel();
  await channel.prefetch(1); // one event at a time: in queue order, one transaction at a time

  // Bind to fanout exchange
  const exchange = inbox.settings.exchange;
  await channel.assertExchange(exchange, 'fanout', { durable: true });

  // Create queue for this subscriber
  const queue = await channel.assertQueue(inbox.name, {
    durable: true,
    autoDelete: false
  });

  // Bind queue to exchange
  await channel.bindQueue(queue.queue, exchange, '');

  // Consume events
  const { consumerTag } = await channel.consume(queue.queue, async (msg) => {
    if (msg) {
      const event = JSON.parse(msg.content.toString());
      try {
        await inbox.applyOnce(msg, event, handleEvent); // handleEvent only the first time, with its inbox row
        channel.ack(msg); // Acknowledge successful processing
      } catch (error) {
        console.error('Failed to process event:', error);
        channel.nack(msg, false, true); // Requeue for retry
      }
    }
  });
  inbox.stopOn(connection, channel, consumerTag);

  console.log(`Search indexer started. Waiting for events on queue '${queue.queue}'...`);
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

startSearchIndexer().catch((e) => {
  console.error(`search-indexer: ${e.code || 'ERROR'}: ${e.message}`);
  process.exit(1);
});
