<?php
// A PHP subscriber (audit-logger style) on the library's consumer loop through FFI: each event's
// effect and its inbox (dedupe) row are written in one PDO transaction, then the message is
// acked; a redelivered event is recognised and skipped without calling the handler.
//   php subscriber.php [consumer-name] [count]
declare(strict_types=1);

// The outbox package (php/): Composer's autoloader when the application loaded one (vendor/autoload.php),
// else the package's own autoloader from this checkout.
if (!class_exists(Outbox\Outbox::class)) {
    require_once __DIR__ . '/../../php/autoload.php';
}

use Outbox\Outbox;
use Outbox\OutboxConsumer;
use Outbox\PgUrl;

function run_subscriber(Outbox $outbox, PDO $pdo, array $options, string $name, int $count, int $idleMs = 0): array
{
    $consumer = new OutboxConsumer($outbox, $outbox->config($options), $name);
    $consumer->connect();
    $pdo->exec('CREATE TABLE IF NOT EXISTS audit_log (outbox_id uuid NOT NULL, consumer text NOT NULL, event_type text NOT NULL,'
        . ' aggregate text NOT NULL, logged_at timestamptz NOT NULL DEFAULT now())');
    // The library's loop: BEGIN, the inbox row, this handler (first time only), COMMIT, ack.
    $handled = $consumer->run(function (array $event, PDO $pdo) use ($name): void {
        $f = $event['fields'];
        $pdo->prepare('INSERT INTO audit_log (outbox_id, consumer, event_type, aggregate) VALUES (?, ?, ?, ?)')
            ->execute([$f['OUTBOX_ID'], $name, $f['EVENT_TYPE'], $f['AGGREGATE_TYPE'] . ':' . $f['AGGREGATE_ID']]);
        printf("[php %s] %s %s:%s logged\n", $name, $f['EVENT_TYPE'], $f['AGGREGATE_TYPE'], $f['AGGREGATE_ID']);
    }, $pdo, $count > 0 ? $count : null, $idleMs > 0 ? $idleMs / 1000 : null);
    return ['processed' => $handled];
}

if (PHP_SAPI === 'cli' && realpath($argv[0] ?? '') === __FILE__) {
    $pdo = PgUrl::pdo(getenv('OUTBOX_PG_URL') ?: 'postgresql://outbox:outbox@127.0.0.1:54329/outbox');
    $options = ['amqp.url' => getenv('OUTBOX_AMQP_URL') ?: 'amqp://outbox:outbox@127.0.0.1:56729/%2f', 'render.placeholders' => 'qmark'];
    if ($schema = getenv('OUTBOX_SCHEMA')) {
        $options['outbox.schema'] = $schema;
        $pdo->exec('SET search_path TO ' . $pdo->quote($schema));
    }
    run_subscriber(new Outbox(), $pdo, $options, $argv[1] ?? 'audit-logger', (int)($argv[2] ?? 0));
}
