'use strict';
// Relay: moves committed events to RabbitMQ with publisher confirms (outbox_relay_*). One relay per
// outbox table is active; the others stand by and take over when it stops or loses its connection.
//   const relay = new Relay({ 'pg.url': ..., 'amqp.url': ..., 'outbox.schema': ... });
//   await relay.step();          // one round: { claimed, published, failed, ... }
//   const done = relay.run();    // LISTEN/NOTIFY wake-ups, polling fallback, reconnects
//   relay.stop(); await done;    // resolves once in-flight events are confirmed or left pending
const native = require('./native');
const { Handle } = require('./handle');
const { makeConfig, loggerOf } = require('./config');

class Relay extends Handle {
  /**
   * @param {Record<string, string|number|boolean|Function>} options configuration keys (needs
   *   'pg.url' and 'amqp.url', else OUTBOX_PG_URL / OUTBOX_AMQP_URL), and `logger: (level, message) => void`.
   */
  constructor(options) {
    const cfg = makeConfig(options);
    const log = loggerOf(options);
    native.config_from_env(cfg, false); // the library's fallback, as every language has it
    super(native.relay_new(cfg), native.relay_free, ['INVALID_ARGUMENT', 'the relay is closed']);
    native.config_free(cfg); // the relay has its copy
    if (log) native.relay_set_logger(this._h, log);
    this._running = null; // { stopped, promise } while run() is queued or running
  }

  /**
   * One relay round (outbox_relay_step): read events, publish them with confirms, and record the
   * outcomes (receipts, parked events, the cursor) before it resolves. One relay per outbox table
   * is active; a relay standing by (another is active) does nothing and resolves with zeroes.
   */
  step() {
    return this._op((h) => {
      native.relay_reset(h); // a stop() of an earlier run must not cut this step short
      return native.relay_step(h);
    });
  }

  /**
   * Runs the relay (outbox_relay_run, on a thread of its own) until stop(); resolves then.
   * Calling run() while it runs returns the same promise.
   */
  run() {
    if (this._running) return this._running.promise;
    const run = { stopped: false, promise: null };
    this._running = run;
    run.promise = this._op((h) => {
      if (run.stopped) return undefined;
      native.relay_reset(h);
      return native.relay_run(h);
    }).finally(() => {
      if (this._running === run) this._running = null;
    });
    return run.promise;
  }

  get running() {
    return this._running !== null;
  }

  /** Asks run() (or a step in flight) to finish what is in flight and return. */
  stop() {
    if (this._running) this._running.stopped = true;
    native.relay_stop(this._h);
  }
}

module.exports = { Relay };
