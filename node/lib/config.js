'use strict';
// Options: a plain object keyed by the C configuration keys ('outbox.schema', 'amqp.url',
// 'event.type_map', ...: see configKeys()), values string | number | boolean. A few keys are the
// JS layer's own (JS_KEYS); everything else goes to outbox_config_set(), which rejects unknown
// keys (UNKNOWN_KEY) and bad values (INVALID_ARGUMENT) with the library's message.
const native = require('./native');
const { typeError } = require('./errors');

const JS_KEYS = new Set(['logger', 'preparedStatements']);

function toText(key, value) {
  if (typeof value === 'string') return value;
  if (typeof value === 'number' || typeof value === 'bigint') return String(value);
  if (typeof value === 'boolean') return value ? 'true' : 'false';
  throw typeError(`option '${key}' must be a string, number or boolean`);
}

/** A native outbox_config holding `options`. The caller owns it (config_free, or GC). */
function makeConfig(options) {
  if (options !== undefined && options !== null && (typeof options !== 'object' || Array.isArray(options))) {
    throw typeError('options must be an object of configuration keys');
  }
  const cfg = native.config_new();
  try {
    for (const [key, value] of Object.entries(options || {})) {
      if (value === undefined || JS_KEYS.has(key)) continue;
      native.config_set(cfg, key, toText(key, value));
    }
  } catch (e) {
    native.config_free(cfg);
    throw e;
  }
  return cfg;
}

/** Every configuration key the library knows, with its help text. */
function configKeys() {
  const out = [];
  for (let i = 0; ; i++) {
    const k = native.config_key(i);
    if (k === null) return out;
    out.push(k);
  }
}

const LEVELS = ['debug', 'info', 'warn', 'error'];

// The `logger` option as a (level: number, message) function that never throws into the addon.
function loggerOf(options) {
  const fn = options && options.logger;
  if (fn === undefined || fn === null) return null;
  if (typeof fn !== 'function') throw typeError("option 'logger' must be a function (level, message) => void");
  return (level, message) => {
    try {
      fn(LEVELS[level] || 'info', message);
    } catch (_) {
      // a logger must not break the relay or consumer
    }
  };
}

module.exports = { makeConfig, configKeys, loggerOf, JS_KEYS };
