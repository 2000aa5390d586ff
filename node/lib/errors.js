'use strict';
// Errors: an Error with a string `code`, the C status (outbox_status_name(): 'DUPLICATE', ...), its number `status`.
const native = require('./native');

const STATUS = native.status; // by name, from outbox.h as the addon was compiled against it

class OutboxError extends Error {
  /** code: a key of STATUS; status: its number by default */
  constructor(message, code, status, options) {
    super(message, options && 'cause' in options ? { cause: options.cause } : undefined);
    this.name = 'OutboxError';
    this.code = code;
    this.status = status !== undefined ? status : (STATUS[code] ?? STATUS.INTERNAL);
  }

  /** Whether the same call may succeed later: the library's answer (outbox_status_retriable). */
  get retriable() {
    return native.retriable[this.code] === true;
  }
}

/** Thrown by a consume() handler: the event can never succeed, so its aggregate is parked at once (no retries). */
class PermanentFailure extends Error { name = 'PermanentFailure'; }

const outboxError = (code, message, options) => new OutboxError(message, code, STATUS[code], options);

// A JS value of the wrong type: a TypeError with the code the C API gives bad arguments.
const typeError = (message) =>
  Object.assign(new TypeError(message), { code: 'INVALID_ARGUMENT', status: STATUS.INVALID_ARGUMENT });

native.set_error_class(OutboxError); // the class the addon throws

module.exports = { OutboxError, PermanentFailure, STATUS, outboxError, typeError };
