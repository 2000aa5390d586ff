<?php
// liboutbox through PHP's FFI: events are built, validated, named and rendered by the one C++
// implementation; PHP runs the rendered statement with PDO inside its own transaction.
declare(strict_types=1);

final class OutboxException extends RuntimeException
{
    public function __construct(public readonly string $status, string $message)
    {
        parent::__construct($status . ': ' . $message);
    }
}

final class Outbox
{
    private FFI $ffi;

    public function __construct(?string $library = null, ?string $header = null)
    {
        $root = dirname(__DIR__, 2);
        $library ??= getenv('OUTBOX_LIB') ?: $root . '/_install/lib/liboutbox.so';
        $header ??= getenv('OUTBOX_FFI_HEADER') ?: dirname($library, 2) . '/share/outbox/outbox_ffi.h';
        $this->ffi = FFI::cdef((string)file_get_contents($header), $library);
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

final class OutboxConfig
{
    private FFI\CData $cfg;

    public function __construct(private Outbox $outbox, array $options)
    {
        $f = $outbox->ffi();
        $this->cfg = $f->new('outbox_config*');
        $outbox->check($f->outbox_config_new(FFI::addr($this->cfg)));
        foreach ($options as $key => $value) {
            $outbox->check($f->outbox_config_set($this->cfg, (string)$key, is_bool($value) ? ($value ? 'true' : 'false') : (string)$value));
        }
    }

    public function handle(): FFI\CData
    {
        return $this->cfg;
    }

    public function __destruct()
    {
        $this->outbox->ffi()->outbox_config_free($this->cfg);
    }
}

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
        if ($status === -8) { // OUTBOX_ERR_TIMEOUT
            return null;
        }
        $this->outbox->check($status);
        $fields = [];
        foreach (['OUTBOX_ID', 'EVENT_TYPE', 'AGGREGATE_ID', 'AGGREGATE_TYPE', 'OPERATION', 'PAYLOAD', 'PREVIOUS_PAYLOAD', 'METADATA', 'USER', 'CREATED_AT'] as $name) {
            $fields[$name] = $this->f->outbox_message_field($msg, $name);
        }
        return ['message' => $msg, 'fields' => $fields, 'seq' => (int)$this->f->outbox_message_seq($msg),
            'delivery_count' => (int)$this->f->outbox_message_delivery_count($msg)];
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

    public function __destruct()
    {
        $this->f->outbox_consumer_free($this->consumer);
    }
}

/** A PDO connection from a postgresql:// URL (OUTBOX_PG_URL). */
function outbox_pdo(string $url): PDO
{
    $p = parse_url($url);
    $dsn = sprintf('pgsql:host=%s;port=%d;dbname=%s', $p['host'] ?? '127.0.0.1', $p['port'] ?? 5432, ltrim($p['path'] ?? '/postgres', '/'));
    return new PDO($dsn, isset($p['user']) ? urldecode($p['user']) : null, isset($p['pass']) ? urldecode($p['pass']) : null,
        [PDO::ATTR_ERRMODE => PDO::ERRMODE_EXCEPTION]);
}
