'use strict';
// Relay: moves committed events to RabbitMQ with publisher confirms (outbox_relay_*). One relay per
// outbox table is active; the others stand by and take over when it stops or loses its connection.
//   const relay = new Relay({ 'pg.url': ..., 'amqp.url': ..., 'outbox.schema': ... });
//   await relay.step();          // one round: { claimed, published, failed, ... }
//   const done = relay.run();    // LISTEN/NOTIFY wake-ups, polling fallback, reconnects
//   relay.stop(); await done;    // resolves once in-flight events are confirmed or left pending
const native = require('./native');
const { Serial } = require('./serial');
const { makeConfig, loggerOf } = require('./config');
const { outboxError } = require('./errors');

function stats(s) {
  return {
    claimed: s.claimed,
    published: s.published,
    failed: s.failed,
    dead: s.dead,
    heldBack: s.held_back,
    unroutable: s.unroutable,
    nacked: s.nacked,
    unconfirmed: s.unconfirmed,
    claimUs: s.claim_us,
    publishUs: s.publish_us,
    markUs: s.mark_us,
    totalUs: s.total_us,
    blocked: s.blocked,
  };
}

class Relay {
  /**
   * @param {Record<string, string|number|boolean|Function>} options configuration keys (needs
   *   'pg.url' and 'amqp.url', else OUTBOX_PG_URL / OUTBOX_AMQP_URL), and `logger: (level, message) => void`.
   */
  constructor(options) {
    const cfg = makeConfig(options);
    try {
      native.config_from_env(cfg, false); // the library's fallback, as every language has it
      this._h = native.relay_new(cfg); // copies the configuration
    } finally {
      native.config_free(cfg);
    }
    const log = loggerOf(options);
    if (log) native.relay_set_logger(this._h, log);
    this._q = new Serial();
    this._run = null; // { stopped, promise } while run() is queued or running
    this._closing = null;
  }

  _op(fn) {
    if (this._closing !== null) return Promise.reject(outboxError('INVALID_ARGUMENT', 'the relay is closed'));
    return this._q.run(() => fn(this._h));
  }

  /**
   * One relay round (outbox_relay_step): read events, publish them with confirms, and record the
   * outcomes (receipts, parked events, the cursor) before it resolves. One relay per outbox table
   * is active; a relay standing by (another is active) does nothing and resolves with zeroes.
   */
  step() {
    return this._op(async (h) => {
      native.relay_reset(h); // a stop() of an earlier run must not cut this step short
      return stats(await native.relay_step(h));
    });
  }

  /**
   * Runs the relay (outbox_relay_run, on a thread of its own) until stop(); resolves then.
   * Calling run() while it runs returns the same promise.
   */
  run() {
    if (this._run) return this._run.promise;
    const run = { stopped: false, promise: null };
    this._run = run;
    run.promise = this._op((h) => {
      if (run.stopped) return undefined;
      native.relay_reset(h);
      return native.relay_run(h);
    }).finally(() => {
      if (this._run === run) this._run = null;
    });
    return run.promise;
  }

  get running() {
    return this._run !== null;
  }

  /** Asks run() (or a step in flight) to finish what is in flight and return. */
  stop() {
    if (this._run) this._run.stopped = true;
    if (this._h) native.relay_stop(this._h);
  }

  /** Stops, waits for pending calls, frees the relay. Idempotent. */
  close() {
    if (this._closing === null) {
      this.stop();
      this._closing = this._q.run(() => {
        native.relay_free(this._h);
      });
    }
    return this._closing;
  }
}

module.exports = { Relay };
