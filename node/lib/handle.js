'use strict';
// A native handle and the queue of calls on it: the C handles are not thread-safe, so calls on one
// run one at a time, in call order, however many the caller starts at once.
const { outboxError } = require('./errors');

class Handle {
  /** free: the C destroy function; closed: [code, message] of a call after close() */
  constructor(handle, free, closed) {
    Object.assign(this, { _h: handle, _free: free, _closed: closed, _closing: null });
    this._tail = Promise.resolve(); // the last call queued, settled
    this._pending = 0;
  }

  // Runs fn() after every earlier call settled; when idle, now rather than a microtask later.
  _run(fn) {
    let p;
    try {
      p = this._pending === 0 ? Promise.resolve(fn()) : this._tail.then(fn);
    } catch (e) {
      p = Promise.reject(e);
    }
    this._pending++;
    const settled = () => void this._pending--;
    this._tail = p.then(settled, settled);
    return p;
  }

  _op(fn) {
    if (this._closing !== null) return Promise.reject(outboxError(...this._closed));
    return this._run(() => fn(this._h));
  }

  /** Stops (relays and consumers), waits for pending calls, frees the handle. Idempotent. */
  close() {
    if (this._closing === null) {
      if (this.stop) this.stop();
      this._closing = this._run(() => this._free(this._h));
    }
    return this._closing;
  }
}

module.exports = { Handle };
