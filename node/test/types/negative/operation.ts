// expect: TS2322 -- an operation that is not one of the five
import type { OutboxEvent } from 'outbox';
export const bad: OutboxEvent = { aggregateType: 'PRD', aggregateId: '1', operation: 'UPSERT', payload: {} };
