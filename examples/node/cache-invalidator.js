#!/usr/bin/env node
'use strict';
// The documents' cache-invalidator, on the outbox consumer: the keys the documents delete from
// Redis are recorded in <schema>.cache_invalidations, exactly once per event.
//   node cache-invalidator.js [--count N] [--name NAME] [--exchange NAME]
const { main } = require('./common');

// As the documents compute them.
function getCacheKeys(event) {
  const keys = [];
  const id = event.AGGREGATE_ID;
  const dim = event.AGGREGATE_TYPE;
  keys.push(`${dim}:${id}`); // the record
  keys.push(`${dim}:list:*`); // list caches
  if (dim === 'PRD' && event.PAYLOAD.XPRD05) {
    keys.push(`CAT:${event.PAYLOAD.XPRD05}:products`); // the category's product list
  }
  return keys;
}

main('cache-invalidator',
  (schema) => `CREATE TABLE IF NOT EXISTS ${schema}.cache_invalidations (cache_key text NOT NULL,
               at timestamptz NOT NULL DEFAULT now())`,
  async (message, client, schema) => {
    for (const key of getCacheKeys(message.envelope)) {
      await client.query(`INSERT INTO ${schema}.cache_invalidations (cache_key) VALUES ($1)`, [key]);
      console.log(`[cache-invalidator] ${message.eventType}: invalidated cache: ${key}`);
    }
  });
