<?php
// A PHP subscriber (audit-logger style) on the consumer runtime through FFI: each event's
// effect and its inbox (dedupe) row are written in one PDO transaction, then the message is
// acked; a redelivered event is recognised and skipped.
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
    $config = $outbox->config($options);
    $consumer = new OutboxConsumer($outbox, $config, $name);
    $consumer->connect();
    $pdo->exec('CREATE TABLE IF NOT EXISTS audit_log (outbox_id uuid NOT NULL, consumer text NOT NULL, event_type text NOT NULL,'
        . ' aggregate text NOT NULL, logged_at timestamptz NOT NULL DEFAULT now())');
    $stats = ['processed' => 0, 'duplicates' => 0];
    $idleSince = microtime(true);
    while ($count <= 0 || $stats['processed'] + $stats['duplicates'] < $count) {
        $event = $consumer->next(200);
        if ($event === null) {
            if ($idleMs > 0 && (microtime(true) - $idleSince) * 1000 > $idleMs) {
                break;
            }
            continue;
        }
        $idleSince = microtime(true);
        $f = $event['fields'];
        $pdo->beginTransaction();
        try {
            $dedupe = $outbox->renderDedupe($config, $name, $f['OUTBOX_ID'], $f['AGGREGATE_TYPE'], $f['AGGREGATE_ID'], $event['seq']);
            $q = $pdo->prepare($dedupe['sql']);
            $q->execute($dedupe['params']);
            $firstTime = (bool)$q->fetchColumn(0);
            if ($firstTime) {
                $pdo->prepare('INSERT INTO audit_log (outbox_id, consumer, event_type, aggregate) VALUES (?, ?, ?, ?)')
                    ->execute([$f['OUTBOX_ID'], $name, $f['EVENT_TYPE'], $f['AGGREGATE_TYPE'] . ':' . $f['AGGREGATE_ID']]);
            }
            $pdo->commit();
        } catch (\Throwable $e) {
            $pdo->rollBack();
            $consumer->nack($event, true);
            throw $e;
        }
        $consumer->ack($event);
        $stats[$firstTime ? 'processed' : 'duplicates']++;
        printf("[php %s] %s %s:%s %s\n", $name, $f['EVENT_TYPE'], $f['AGGREGATE_TYPE'], $f['AGGREGATE_ID'],
            $firstTime ? 'logged' : 'already processed, skipped');
    }
    return $stats;
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
