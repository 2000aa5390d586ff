// The ES module entry: the CommonJS package's exports, by name and as the default export
// (test/package.test.js checks that these are every name of lib/index.js).
import outbox from './index.js';

export const { Outbox, Database, Relay, Consumer, Message, OutboxError, PermanentFailure, status, native, version, write,
  renderWrite, dedupe, renderDedupe, connect, migrate, configKeys } = outbox;

export default outbox;
