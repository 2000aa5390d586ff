<?php
declare(strict_types=1);

namespace Outbox;

use FFI;

/** The consumer runtime: its own durable queue on the exchange, one event at a time. */
final class OutboxConsumer
{
    private FFI\CData $consumer;
    private FFI $f;

    public function __construct(private Outbox $outbox, OutboxConfig $config, public readonly string $name)
    {
        $this->f = $outbox->ffi();
        $this->consumer = $this->f->new('outbox_consumer*');
        $outbox->check($this->f->outbox_consumer_new(FFI::addr($this->consumer), $config->handle(), $name));
    }

    public function connect(): void
    {
        $this->outbox->check($this->f->outbox_consumer_connect($this->consumer));
    }

    /** The next event as ['message' => handle, 'fields' => [...], 'seq' => int], or null after $timeoutMs. */
    public function next(int $timeoutMs): ?array
    {
        $msg = $this->f->new('outbox_message*');
        $status = $this->f->outbox_consumer_next(FFI::addr($msg), $this->consumer, $timeoutMs);
        if ($status === $this->f->OUTBOX_ERR_TIMEOUT) {
            return null;
        }
        $this->outbox->check($status);
        return ['message' => $msg] + $this->eventOf($msg);
    }

    public function ack(array $event): void
    {
        $this->outbox->check($this->f->outbox_consumer_ack($this->consumer, $event['message']));
        $this->f->outbox_message_free($event['message']);
    }

    public function nack(array $event, bool $requeue): void
    {
        $this->outbox->check($this->f->outbox_consumer_nack($this->consumer, $event['message'], $requeue ? 1 : 0));
        $this->f->outbox_message_free($event['message']);
    }

    public function deadLetter(array $event, string $reason): void
    {
        $this->outbox->check($this->f->outbox_consumer_dead_letter($this->consumer, $event['message'], $reason));
        $this->f->outbox_message_free($event['message']);
    }

    /**
     * Handles events with an exactly-once effect until stop, $limit events or $idleTimeout seconds
     * without one: the library's consumer loop (outbox_loop_*), the same as in C, Python and Node.
     * For each event, on $pdo: BEGIN, the inbox row (a redelivered, already processed event is
     * acknowledged without calling the handler), $handler($event, $pdo), COMMIT, then ack. A handler
     * that throws rolls back; its aggregate is held (its later events wait behind it), retried with
     * backoff and parked after consumer.max_attempts, at once for PermanentFailure, until an operator
     * redrives or skips it (OutboxParked); with consumer.on_failure=requeue the message is redelivered
     * and dead-lettered after consumer.delivery_limit. Lost broker connections are reopened with backoff; a lost
     * $pdo ends the run with OutboxException CONNECTION (the message is redelivered, uncounted).
     * $event is ['fields' => [...], 'seq' => int, 'delivery_count' => int]. Returns the events handled.
     */
    public function run(callable $handler, \PDO $pdo, ?int $limit = null, ?float $idleTimeout = null): int
    {
        $f = $this->f;
        $o = $f->new('outbox_loop_options');
        $o->size = FFI::sizeof($o);
        $o->connection = $f->OUTBOX_LOOP_DRIVER_LENT;
        $o->idle_timeout_ms = $idleTimeout === null ? -1 : max(0, (int)($idleTimeout * 1000));
        $o->limit = $limit ?? 0;
        $o->slice_ms = 200;
        $style = (new PdoDriver($f))->cString('qmark'); // PDO's placeholders
        $o->placeholders = FFI::cast('char*', FFI::addr($style[0]));
        $loop = $f->new('outbox_loop*');
        $this->outbox->check($f->outbox_loop_new(FFI::addr($loop), $this->consumer, null, FFI::addr($o)));
        try {
            return $this->drive($loop, $handler, $pdo);
        } finally {
            $f->outbox_loop_free($loop);
        }
    }

    private function drive(FFI\CData $loop, callable $handler, \PDO $pdo): int
    {
        $f = $this->f;
        while (true) {
            $action = $f->outbox_loop_next($loop);
            if ($action === $f->OUTBOX_LOOP_BLOCK) {
                $this->outbox->check($f->outbox_loop_block($loop));
            } elseif ($action === $f->OUTBOX_LOOP_EXEC) {
                $this->exec($loop, $pdo);
            } elseif ($action === $f->OUTBOX_LOOP_HANDLE) {
                $this->handle($loop, $handler, $pdo);
            } elseif ($action === $f->OUTBOX_LOOP_WAIT) {
                usleep(1000 * $f->outbox_loop_wait_ms($loop));
                $this->outbox->check($f->outbox_loop_waited($loop));
            } else {
                $handled = $f->new('int64_t');
                $this->outbox->check($f->outbox_loop_result($loop, FFI::addr($handled)));
                return (int)$handled->cdata;
            }
        }
    }

    /** Runs the statement the loop hands out on $pdo and reports how it went. */
    private function exec(FFI\CData $loop, \PDO $pdo): void
    {
        $f = $this->f;
        $driver = new PdoDriver($f);
        $kind = $f->new('int');
        $st = $f->outbox_loop_statement($loop, FFI::addr($kind));
        try {
            $row = null;
            $k = $kind->cdata;
            if ($k === $f->OUTBOX_LOOP_SQL_BEGIN) {
                $pdo->beginTransaction();
            } elseif ($k === $f->OUTBOX_LOOP_SQL_COMMIT) {
                $pdo->commit();
            } elseif ($k === $f->OUTBOX_LOOP_SQL_ROLLBACK) {
                if ($pdo->inTransaction()) {
                    $pdo->rollBack();
                }
            } else {
                $row = $driver->fetch($pdo, $st);
            }
        } catch (\PDOException $e) {
            [$state, $message] = PdoDriver::failure($e);
            $this->outbox->check($f->outbox_loop_exec_failed($loop, $state, $message, 0));
            return;
        }
        $this->outbox->check($driver->withRow($row, fn($values, int $n): int => $f->outbox_loop_exec_done($loop, $values, $n)));
    }

    private function handle(FFI\CData $loop, callable $handler, \PDO $pdo): void
    {
        $f = $this->f;
        $event = $this->eventOf($f->outbox_loop_message($loop));
        try {
            $handler($event, $pdo);
        } catch (\Throwable $e) {
            $result = $e instanceof PermanentFailure ? $f->OUTBOX_HANDLER_PERMANENT : $f->OUTBOX_HANDLER_FAILED;
            $this->outbox->check($f->outbox_loop_handler_done($loop, $result, get_class($e) . ': ' . $e->getMessage()));
            return;
        }
        $this->outbox->check($f->outbox_loop_handler_done($loop, $f->OUTBOX_HANDLER_OK, null));
    }

    /** Asks run() to return after the event in hand; safe from a signal handler. */
    public function stop(): void
    {
        $this->f->outbox_consumer_stop($this->consumer);
    }

    /** The envelope's field names, from the library (outbox_envelope_field). */
    private function envelopeNames(): array
    {
        static $names = null;
        if ($names === null) {
            $names = [];
            $name = $this->f->new('const char*');
            for ($i = 0; $this->f->outbox_envelope_field(FFI::addr($name), null, $i) === $this->f->OUTBOX_OK; $i++) {
                $names[] = FFI::string($name);
            }
        }
        return $names;
    }

    private function eventOf(FFI\CData $msg): array
    {
        $fields = [];
        foreach ($this->envelopeNames() as $name) {
            $fields[$name] = $this->f->outbox_message_field($msg, $name);
        }
        return ['fields' => $fields, 'seq' => (int)$this->f->outbox_message_seq($msg),
            'delivery_count' => (int)$this->f->outbox_message_delivery_count($msg)];
    }

    public function __destruct()
    {
        $this->f->outbox_consumer_free($this->consumer);
    }
}
