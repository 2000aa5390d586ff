<?php
// A request under php-cgi: the documents' DataStore::insert through the package, with liboutbox
// taken from the opcache.preload scope (ffi.enable=preload, as the package README sets up FPM/CGI).
// Prints one JSON line: the insert's result, or the exception's class and message.
declare(strict_types=1);

require_once __DIR__ . '/../../examples/php/DataStore.php';

header('Content-Type: application/json');
try {
    $schema = (string)getenv('OUTBOX_SCHEMA');
    $pdo = Outbox\PgUrl::pdo((string)getenv('OUTBOX_PG_URL'));
    $pdo->exec('SET search_path TO ' . $pdo->quote($schema));
    $store = new DataStore($pdo, new Outbox\Outbox(), ['outbox.schema' => $schema]);
    $result = $store->insert('PRD', ['XPRD01' => 'from php-cgi', 'TREC' => 'N']);
    echo json_encode($result + ['sapi' => PHP_SAPI, 'ffi.enable' => ini_get('ffi.enable')]), "\n";
} catch (Throwable $e) {
    echo json_encode(['error' => get_class($e), 'message' => $e->getMessage(), 'sapi' => PHP_SAPI]), "\n";
}
