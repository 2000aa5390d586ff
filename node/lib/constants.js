'use strict';
// Names for the C enums.
const TX_STATES = ['IDLE', 'ACTIVE', 'INTRANS', 'INERROR', 'UNKNOWN']; // outbox_tx_state
const ORDERS = ['UNCHECKED', 'IN_ORDER', 'STALE', 'GAP']; // outbox_order
const MIGRATE_TARGETS = { all: 0, outbox: 1, inbox: 2 }; // outbox_migrate_target

function dedupeResult(r) {
  return { firstTime: r.first_time, order: ORDERS[r.order] || 'UNCHECKED', previousSeq: r.previous_seq };
}

module.exports = { TX_STATES, ORDERS, MIGRATE_TARGETS, dedupeResult };
