// expect: TS2322 -- seq is a number
import { write } from 'outbox';
import { Client } from 'pg';
export async function f(): Promise<string> {
  const w = await write(new Client(), { aggregateType: 'PRD', aggregateId: '1', operation: 'POST', payload: {} });
  const s: string = w.seq;
  return s;
}
