'use strict';
// Events from plain objects: { aggregateType, aggregateId, operation, payload, ... } (camelCase,
// or the C field names) set on a native outbox_event. Objects given for JSON fields are
// serialised with JSON.stringify; strings and Uint8Arrays are passed as they are (exact JSON text,
// e.g. big integers). Validation is the library's own (outbox_event_set / outbox_write).
const native = require('./native');
const { typeError } = require('./errors');

// The fields the library enumerates (outbox_event_field), read once: camelCase name -> C name,
// and the fields whose value is JSON text.
const FIELDS = {};
const JSON_FIELDS = new Set();
for (let i = 0; ; i++) {
  const f = native.event_field(i);
  if (f === null) break;
  FIELDS[f.name.replace(/_([a-z])/g, (_, c) => c.toUpperCase())] = f.name;
  if (f.kind === 1) JSON_FIELDS.add(f.name);
}
Object.freeze(FIELDS);

function fieldValue(field, value) {
  if (typeof value === 'string' || value instanceof Uint8Array) return value;
  if (typeof value === 'boolean') return value ? 'true' : 'false';
  if (typeof value === 'number' || typeof value === 'bigint') return String(value);
  if (JSON_FIELDS.has(field) && typeof value === 'object') return JSON.stringify(value);
  throw typeError(`event field '${field}' must be a string${JSON_FIELDS.has(field) ? ' or an object' : ''}`);
}

function checkEvent(event) {
  if (event === null || typeof event !== 'object' || Array.isArray(event)) {
    throw typeError('event must be an object like { aggregateType, aggregateId, operation, payload }');
  }
}

/** A new native event with the fields of `event`; the caller frees it (event_free). */
function newEvent(event) {
  checkEvent(event);
  const ev = native.event_new();
  try {
    for (const key of Object.keys(event)) {
      const value = event[key];
      if (value === undefined || value === null) continue;
      const field = FIELDS[key] || key; // unknown names reach the library: UNKNOWN_KEY
      native.event_set(ev, field, fieldValue(field, value));
    }
  } catch (e) {
    native.event_free(ev);
    throw e;
  }
  return ev;
}

/** [field, value, ...] of `event` for native.write_fields and native.render_write_fields: the same mapping as newEvent. */
function eventFields(event) {
  checkEvent(event);
  const out = [];
  for (const key of Object.keys(event)) {
    const value = event[key];
    if (value === undefined || value === null) continue;
    const field = FIELDS[key] || key; // unknown names reach the library: UNKNOWN_KEY
    out.push(field, fieldValue(field, value));
  }
  return out;
}

module.exports = { newEvent, eventFields, FIELDS };
