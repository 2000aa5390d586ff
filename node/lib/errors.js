'use strict';
// Errors: every failure is an Error with a string `code` mirroring the C status
// (outbox_status_name(): 'INVALID_EVENT', 'DUPLICATE', ...) and the numeric `status`.

const native = require('./native');

// The status numbers by name, from outbox.h as the addon was compiled against it.
const STATUS = native.status;

class OutboxError extends Error {
  /**
   * @param {string} message
   * @param {string} code a key of STATUS
   * @param {number} [status]
   * @param {{cause?: unknown}} [options]
   */
  constructor(message, code, status, options) {
    super(message, options && 'cause' in options ? { cause: options.cause } : undefined);
    this.name = 'OutboxError';
    this.code = code;
    this.status = status !== undefined ? status : (STATUS[code] !== undefined ? STATUS[code] : STATUS.INTERNAL);
  }

  /** Whether the same call may succeed later: the library's answer (outbox_status_retriable). */
  get retriable() {
    return native.retriable[this.code] === true;
  }
}

function outboxError(code, message, cause) {
  return new OutboxError(message, code, STATUS[code], cause !== undefined ? { cause } : undefined);
}

// A JS value of the wrong type: a TypeError with the code the C API gives bad arguments.
function typeError(message) {
  const e = new TypeError(message);
  e.code = 'INVALID_ARGUMENT';
  e.status = STATUS.INVALID_ARGUMENT;
  return e;
}

// SQLSTATE -> status name, as the library maps libpq errors (outbox_status_for_sqlstate), for the
// statements it renders and node-postgres runs.
function codeForSqlstate(s) {
  return native.status_for_sqlstate(typeof s === 'string' ? s : null);
}

const NETWORK_ERRNOS = new Set(['ECONNRESET', 'ECONNREFUSED', 'EPIPE', 'ETIMEDOUT', 'EHOSTUNREACH', 'ENOTFOUND',
  'ENETUNREACH', 'ECONNABORTED']);

// An error node-postgres raised, as an OutboxError (the original is its `cause`).
function fromPg(err, context) {
  if (err instanceof OutboxError) return err;
  const prefix = context ? `${context}: ` : '';
  const msg = err && err.message ? err.message : String(err);
  const sqlstate = err && typeof err.code === 'string' && /^[0-9A-Z]{5}$/.test(err.code) ? err.code : null;
  let code;
  if (sqlstate) code = codeForSqlstate(sqlstate);
  else if (err && NETWORK_ERRNOS.has(err.code)) code = 'CONNECTION';
  else if (/not queryable|Connection terminated|connection is closed|Client was closed|ended/i.test(msg)) code = 'CONNECTION';
  else code = 'DATABASE';
  // node-postgres rejects a failed query before it reads the server's ReadyForQuery, so a caller
  // can reach write() with its transaction aborted but the client still saying 'T': the server's
  // 25P02 then says the same as write()'s own check.
  const hint = sqlstate === '25P02' ? "; the caller's transaction is aborted: roll it back first" : '';
  return outboxError(code, `${prefix}${msg}${sqlstate ? ` (SQLSTATE ${sqlstate})` : ''}${hint}`, err);
}

native.set_error_class(OutboxError); // the class the addon throws

module.exports = { OutboxError, STATUS, outboxError, typeError, fromPg, codeForSqlstate, NETWORK_ERRNOS };
