'use strict';
// One promise queue per native handle: the C handles are not thread-safe, so operations on one
// handle run one at a time, in call order, however many the caller starts at once.
const noop = () => {};

class Serial {
  constructor() {
    this._tail = Promise.resolve();
    this._pending = 0;
  }

  /** Runs fn() after every earlier operation settled; resolves/rejects as fn does. */
  run(fn) {
    let p;
    if (this._pending === 0) {
      // Idle: start now rather than a microtask later (the common await-one-at-a-time case).
      try {
        p = Promise.resolve(fn());
      } catch (e) {
        p = Promise.reject(e);
      }
    } else {
      p = this._tail.then(fn);
    }
    this._pending++;
    const settled = () => {
      this._pending--;
    };
    p.then(settled, settled);
    this._tail = p.then(noop, noop);
    return p;
  }

  get pending() {
    return this._pending;
  }

  /** Resolves when everything queued so far settled. */
  idle() {
    return this._tail;
  }
}

module.exports = { Serial };
