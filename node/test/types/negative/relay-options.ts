// expect: TS2554 -- a Relay needs its options
import { Relay } from 'outbox';
export const r = new Relay();
