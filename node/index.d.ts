// Type declarations for the `outbox` npm package (node/lib; the ES module entry's are
// index.d.mts). Kept in step with lib/ by test/types.test.js: tsc --strict on CJS and ESM programs,
// the README's examples and cases that must not compile, against the installed package.

/// <reference types="node" />

/** The C status names (outbox_status_name()). */
export type ErrorCode =
  | 'INVALID_ARGUMENT'
  | 'INVALID_EVENT'
  | 'TOO_LARGE'
  | 'DUPLICATE'
  | 'DATABASE'
  | 'CONNECTION'
  | 'BROKER'
  | 'TIMEOUT'
  | 'SCHEMA'
  | 'TRANSACTION'
  | 'NO_MEMORY'
  | 'STOPPED'
  | 'INTERNAL'
  | 'UNKNOWN_KEY'
  | 'NOT_FOUND';

/**
 * Every failure of the library: `code` is the C status name, `status` its number. (A JS value
 * of the wrong type, e.g. a handle of another kind, is a TypeError with code INVALID_ARGUMENT.)
 */
export class OutboxError extends Error {
  constructor(message: string, code: ErrorCode, status?: number, options?: { cause?: unknown });
  readonly code: ErrorCode;
  readonly status: number;
  /** Whether the same call may succeed later (a server away, a broker error, a wait that ran out). */
  readonly retriable: boolean;
}

/**
 * Throw it from a consume() handler when the event can never succeed: its aggregate is parked at
 * once, with no retries (any other error is transient: retried with backoff, then parked). An error
 * with `permanent: true` counts as one too.
 */
export class PermanentFailure extends Error {
  constructor(message?: string, options?: { cause?: unknown });
}

/** status name -> number (outbox_status). */
export const status: Readonly<Record<'OK' | ErrorCode, number>>;

/** The library's version, e.g. "0.1.0". */
export const version: string;

/**
 * Options keyed by the C configuration keys, e.g. 'outbox.schema', 'outbox.table',
 * 'event.type_map', 'pg.url', 'amqp.url', 'amqp.exchange', 'consumer.delivery_limit'
 * (configKeys() lists them all). Unknown keys are UNKNOWN_KEY, bad values INVALID_ARGUMENT.
 */
export interface Options {
  [key: string]: string | number | boolean | undefined | Logger;
  /**
   * Not a C key: run rendered statements as named prepared statements on node-postgres
   * (default true; turn off behind a transaction-pooling proxy such as PgBouncer).
   */
  preparedStatements?: boolean;
}

export type LogLevel = 'debug' | 'info' | 'warn' | 'error';
export type Logger = (level: LogLevel, message: string) => void;

/** Options of relays and consumers: configuration keys plus a logger (called on the main thread). */
export interface RuntimeOptions extends Options {
  logger?: Logger;
}

export function configKeys(): Array<{ key: string; help: string }>;

export type Operation = 'POST' | 'PUT' | 'PATCH' | 'DELETE' | 'FORCE_DELETE';

/** JSON given as an object (serialised with JSON.stringify) or as exact JSON text / bytes. */
export type Json = object | string | Uint8Array;

/** An event to write. The library validates it and names it ('POST' on PRD -> ProductCreated). */
export interface OutboxEvent {
  aggregateType: string;
  aggregateId: string | number | bigint;
  operation: Operation;
  payload: Json;
  previousPayload?: Json | null;
  metadata?: Json | null;
  user?: string | null;
  /** explicit event type; wins over naming */
  eventType?: string | null;
  /** unique: a second write with the same key is DUPLICATE */
  idempotencyKey?: string | null;
  /** explicit UUID; by default a new time-ordered UUIDv7 */
  eventId?: string | null;
  /** a DELETE named {Name}ForceDeleted */
  forceDelete?: boolean;
}

export interface WriteResult {
  eventId: string;
  eventType: string;
  /** per-aggregate sequence number */
  seq: number;
}

/** A rendered statement for node-postgres: $n placeholders, parameters as text. */
export interface RenderedStatement {
  text: string;
  values: Array<string | null>;
}

export interface RenderedWrite extends RenderedStatement {
  eventId: string;
  eventType: string;
}

export interface DedupeKey {
  consumer: string;
  /** the event's OUTBOX_ID */
  eventId: string;
  aggregateType?: string | null;
  aggregateId?: string | null;
  /** 0 or absent: unknown (no order check) */
  seq?: number | bigint;
}

export type Order = 'UNCHECKED' | 'IN_ORDER' | 'STALE' | 'GAP';

export interface DedupeResult {
  /** true: recorded now, process it; false: already processed, skip it */
  firstTime: boolean;
  order: Order;
  /** highest sequence of the aggregate processed before (0 = none) */
  previousSeq: number;
}

/** What a query resolves with: node-postgres' `QueryResult` has these (and more). */
export interface QueryResultLike {
  rows: any[];
  rowCount?: number | null;
}

/**
 * One node-postgres connection: a `pg.Client`, or the `PoolClient` of `await pool.connect()`,
 * accepted as they are (no casts). Transactions are the caller's. A `pg.Pool` is refused, here and
 * at run time: its queries run on any free connection, outside the caller's transaction (the
 * pool's counters are declared `never` below, so passing a pool does not type-check).
 */
export interface Queryable {
  query(text: string, values?: any[]): Promise<QueryResultLike>;
  query(queryConfig: { text: string; values?: any[]; name?: string; rowMode?: 'array' }): Promise<QueryResultLike>;
  readonly totalCount?: never;
  readonly idleCount?: never;
  readonly waitingCount?: never;
}

export type MigrateTarget = 'all' | 'outbox' | 'inbox';
export type TxState = 'IDLE' | 'ACTIVE' | 'INTRANS' | 'INERROR' | 'UNKNOWN';

/** A configuration and everything done with it. */
export class Outbox {
  constructor(options?: Options);
  /** The configured value of a key (secrets read back as '***'). */
  get(key: string): string;
  renderWrite(event: OutboxEvent): RenderedWrite;
  /** Writes the event on the caller's client, in the caller's transaction. */
  write(client: Queryable, event: OutboxEvent): Promise<WriteResult>;
  renderDedupe(key: DedupeKey): RenderedStatement;
  /** Records (consumer, event) in the inbox in the client's current transaction. */
  dedupe(client: Queryable, key: DedupeKey): Promise<DedupeResult>;
  /** A connection the library opens and owns. */
  connect(conninfo: string): Promise<Database>;
  /** Creates or upgrades the tables on a connection of its own; resolves with the version. */
  migrate(conninfo: string, target?: MigrateTarget): Promise<number>;
  relay(options?: RuntimeOptions): Relay;
  consumer(name: string, options?: RuntimeOptions): Consumer;
}

/** A PostgreSQL connection the library opened. Calls run one at a time, off the main thread. */
export class Database {
  private constructor();
  /** SQL without parameters or results: BEGIN, COMMIT, ROLLBACK, DDL. */
  exec(sql: string): Promise<void>;
  /** Writes the event in the connection's current transaction. */
  write(event: OutboxEvent): Promise<WriteResult>;
  /**
   * Writes the events in order in the current transaction, on one worker-thread trip. Stops at
   * the first failure (its error has `index`); the ones before it are written.
   */
  writeMany(events: OutboxEvent[]): Promise<WriteResult[]>;
  /** BEGIN; fn; COMMIT (ROLLBACK when fn throws). */
  transaction<T>(fn: (db: Database) => Promise<T> | T): Promise<T>;
  txState(): Promise<TxState>;
  migrate(target?: MigrateTarget): Promise<number>;
  dedupe(key: DedupeKey): Promise<DedupeResult>;
  /** Removes inbox rows older than olderThanSeconds by whole partitions (refused below inbox.retention_s); resolves with the count. */
  purgeInbox(olderThanSeconds: number | bigint, batch?: number): Promise<number>;
  /** The aggregates held after a handler's failure, oldest first; consumer null: every subscriber's. */
  parked(consumer?: string | null, options?: { includeRelay?: boolean; limit?: number }): Promise<ParkedAggregate[]>;
  /** Tries a held aggregate's head once more now, then its held events in order; resolves with 1 if it was held, else 0. */
  redrive(consumer: string | null, aggregateType: string | null, aggregateId: string | number): Promise<number>;
  /** Redrives every parked aggregate of the consumer; resolves with how many. */
  redriveAll(consumer: string): Promise<number>;
  /** The gauges an operator alerts on (parked, retrying, oldest parked age and lag per subscriber; the relay's), as Prometheus text for a /metrics of your own. */
  metricsText(): Promise<string>;
  /**
   * Skips a held aggregate's head, recorded with `by` and `reason`: its next held event is due now.
   * Resolves with the skipped event's id; NOT_FOUND when not held, or the head is not `eventId`.
   */
  skip(consumer: string, aggregateType: string | null, aggregateId: string | number,
    options: { by: string; reason?: string; eventId?: string | null }): Promise<string>;
  close(): Promise<void>;
}

/** An aggregate held after a handler's failure (outbox_parked_list). */
export interface ParkedAggregate {
  /** the subscriber; null for the relay's */
  consumer: string | null;
  source: 'consumer' | 'relay';
  aggregateType: string | null;
  aggregateId: string;
  /** retrying: attempts left; parked: waiting for redrive or skip; redriving: redriven, not yet tried */
  state: 'retrying' | 'redriving' | 'parked';
  attempts: number;
  headEventId: string;
  headEventType: string | null;
  headSeq: number;
  lastError: string | null;
  firstFailedAt: string | null;
  lastFailedAt: string | null;
  nextAttemptAt: string | null;
  /** events held behind the head */
  waiting: number;
  parkedAgeS: number;
}

/** What one relay step did. `claimed`, `claimUs` and `markUs` keep version 1's names: the events read, the time reading, the time recording outcomes. */
export interface RelayStats {
  claimed: number;
  published: number;
  failed: number;
  dead: number;
  heldBack: number;
  unroutable: number;
  nacked: number;
  unconfirmed: number;
  claimUs: number;
  publishUs: number;
  markUs: number;
  totalUs: number;
  blocked: boolean;
}

/**
 * Moves committed events to RabbitMQ with publisher confirms. Needs 'pg.url' and 'amqp.url'. One
 * relay per outbox table is active; the others stand by and take over when it stops.
 */
export class Relay {
  constructor(options: RuntimeOptions);
  readonly running: boolean;
  /** One round: read events, publish with confirms, record the outcomes (zeroes while standing by). */
  step(): Promise<RelayStats>;
  /** Runs until stop() (LISTEN/NOTIFY wake-ups, reconnects); resolves then. */
  run(): Promise<void>;
  stop(): void;
  close(): Promise<void>;
}

/** One delivered event. */
export class Message {
  private constructor();
  readonly id: string;
  readonly eventType: string;
  readonly aggregateType: string;
  readonly aggregateId: string;
  readonly operation: string | null;
  readonly user: string | null;
  readonly createdAt: string | null;
  readonly payloadText: string;
  readonly previousPayloadText: string | null;
  readonly metadataText: string | null;
  readonly seq: number;
  readonly redelivered: boolean;
  /** earlier deliveries (quorum queues), -1 when unknown */
  readonly deliveryCount: number;
  readonly routingKey: string | null;
  /** the raw body as published */
  readonly body: Buffer;
  order: Order;
  previousSeq: number;
  /** PAYLOAD parsed */
  readonly payload: any;
  /** The body parsed: the documents' envelope. */
  readonly envelope: {
    OUTBOX_ID: string;
    EVENT_TYPE: string;
    AGGREGATE_ID: string;
    AGGREGATE_TYPE: string;
    OPERATION: string;
    PAYLOAD: any;
    PREVIOUS_PAYLOAD?: any;
    METADATA: any;
    USER: string | null;
    CREATED_AT: string;
  };
  field(name: string): string | null;
  property(name: string): string | null;
  ack(): Promise<void>;
  nack(requeue?: boolean): Promise<void>;
  deadLetter(reason: string): Promise<void>;
  dedupe(target: Queryable | Database): Promise<DedupeResult>;
}

/**
 * A consume() handler: the event, and the client its transaction runs on (typed as options.client
 * when one is given; a Queryable for a pool's clients and the consumer's own).
 */
export type Handler<C extends Queryable = Queryable> = (message: Message, client: C) => unknown;

export interface ConsumeOptions<C extends Queryable = Queryable> {
  /** a node-postgres client to run each event's transaction on */
  client?: C;
  /** or a pool (pg.Pool) to take one from per event */
  pool?: { connect(): Promise<C & { release(err?: Error | boolean): void }> };
}

/** A consumer of its own durable queue on the exchange. Needs 'amqp.url'. */
export class Consumer implements AsyncIterable<Message> {
  constructor(name: string, options: RuntimeOptions);
  readonly name: string;
  readonly queue: string;
  connect(): Promise<void>;
  /** The next event, or null after timeoutMs. */
  next(timeoutMs?: number): Promise<Message | null>;
  [Symbol.asyncIterator](): AsyncIterator<Message>;
  /**
   * BEGIN, dedupe, handler, COMMIT, ack for each event until stop(); resolves then. A handler that
   * throws rolls back; its aggregate is held, retried with backoff and parked after
   * consumer.max_attempts (PermanentFailure: at once) until Database.redrive() or skip().
   */
  consume<C extends Queryable = Queryable>(handler: Handler<C>, options?: ConsumeOptions<C>): Promise<void>;
  dedupe(target: Queryable | Database, message: Message): Promise<DedupeResult>;
  stop(): void;
  close(): Promise<void>;
}

export function write(client: Queryable, event: OutboxEvent, options?: Options): Promise<WriteResult>;
export function renderWrite(event: OutboxEvent, options?: Options): RenderedWrite;
export function dedupe(client: Queryable, key: DedupeKey, options?: Options): Promise<DedupeResult>;
export function renderDedupe(key: DedupeKey, options?: Options): RenderedStatement;
export function connect(conninfo: string, options?: Options): Promise<Database>;
export function migrate(conninfo: string, options?: Options, target?: MigrateTarget): Promise<number>;

/** The 1:1 native layer (bindings/node): one function per C function, opaque handles. */
export const native: { readonly [fn: string]: any };
