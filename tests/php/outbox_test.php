<?php
// The PHP path end to end against real PostgreSQL and RabbitMQ: the documents' DataStore::insert
// (PDO transaction + event rendered by liboutbox through FFI), the relay, and a PHP subscriber
// with dedupe. Prints one line per check and "N passed, N failed"; exits non-zero on failure.
declare(strict_types=1);

require_once __DIR__ . '/../../php/autoload.php'; // the package (php/), as the examples load it
require_once __DIR__ . '/../../examples/php/DataStore.php';
require_once __DIR__ . '/../../examples/php/subscriber.php';

use Outbox\Library;
use Outbox\LoadException;
use Outbox\Outbox;
use Outbox\OutboxConsumer;
use Outbox\OutboxException;
use Outbox\OutboxParked;
use Outbox\PermanentFailure;
use Outbox\PgUrl;

$passed = 0;
$failed = 0;
function check(string $name, bool $ok, string $detail = ''): void
{
    global $passed, $failed;
    if ($ok) {
        $passed++;
        echo "  ok    $name\n";
    } else {
        $failed++;
        echo "  FAIL  $name" . ($detail !== '' ? ": $detail" : '') . "\n";
    }
}

$pgUrl = getenv('OUTBOX_PG_URL') ?: 'postgresql://outbox:outbox@127.0.0.1:54329/outbox';
$amqpUrl = getenv('OUTBOX_AMQP_URL') ?: 'amqp://outbox:outbox@127.0.0.1:56729/%2f';
$suffix = bin2hex(random_bytes(4));
$schema = "php_$suffix";
$exchange = "test.php.$suffix";

$outbox = new Outbox();
check('library loads through FFI', preg_match('/^\d+\.\d+\.\d+$/', $outbox->version()) === 1, $outbox->version());

// The search: OUTBOX_LIB wins, and a set but missing path is an error naming it, never skipped.
$found = Library::findLibrary();
$expected = getenv('OUTBOX_LIB') ?: dirname(__DIR__, 2) . '/_install/lib/liboutbox.so.0';
check('the search finds the library (OUTBOX_LIB, else _install/lib/liboutbox.so.0)', $found === $expected, $found);
$originalLib = getenv('OUTBOX_LIB');
putenv('OUTBOX_LIB=/nonexistent/liboutbox.so.0');
try {
    new Outbox();
    check('a missing OUTBOX_LIB raises', false, 'loaded');
} catch (LoadException $e) {
    check('a missing OUTBOX_LIB raises LoadException naming it', str_contains($e->getMessage(), 'OUTBOX_LIB names /nonexistent/liboutbox.so.0'), $e->getMessage());
}
putenv($originalLib === false ? 'OUTBOX_LIB' : "OUTBOX_LIB=$originalLib");

$pdo = PgUrl::pdo($pgUrl); // fails the run (uncaught) when PostgreSQL is unreachable
$pdo->exec("CREATE SCHEMA $schema");
$pdo->exec("SET search_path TO $schema");
// The brokers as a list whose first node is down (a port that was just free: connecting is
// refused), as with a cluster: every RabbitMQ connection below goes on to the live one.
$probePort = stream_socket_server('tcp://127.0.0.1:0');
$deadPort = (int) substr(strrchr(stream_socket_get_name($probePort, false), ':'), 1);
fclose($probePort);
$brokers = "amqp://outbox:x@127.0.0.1:$deadPort/%2f,$amqpUrl";
$base = ['outbox.schema' => $schema, 'amqp.exchange' => $exchange, 'amqp.url' => $brokers, 'pg.url' => $pgUrl];

// Tables through the C ABI.
$f = $outbox->ffi();
$cfg = $outbox->config($base);
$db = $f->new('outbox_db*');
$outbox->check($f->outbox_db_open(FFI::addr($db), $pgUrl, $cfg->handle()));
$outbox->check($f->outbox_migrate(null, $db, 0));

// A subscriber queue first, so the relay's messages are routable.
$subscriberOptions = $base + ['render.placeholders' => 'qmark'];
$probe = new OutboxConsumer($outbox, $outbox->config($subscriberOptions), "php-audit-$suffix");
$probe->connect();
unset($probe);

$store = new DataStore($pdo, $outbox, $base);
$relayStep = function () use ($f, $outbox, $cfg): array {
    $relay = $f->new('outbox_relay*');
    $outbox->check($f->outbox_relay_new(FFI::addr($relay), $cfg->handle()));
    $stats = $f->new('outbox_relay_stats');
    $stats->size = FFI::sizeof($stats);
    try {
        $outbox->check($f->outbox_relay_step($relay, FFI::addr($stats)));
    } finally {
        $f->outbox_relay_free($relay);
    }
    return ['claimed' => (int)$stats->claimed, 'published' => (int)$stats->published];
};

// 1. Commit publishes.
$r = $store->insert('PRD', ['XPRD01' => 'Widget Pro', 'XPRD02' => 99.99, 'TREC' => 'N']);
check('insert returns success with a ProductCreated event', $r['status'] === 'success' && $r['event_type'] === 'ProductCreated', json_encode($r));
$row = $pdo->query("SELECT event_type, aggregate_id, status, payload::text FROM $schema.outbox")->fetch(PDO::FETCH_ASSOC);
check('event row committed with the record', $row !== false && $row['aggregate_id'] === $r['id'] && $row['status'] === 'PENDING', json_encode($row));
check('payload carries the record', $row !== false && json_decode($row['payload'], true)['XPRD01'] === 'Widget Pro');

// 2. Rollback publishes nothing.
$before = (int)$pdo->query("SELECT count(*) FROM $schema.tb_anag_records")->fetchColumn();
try {
    $store->insert('PRD', ['XPRD01' => 'Never', '__fail_cascade' => true]);
    check('failing cascade throws', false);
} catch (RuntimeException $e) {
    check('failing cascade throws', str_contains($e->getMessage(), 'cascade failed'));
}
check('rollback leaves neither record nor event',
    (int)$pdo->query("SELECT count(*) FROM $schema.tb_anag_records")->fetchColumn() === $before
    && (int)$pdo->query("SELECT count(*) FROM $schema.outbox")->fetchColumn() === 1);

$stats = $relayStep();
check('relay publishes exactly the committed event', $stats['claimed'] === 1 && $stats['published'] === 1, json_encode($stats));

// 3. A PHP subscriber with dedupe receives it once, and skips a redelivery.
$got = run_subscriber($outbox, $pdo, $subscriberOptions, "php-audit-$suffix", 1);
check('subscriber processed the event', $got['processed'] === 1, json_encode($got));
// As after a relay crash before its receipt was recorded: the relay's progress forgotten.
$pdo->exec("DELETE FROM $schema.outbox_receipts");
$pdo->exec("UPDATE $schema.outbox_relay SET cursor = 0");
$stats = $relayStep();
check('relay published it again', $stats['published'] === 1, json_encode($stats));
$got = run_subscriber($outbox, $pdo, $subscriberOptions, "php-audit-$suffix", 0, 2000);
check('redelivery recognised as a duplicate (the handler does not run)', $got['processed'] === 0, json_encode($got));
check('effect applied exactly once', (int)$pdo->query("SELECT count(*) FROM $schema.audit_log")->fetchColumn() === 1);
$rollbackEmpty = run_subscriber($outbox, $pdo, $subscriberOptions, "php-audit-$suffix", 1, 500);
check('nothing from the rolled-back insert ever arrives, the duplicate was acknowledged', $rollbackEmpty['processed'] === 0);

// 3b. The library's loop from PHP, consumer.on_failure=requeue: a failing handler is retried up to
// consumer.delivery_limit, then dead-lettered; a lost connection under the handler is no attempt
// (the message comes back).
$loopName = "php-loop-$suffix";
$loopOptions = $subscriberOptions + ['consumer.delivery_limit' => '2', 'consumer.on_failure' => 'requeue'];
$loopConsumer = new OutboxConsumer($outbox, $outbox->config($loopOptions), $loopName);
$loopConsumer->connect();
$store->insert('PRD', ['XPRD01' => 'Poison', 'XPRD02' => 1, 'TREC' => 'N']);
$relayStep();
$calls = 0;
$handled = $loopConsumer->run(function (array $event, PDO $pdo) use (&$calls): void {
    $calls++;
    throw new RuntimeException('the handler says no');
}, $pdo, null, 2.0);
check('a failing handler runs consumer.delivery_limit times, then the event is dead-lettered', $calls === 2 && $handled === 0, "calls $calls, handled $handled");
$dead = $loopConsumer->next(0); // nothing left in the queue: it went to the dead-letter queue
check('the dead-lettered event is not redelivered', $dead === null);
$store->insert('PRD', ['XPRD01' => 'Flaky', 'XPRD02' => 2, 'TREC' => 'N']);
$relayStep();
$lostPdo = PgUrl::pdo($pgUrl);
$lostPdo->exec("SET search_path TO $schema");
try {
    $loopConsumer->run(function (array $event, PDO $conn) use ($pdo): void {
        $pid = (int)$conn->query('SELECT pg_backend_pid()')->fetchColumn();
        $pdo->query("SELECT pg_terminate_backend($pid)");
        $conn->query('SELECT 1');
    }, $lostPdo, 1);
    check('a lost connection under the handler ends the run', false, 'returned');
} catch (OutboxException $e) {
    check('a lost connection under the handler ends the run with CONNECTION', $e->status === 'CONNECTION', $e->getMessage());
}
$calls = 0;
$handled = $loopConsumer->run(function (array $event, PDO $pdo) use (&$calls): void {
    if (++$calls === 1) {
        throw new RuntimeException('transient');
    }
}, $pdo, 1, 10.0);
check('the lost connection was no attempt: one real failure, then handled', $handled === 1 && $calls === 2, "calls $calls, handled $handled");
unset($loopConsumer);

// 3d. consumer.on_failure=park (the default): a transient failure (aggregate a) is retried, then
// parked after consumer.max_attempts; a PermanentFailure (b) is parked at once; their later events
// wait behind the head while c flows. Redrive after the fix applies a's held events in order; skip
// lets b's next event through.
$parkName = "php-park-$suffix";
$parkOptions = $subscriberOptions + ['consumer.max_attempts' => '2', 'consumer.retry_initial_ms' => '20',
    'consumer.retry_poll_ms' => '20'];
$pdo->exec('CREATE TABLE park_applied (n bigserial PRIMARY KEY, aggregate_id text NOT NULL, seq bigint NOT NULL)');
$parkConsumer = new OutboxConsumer($outbox, $outbox->config($parkOptions), $parkName);
$parkConsumer->connect();
$parkIds = [];
foreach (['a', 'b', 'c'] as $agg) {
    foreach ([1, 2] as $i) {
        $w = $outbox->write($pdo, $wpcfgPark ??= $outbox->config($base), ['aggregate_type' => 'PARK',
            'aggregate_id' => $agg, 'operation' => 'PUT', 'payload' => ['i' => $i]]);
        $parkIds["$agg$i"] = $w['event_id'];
    }
}
$relayStep();
$broken = ['a' => true];
$calls = ['a' => 0, 'b' => 0, 'c' => 0];
$parkHandler = function (array $event, PDO $conn) use (&$broken, &$calls): void {
    $agg = $event['fields']['AGGREGATE_ID'];
    $calls[$agg]++;
    if ($agg === 'a' && $broken['a']) {
        throw new RuntimeException('the ledger is down');
    }
    if ($agg === 'b' && $event['seq'] === 1) { // this event can never succeed; b's later ones can
        throw new PermanentFailure('the order is malformed');
    }
    $conn->prepare('INSERT INTO park_applied (aggregate_id, seq) VALUES (?, ?)')->execute([$agg, $event['seq']]);
};
$applied = fn(): array => $pdo->query('SELECT aggregate_id || seq FROM park_applied ORDER BY n')->fetchAll(PDO::FETCH_COLUMN);
$handled = $parkConsumer->run($parkHandler, $pdo, null, 1.5);
check('park: the other aggregate flows while a and b are held', $applied() === ['c1', 'c2'] && $handled === 2,
    json_encode($applied()) . " handled $handled");
check('park: a is tried consumer.max_attempts times, b once (permanent)', $calls['a'] === 2 && $calls['b'] === 1,
    json_encode($calls));
$operator = new OutboxParked($outbox, $pgUrl, $outbox->config($base));
$rows = [];
foreach ($operator->list($parkName) as $row) {
    $rows[$row['aggregate_id']] = $row;
}
check('park: both aggregates listed as parked with their attempts, errors and waiting events',
    array_keys($rows) === ['a', 'b'] || array_keys($rows) === ['b', 'a'], json_encode($rows));
check('park: a parked after 2 attempts, its error kept, 1 event waiting', ($rows['a']['state'] ?? '') === 'parked'
    && $rows['a']['attempts'] === 2 && $rows['a']['waiting'] === 1 && $rows['a']['head_event_id'] === $parkIds['a1']
    && str_contains((string)$rows['a']['last_error'], 'RuntimeException: the ledger is down'), json_encode($rows['a'] ?? null));
check('park: b parked at once by PermanentFailure, 1 event waiting', ($rows['b']['state'] ?? '') === 'parked'
    && $rows['b']['attempts'] === 1 && $rows['b']['waiting'] === 1
    && str_contains((string)$rows['b']['last_error'], 'PermanentFailure: the order is malformed'), json_encode($rows['b'] ?? null));
$summary = array_values(array_filter($operator->summary(), fn(array $s): bool => $s['consumer'] === $parkName));
check('park: the summary counts 2 parked', count($summary) === 1 && $summary[0]['parked'] === 2, json_encode($summary));
$metrics = $operator->metricsText();
check('park: the metrics text counts 2 parked for a /metrics of its own',
    str_contains($metrics, "outbox_parked_aggregates{subscriber=\"$parkName\"} 2\n"), $metrics);
$broken['a'] = false;
check('park: redrive of a held aggregate returns 1', $operator->redrive($parkName, 'PARK', 'a') === 1);
check('park: redrive of an aggregate not held returns 0', $operator->redrive($parkName, 'PARK', 'c') === 0);
$parkConsumer->run($parkHandler, $pdo, null, 1.0);
check('park: after the fix, redrive applies a\'s held events in seq order', $applied() === ['c1', 'c2', 'a1', 'a2'],
    json_encode($applied()));
try {
    $operator->skip($parkName, 'PARK', 'b', 'ops', 'wrong head', $parkIds['b2']);
    check('park: skipping another event than the head raises NOT_FOUND', false, 'skipped');
} catch (OutboxException $e) {
    check('park: skipping another event than the head raises NOT_FOUND', $e->status === 'NOT_FOUND', $e->getMessage());
}
$skipped = $operator->skip($parkName, 'PARK', 'b', 'ops@example', 'malformed order, fixed by hand', $parkIds['b1']);
check('park: skip returns the head it skipped', $skipped === $parkIds['b1'], $skipped);
$parkConsumer->run($parkHandler, $pdo, null, 1.0);
check('park: after the skip, b\'s next event goes through (the skipped head never)',
    $applied() === ['c1', 'c2', 'a1', 'a2', 'b2'], json_encode($applied()));
$skipRow = $pdo->query("SELECT skipped_by, reason, outbox_id FROM outbox_inbox_skipped WHERE consumer = '$parkName'")->fetchAll(PDO::FETCH_ASSOC);
check('park: the skip is recorded with who and why', $skipRow === [['skipped_by' => 'ops@example',
    'reason' => 'malformed order, fixed by hand', 'outbox_id' => $parkIds['b1']]], json_encode($skipRow));
check('park: nothing is held any more', $operator->list($parkName) === []);
try {
    $operator->skip($parkName, 'PARK', 'b', 'ops', 'again');
    check('park: skipping an aggregate not held raises NOT_FOUND', false, 'skipped');
} catch (OutboxException $e) {
    check('park: skipping an aggregate not held raises NOT_FOUND', $e->status === 'NOT_FOUND', $e->getMessage());
}
unset($operator, $parkConsumer);

// 3c. Outbox::write on PDO (the library's write plan): a reused idempotency key inside a transaction
// names the event holding it and leaves the transaction usable; outside one too.
$wpcfg = $outbox->config($base);
$pdo->beginTransaction();
$w1 = $outbox->write($pdo, $wpcfg, ['aggregate_type' => 'PRD', 'aggregate_id' => 'k1', 'operation' => 'POST',
    'payload' => ['n' => 1], 'idempotency_key' => "order-$suffix"]);
check('write returns the event id, type and seq', str_ends_with($w1['event_type'], 'Created') && $w1['seq'] === 1, json_encode($w1));
try {
    $outbox->write($pdo, $wpcfg, ['aggregate_type' => 'PRD', 'aggregate_id' => 'k2', 'operation' => 'POST',
        'payload' => ['n' => 2], 'idempotency_key' => "order-$suffix"]);
    check('a reused key raises DUPLICATE', false, 'written');
} catch (OutboxException $e) {
    check('a reused key raises DUPLICATE naming the event that holds it', $e->status === 'DUPLICATE'
        && str_contains($e->getMessage(), "by event {$w1['event_id']}"), $e->getMessage());
}
check('the transaction is still usable after the reused key', (int)$pdo->query('SELECT 1')->fetchColumn() === 1);
$pdo->commit();
try {
    $outbox->write($pdo, $wpcfg, ['aggregate_type' => 'PRD', 'aggregate_id' => 'k3', 'operation' => 'POST',
        'payload' => [], 'idempotency_key' => "order-$suffix"]);
    check('a reused key outside a transaction raises DUPLICATE', false, 'written');
} catch (OutboxException $e) {
    check('a reused key outside a transaction raises DUPLICATE naming its event', $e->status === 'DUPLICATE'
        && str_contains($e->getMessage(), $w1['event_id']), $e->getMessage());
}
check('one keyed event committed', (int)$pdo->query("SELECT count(*) FROM $schema.outbox WHERE idempotency_key = 'order-$suffix'")->fetchColumn() === 1);

// 4. Invalid input raises a PHP exception carrying the library's message; nothing is written.
$wcfg = $outbox->config($base + ['render.placeholders' => 'qmark']);
$cases = [
    'invalid JSON payload' => [['aggregate_type' => 'PRD', 'aggregate_id' => '1', 'operation' => 'POST', 'payload' => '{"a":'], 'INVALID_EVENT', 'payload is not valid JSON'],
    'unknown operation' => [['aggregate_type' => 'PRD', 'aggregate_id' => '1', 'operation' => 'MERGE', 'payload' => []], 'INVALID_EVENT', 'operation must be'],
    'missing aggregate id' => [['aggregate_type' => 'PRD', 'operation' => 'POST', 'payload' => ['a' => 1]], 'INVALID_EVENT', 'aggregate_id is required'],
    'NUL inside a string' => [['aggregate_type' => 'PRD', 'aggregate_id' => "a\0b", 'operation' => 'POST', 'payload' => []], 'INVALID_EVENT', 'NUL'],
    'unknown field' => [['aggregate_type' => 'PRD', 'colour' => 'red'], 'UNKNOWN_KEY', 'unknown event field'],
];
foreach ($cases as $name => [$event, $status, $part]) {
    try {
        $outbox->renderWrite($wcfg, $event);
        check("$name raises", false, 'no exception');
    } catch (OutboxException $e) {
        check("$name raises $status", $e->status === $status && str_contains($e->getMessage(), $part), $e->getMessage());
    }
}
try {
    $outbox->config(['outbox.table' => 'x; DROP TABLE y']);
    check('hostile table name raises', false);
} catch (OutboxException $e) {
    check('hostile table name raises INVALID_ARGUMENT', $e->status === 'INVALID_ARGUMENT', $e->getMessage());
}

// 5. Strings the library allocates are freed by the library: RSS stays flat over many renders.
$rss = fn(): int => (int)preg_replace('/\D/', '', (string)preg_grep('/^VmRSS/', file('/proc/self/status'))[array_key_first(preg_grep('/^VmRSS/', file('/proc/self/status')))]);
for ($i = 0; $i < 2000; $i++) {
    $outbox->renderWrite($wcfg, ['aggregate_type' => 'PRD', 'aggregate_id' => "w$i", 'operation' => 'POST', 'payload' => ['i' => $i, 'pad' => str_repeat('x', 4000)]]);
}
$start = $rss();
for ($i = 0; $i < 20000; $i++) {
    $outbox->renderWrite($wcfg, ['aggregate_type' => 'PRD', 'aggregate_id' => "w$i", 'operation' => 'POST', 'payload' => ['i' => $i, 'pad' => str_repeat('x', 4000)]]);
}
$growthKb = $rss() - $start;
check('20000 renders (80 MB of statements) leak nothing', $growthKb < 4096, "RSS grew by $growthKb kB");

$f->outbox_db_close($db);
$pdo->exec('SET search_path TO public');
$pdo->exec("DROP SCHEMA $schema CASCADE");

echo "php: $passed passed, $failed failed\n";
exit($failed === 0 ? 0 : 1);
