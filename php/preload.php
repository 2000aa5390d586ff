<?php
// opcache.preload script for FPM/CGI (ffi.enable=preload, PHP's default): loads liboutbox once at
// server start so every request's `new Outbox\Outbox()` takes it with FFI::scope('OUTBOX').
//   opcache.preload=/path/to/vendor/outbox/outbox/preload.php
//   opcache.preload_user=www-data      (the user FPM runs as; needed when the master runs as root)
// The library is found by Outbox\Library's search, in the server's environment (OUTBOX_LIB ...).
declare(strict_types=1);

require_once __DIR__ . '/autoload.php';

Outbox\Library::preload();
