<?php
// The package's classes without Composer (from a checkout): require this file instead of
// vendor/autoload.php. Same PSR-4 mapping as composer.json: Outbox\X is src/X.php.
declare(strict_types=1);

spl_autoload_register(static function (string $class): void {
    if (str_starts_with($class, 'Outbox\\')) {
        $file = __DIR__ . '/src/' . str_replace('\\', '/', substr($class, 7)) . '.php';
        if (is_file($file)) {
            require $file;
        }
    }
});
