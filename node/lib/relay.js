'use strict';
// Relay: moves committed events to RabbitMQ with publisher confirms (outbox_relay_*): step() one round, or run() until
// stop() (LISTEN/NOTIFY, polling, reconnects). One relay per table is active; the others stand by and take over.
const native = require('./native');
const { Handle } = require('./handle');
const { makeConfig, loggerOf } = require('./config');

class Relay extends Handle {
  /** options: configuration keys ('pg.url', 'amqp.url', else from the environment) and `logger` */
  constructor(options) {
    const cfg = makeConfig(options);
    const log = loggerOf(options);
    native.config_from_env(cfg, false); // the library's fallback, as every language has it
    super(native.relay_new(cfg), native.relay_free, ['INVALID_ARGUMENT', 'the relay is closed']);
    native.config_free(cfg); // the relay has its copy
    if (log) native.relay_set_logger(this._h, log);
    this._running = null; // run()'s promise
    this._stops = 0; // stop() calls: a run() queued before one does not start
  }

  /** One round (outbox_relay_step), outcomes recorded before it resolves with its stats. */
  step() {
    return this._op((h) => {
      native.relay_reset(h); // a stop() of an earlier run must not cut this step short
      return native.relay_step(h);
    });
  }

  /** Runs the relay (outbox_relay_run, on a thread of its own) until stop(); resolves then. */
  run() {
    const stops = this._stops;
    this._running ??= this._op((h) => {
      if (this._stops !== stops) return undefined;
      native.relay_reset(h);
      return native.relay_run(h);
    }).finally(() => {
      this._running = null;
    });
    return this._running;
  }

  get running() {
    return this._running !== null;
  }

  /** Asks run() (or a step in flight) to finish what is in flight and return. */
  stop() {
    this._stops++;
    native.relay_stop(this._h);
  }
}

module.exports = { Relay };
