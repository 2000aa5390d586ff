// expect: TS2345 -- a pg.Pool where one connection is expected (its queries escape the transaction)
import { write } from 'outbox';
import { Pool } from 'pg';
export const p = write(new Pool(), { aggregateType: 'PRD', aggregateId: '1', operation: 'POST', payload: {} });
