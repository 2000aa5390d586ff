<?php
// opcache.preload script for FPM/CGI under ffi.enable=preload (PHP's default). That mode lets only
// preloaded code call FFI, so this compiles every class of the package into the preload; and unless
// php.ini's ffi.preload already loads the scope header (bin/outbox-ffi-header; needed when the
// master runs as root, since PHP refuses FFI::load under opcache.preload_user), it loads liboutbox
// once with FFI::load. Every request's `new Outbox\Outbox()` then takes FFI::scope('OUTBOX').
//   opcache.preload=/path/to/vendor/outbox/outbox/preload.php
// The library is found by Outbox\Library's search, in the server's environment (OUTBOX_LIB ...).
declare(strict_types=1);

foreach (glob(__DIR__ . '/src/*.php') as $file) {
    require_once $file;
}
if ((string)ini_get('ffi.preload') === '') {
    Outbox\Library::preload();
}
