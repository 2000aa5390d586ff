<?php
declare(strict_types=1);

namespace Outbox;

/**
 * liboutbox could not be loaded: FFI is missing or disabled for this request, or the library or its
 * header was not found (the message lists every place searched).
 */
final class LoadException extends \RuntimeException
{
}
