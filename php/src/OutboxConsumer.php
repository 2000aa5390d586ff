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
