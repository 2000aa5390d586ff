'use strict';
// Names for the C enums, read from the library (outbox.h as the addon was compiled against it).
const native = require('./native');

// An enum's names in value order: names[value] is the name.
function byValue(e) {
  const names = [];
  for (const [name, value] of Object.entries(e)) names[value] = name;
  return names;
}

const TX_STATES = byValue(native.enums.tx); // outbox_tx_state
const ORDERS = byValue(native.enums.order); // outbox_order
const MIGRATE_TARGETS = { ...native.enums.migrate }; // outbox_migrate_target

function dedupeResult(r) {
  return { firstTime: r.first_time, order: ORDERS[r.order] || 'UNCHECKED', previousSeq: r.previous_seq };
}

module.exports = { TX_STATES, ORDERS, MIGRATE_TARGETS, dedupeResult };
