// expect: TS2561 TS2353 -- a misspelt event field
import { write } from 'outbox';
import { Client } from 'pg';
export const p = write(new Client(), { aggregateType: 'PRD', aggregateID: '1', operation: 'POST', payload: {} });
