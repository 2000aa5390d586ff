<?php
declare(strict_types=1);

namespace Outbox;

/** A call into liboutbox failed: $status is the library's status name (INVALID_EVENT, DATABASE, ...). */
final class OutboxException extends \RuntimeException
{
    public function __construct(public readonly string $status, string $message)
    {
        parent::__construct($status . ': ' . $message);
    }
}
