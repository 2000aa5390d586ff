<?php
declare(strict_types=1);

namespace Outbox;

/**
 * Thrown by an OutboxConsumer::run() handler for an event that can never succeed: its aggregate is
 * parked at once, with no retries (any other exception is transient: retried with backoff, then parked).
 */
class PermanentFailure extends \RuntimeException
{
}
