// Type declarations of the ES module entry (lib/index.mjs): the same names as index.d.ts, and the
// whole module as the default export.
import * as outbox from './index.js';

export * from './index.js';
export default outbox;
