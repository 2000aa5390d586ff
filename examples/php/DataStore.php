<?php
// The documents' CoreWrite DataStore::insert: the main record and its outbox event in one PDO
// transaction. The event is built, validated, named and rendered by liboutbox (through FFI);
// PDO runs the rendered statement inside the same transaction, so both commit or neither does.
declare(strict_types=1);

// The outbox package (php/): Composer's autoloader when the application loaded one (vendor/autoload.php),
// else the package's own autoloader from this checkout.
if (!class_exists(Outbox\Outbox::class)) {
    require_once __DIR__ . '/../../php/autoload.php';
}

use Outbox\Outbox;
use Outbox\OutboxConfig;
use Outbox\PgUrl;

final class DataStore
{
    private OutboxConfig $config;

    public function __construct(private PDO $pdo, private Outbox $outbox, array $options = [])
    {
        // PDO binds '?' placeholders; the documents name PRD events "Product...".
        $this->config = $outbox->config($options + ['render.placeholders' => 'qmark', 'event.type_map' => 'PRD=Product']);
    }

    public function insert(string $dimension, array $data): array
    {
        $this->pdo->beginTransaction();
        try {
            // 1. Insert main record
            $recordId = $this->insertMainRecord($dimension, $data);
            // 2. Execute cascades (none in this example; a failure here rolls back everything)
            $this->executeCascades($dimension, $recordId, $data);
            // 3. Insert outbox event (same transaction!)
            $event = $this->outbox->renderWrite($this->config, [
                'aggregate_type' => $dimension,
                'aggregate_id' => $recordId,
                'operation' => 'POST',
                'payload' => [$dimension . '_ID' => $recordId] + $data,
                'metadata' => $this->getSessionContext(),
                'user' => $this->getCurrentUser(),
            ]);
            $this->pdo->prepare($event['sql'])->execute($event['params']);
            // 4. Commit (data + event persisted atomically)
            $this->pdo->commit();
            return ['id' => $recordId, 'status' => 'success', 'event_id' => $event['event_id'], 'event_type' => $event['event_type']];
        } catch (\Throwable $e) {
            $this->pdo->rollBack(); // Both data AND event rolled back
            throw $e;
        }
    }

    private function insertMainRecord(string $dimension, array $data): string
    {
        $this->pdo->exec('CREATE TABLE IF NOT EXISTS tb_anag_records (id bigserial PRIMARY KEY, dimension text NOT NULL, data jsonb NOT NULL)');
        $stmt = $this->pdo->prepare('INSERT INTO tb_anag_records (dimension, data) VALUES (?, ?) RETURNING id');
        $stmt->execute([$dimension, json_encode($data, JSON_THROW_ON_ERROR)]);
        return (string)$stmt->fetchColumn();
    }

    private function executeCascades(string $dimension, string $recordId, array $data): void
    {
        if (isset($data['__fail_cascade'])) {
            throw new RuntimeException("cascade failed for $dimension $recordId");
        }
    }

    private function getSessionContext(): array
    {
        return ['source' => 'productManagement', 'centro_dett' => 'admin', 'microservice' => 'adminApp'];
    }

    private function getCurrentUser(): string
    {
        return 'user@example.com';
    }
}

if (PHP_SAPI === 'cli' && realpath($argv[0] ?? '') === __FILE__) {
    $pdo = PgUrl::pdo(getenv('OUTBOX_PG_URL') ?: 'postgresql://outbox:outbox@127.0.0.1:54329/outbox');
    if ($schema = getenv('OUTBOX_SCHEMA')) {
        $pdo->exec('SET search_path TO ' . $pdo->quote($schema));
    }
    $store = new DataStore($pdo, new Outbox(), getenv('OUTBOX_SCHEMA') ? ['outbox.schema' => getenv('OUTBOX_SCHEMA')] : []);
    $result = $store->insert('PRD', ['XPRD01' => $argv[1] ?? 'Widget Pro', 'XPRD02' => 99.99,
        'XPRD05' => $argv[2] ?? 'cat_electronics', 'TREC' => 'N']);
    printf("[php DataStore] committed PRD %s with event %s %s\n", $result['id'], $result['event_type'], $result['event_id']);
}
