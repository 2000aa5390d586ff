#!/usr/bin/env node
'use strict';
// The documents' search-indexer, on the outbox consumer: each event is applied exactly once,
// in the same transaction that records it in the inbox. Where the documents index into
// Elasticsearch, this keeps a search document per product in <schema>.search_index.
//   node search-indexer.js [--count N] [--name NAME] [--exchange NAME]
const { main } = require('./common');

main('search-indexer',
  (schema) => `CREATE TABLE IF NOT EXISTS ${schema}.search_index (id text PRIMARY KEY, doc jsonb NOT NULL)`,
  async (event, client, schema) => {
    switch (event.eventType) {
      case 'ProductCreated':
      case 'ProductUpdated':
        await client.query(`INSERT INTO ${schema}.search_index (id, doc) VALUES ($1, $2)
                            ON CONFLICT (id) DO UPDATE SET doc = search_index.doc || EXCLUDED.doc`,
        [event.aggregateId, event.payloadText]);
        console.log(`[search-indexer] ${event.eventType} ${event.aggregateId}: indexed (seq ${event.seq}, ${event.order})`);
        break;
      case 'ProductDeleted':
      case 'ProductForceDeleted':
        await client.query(`DELETE FROM ${schema}.search_index WHERE id = $1`, [event.aggregateId]);
        console.log(`[search-indexer] ${event.eventType} ${event.aggregateId}: removed from the index (seq ${event.seq})`);
        break;
      default:
        console.log(`[search-indexer] ${event.eventType} ${event.aggregateId}: not indexed`);
    }
  });
