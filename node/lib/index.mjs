// The ES module entry: the CommonJS package's exports, by name and as the default export.
// test/exports.test.js checks that this list is every named export of lib/index.js.
import outbox from './index.js';

export const {
  Outbox,
  Database,
  Relay,
  Consumer,
  Message,
  OutboxError,
  status,
  native,
  version,
  write,
  renderWrite,
  dedupe,
  renderDedupe,
  connect,
  migrate,
  configKeys,
} = outbox;

export default outbox;
