'use strict';
// Options: the C configuration keys (configKeys()) set on an outbox_config, which refuses unknown
// keys and bad values; `logger` and `preparedStatements` are this package's own.
const native = require('./native');
const { typeError } = require('./errors');

/** A native outbox_config holding `options` (freed by its finalizer, or config_free). */
const makeConfig = (options) => native.config_new(options, ['logger', 'preparedStatements']);

/** Every configuration key the library knows, with its help text. */
function configKeys() {
  const keys = [];
  for (let k; (k = native.config_key(keys.length)) !== null;) keys.push(k);
  return keys;
}

// The `logger` option as a (level name, message) function that never throws.
function loggerOf(options) {
  const fn = options && options.logger;
  if (fn === undefined || fn === null) return null;
  if (typeof fn !== 'function') throw typeError("option 'logger' must be a function (level, message) => void");
  return (level, message) => {
    try {
      fn(level, message);
    } catch (_) {
      // a logger must not break the relay or consumer
    }
  };
}

module.exports = { makeConfig, configKeys, loggerOf };
