<?php
declare(strict_types=1);

namespace Outbox;

use FFI;

/**
 * liboutbox through PHP's FFI: events are built, validated, named and rendered by the one C++
 * implementation; PHP runs the rendered statement with PDO inside its own transaction.
 */
final class Outbox
{
    private FFI $ffi;

    /** Loads liboutbox by Library's search (OUTBOX_LIB, ..., the install locations) unless given paths. */
    public function __construct(?string $library = null, ?string $header = null)
    {
        $this->ffi = Library::load($library, $header);
    }

    public function ffi(): FFI
    {
        return $this->ffi;
    }

    public function version(): string
    {
        return $this->ffi->outbox_version();
    }

    /** Throws OutboxException with the library's status name and message unless $status is OK. */
    public function check(int $status): void
    {
        if ($status !== 0) {
            throw new OutboxException($this->ffi->outbox_status_name($status), $this->ffi->outbox_last_error());
        }
    }

    /** A configuration handle from key => value options; freed by the library on destruction. */
    public function config(array $options = []): OutboxConfig
    {
        return new OutboxConfig($this, $options);
    }

    private static function json(mixed $value): string
    {
        if (is_string($value)) {
            return $value; // JSON text, validated by the library
        }
        if ($value === [] || $value === null) {
            return '{}';
        }
        return json_encode($value, JSON_THROW_ON_ERROR | JSON_UNESCAPED_UNICODE | JSON_UNESCAPED_SLASHES | JSON_PRESERVE_ZERO_FRACTION);
    }

    /**
     * Validates and renders the INSERT of one event: ['sql' => ..., 'params' => [...], 'event_id' => ...,
     * 'event_type' => ...]. Placeholders follow the config (render.placeholders=qmark for PDO).
     * Event keys: aggregate_type, aggregate_id, operation, payload, previous_payload, metadata, user,
     * event_type, idempotency_key, event_id; payload/metadata as arrays or JSON text.
     */
    public function renderWrite(OutboxConfig $config, array $event): array
    {
        $f = $this->ffi;
        $ev = $this->event($event);
        try {
            $st = $f->new('outbox_statement*');
            $this->check($f->outbox_render_write(FFI::addr($st), $config->handle(), $ev));
            try {
                $rendered = $this->statementArray($st);
                $rendered['event_id'] = $f->outbox_event_id($ev);
                $rendered['event_type'] = $f->outbox_event_type($ev);
                return $rendered;
            } finally {
                $f->outbox_statement_free($st);
            }
        } finally {
            $f->outbox_event_free($ev);
        }
    }

    /** An outbox_event from event keys (freed by the caller with outbox_event_free). */
    private function event(array $event): FFI\CData
    {
        $f = $this->ffi;
        $ev = $f->new('outbox_event*');
        $this->check($f->outbox_event_new(FFI::addr($ev)));
        try {
            foreach ($event as $field => $value) {
                if ($value === null) {
                    continue;
                }
                $text = in_array($field, ['payload', 'previous_payload', 'metadata'], true) ? self::json($value) : (string)$value;
                // With an explicit length, so a NUL inside a PHP string is rejected, not cut short.
                $this->check($f->outbox_event_set_n($ev, (string)$field, $text, strlen($text)));
            }
        } catch (\Throwable $e) {
            $f->outbox_event_free($ev);
            throw $e;
        }
        return $ev;
    }

    /**
     * Writes one event on $pdo, in its current transaction (the library never begins, commits or
     * rolls back): the library's write plan (outbox_write_plan_*), each statement it hands out run
     * on PDO. A reused idempotency_key throws OutboxException DUPLICATE naming the event that holds
     * it and, inside a transaction, leaves the transaction usable (a savepoint). Returns
     * ['event_id' => ..., 'event_type' => ..., 'seq' => int]. Event keys as for renderWrite().
     */
    public function write(\PDO $pdo, OutboxConfig $config, array $event): array
    {
        $f = $this->ffi;
        $driver = new PdoDriver($f);
        $ev = $this->event($event);
        $plan = $f->new('outbox_write_plan*');
        try {
            $tx = $pdo->inTransaction() ? $f->OUTBOX_TX_INTRANS : $f->OUTBOX_TX_IDLE;
            $this->check($f->outbox_write_plan_new(FFI::addr($plan), $config->handle(), $ev, $tx, 'qmark'));
            $step = $f->new('int');
            while (($st = $f->outbox_write_plan_next($plan, FFI::addr($step))) !== null) {
                try {
                    $row = $driver->fetch($pdo, $st);
                } catch (\PDOException $e) {
                    [$state, $message] = PdoDriver::failure($e);
                    $this->check($f->outbox_write_plan_failed($plan, $state, null, $message, 0));
                    continue;
                }
                $this->check($driver->withRow($row, fn($values, int $n): int => $f->outbox_write_plan_done($plan, $values, $n)));
            }
            $this->check($f->outbox_write_plan_result($plan));
            return ['event_id' => $f->outbox_event_id($ev), 'event_type' => $f->outbox_event_type($ev),
                'seq' => (int)$f->outbox_event_seq($ev)];
        } finally {
            $f->outbox_write_plan_free($plan);
            $f->outbox_event_free($ev);
        }
    }

    /** The dedupe statement for a received event (see outbox_render_dedupe). */
    public function renderDedupe(OutboxConfig $config, string $consumer, string $eventId, ?string $aggregateType,
                                 ?string $aggregateId, int $seq): array
    {
        $f = $this->ffi;
        $st = $f->new('outbox_statement*');
        $this->check($f->outbox_render_dedupe(FFI::addr($st), $config->handle(), $consumer, $eventId, $aggregateType,
            $aggregateId, $seq));
        try {
            return $this->statementArray($st);
        } finally {
            $f->outbox_statement_free($st);
        }
    }

    /** Reads a statement through outbox_statement_json; the owned string goes back to the library's free. */
    private function statementArray(FFI\CData $st): array
    {
        $f = $this->ffi;
        $out = $f->new('char*');
        $this->check($f->outbox_statement_json(FFI::addr($out), $st));
        try {
            $json = FFI::string($out);
        } finally {
            $f->outbox_string_free($out);
        }
        return json_decode($json, true, 512, JSON_THROW_ON_ERROR);
    }
}
