// expect: TS2339 -- the handler's client is options.client's type: a pg.Client has no release()
import { Consumer } from 'outbox';
import { Client } from 'pg';
export async function f(consumer: Consumer, client: Client): Promise<void> {
  await consumer.consume(async (m, tx) => {
    tx.release();
  }, { client });
}
