<?php
declare(strict_types=1);

namespace Outbox;

use FFI;

/**
 * Parked aggregates, for operators (outbox_parked_*): with consumer.on_failure=park (the default) a
 * handler's failure holds the event's aggregate in PostgreSQL, its later events waiting behind it;
 * it is retried with backoff and parked after consumer.max_attempts (at once for PermanentFailure)
 * until it is redriven or its head skipped. A connection of its own to $pgUrl, closed on destruction.
 */
final class OutboxParked
{
    private FFI\CData $db;
    private FFI $f;

    public function __construct(private Outbox $outbox, string $pgUrl, ?OutboxConfig $config = null)
    {
        $this->f = $outbox->ffi();
        $this->db = $this->f->new('outbox_db*');
        $outbox->check($this->f->outbox_db_open(FFI::addr($this->db), $pgUrl, $config?->handle()));
    }

    /**
     * The held aggregates of $consumer (null: every subscriber; $includeRelay: the relay's too), oldest
     * failure first, as arrays: consumer, source, aggregate_type, aggregate_id, state (retrying,
     * redriving, parked), attempts, head_event_id, head_seq, last_error, waiting, parked_age_s, ...
     */
    public function list(?string $consumer = null, bool $includeRelay = true, int $limit = 100): array
    {
        return $this->json(fn(FFI\CData $out): int =>
            $this->f->outbox_parked_list($out, $this->db, $consumer, $includeRelay ? 1 : 0, $limit));
    }

    /** Per subscriber: parked, retrying, oldest_parked_age_s, lag_s; the relay's (consumer null): oldest_unpublished_age_s. */
    public function summary(): array
    {
        return $this->json(fn(FFI\CData $out): int => $this->f->outbox_parked_summary($out, $this->db));
    }

    /** The gauges an operator alerts on, as Prometheus text for a /metrics of your own (outbox_metrics_text). */
    public function metricsText(): string
    {
        $out = $this->f->new('char*');
        $this->outbox->check($this->f->outbox_metrics_text(FFI::addr($out), $this->db));
        return $this->owned($out);
    }

    /** Tries a held aggregate's head once more now, then its held events in order; 1 when it was held, else 0. */
    public function redrive(?string $consumer, ?string $aggregateType, string $aggregateId): int
    {
        $n = $this->f->new('int64_t');
        $this->outbox->check($this->f->outbox_parked_redrive(FFI::addr($n), $this->db, $consumer, $aggregateType,
            $aggregateId));
        return (int)$n->cdata;
    }

    /** Redrives every parked aggregate of $consumer; returns how many. */
    public function redriveAll(string $consumer): int
    {
        $n = $this->f->new('int64_t');
        $this->outbox->check($this->f->outbox_parked_redrive_all(FFI::addr($n), $this->db, $consumer));
        return (int)$n->cdata;
    }

    /**
     * Skips a held aggregate's head, recorded with $by and $reason: its next held event is due now.
     * Returns the skipped event's id; OutboxException NOT_FOUND when the aggregate is not held, or
     * its head is not $eventId (when given).
     */
    public function skip(string $consumer, ?string $aggregateType, string $aggregateId, string $by, string $reason = '',
                         ?string $eventId = null): string
    {
        $out = $this->f->new('char*');
        $this->outbox->check($this->f->outbox_parked_skip(FFI::addr($out), $this->db, $consumer, $aggregateType,
            $aggregateId, $eventId, $by, $reason));
        return $this->owned($out);
    }

    /** Calls $call with a char** for the library's JSON text; the text decoded. */
    private function json(callable $call): array
    {
        $out = $this->f->new('char*');
        $this->outbox->check($call(FFI::addr($out)));
        return json_decode($this->owned($out), true, 512, JSON_THROW_ON_ERROR);
    }

    /** A string the library allocated, copied, then freed by the library. */
    private function owned(FFI\CData $s): string
    {
        try {
            return FFI::string($s);
        } finally {
            $this->f->outbox_string_free($s);
        }
    }

    public function __destruct()
    {
        $this->f->outbox_db_close($this->db);
    }
}
