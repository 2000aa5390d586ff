<?php
declare(strict_types=1);

namespace Outbox;

/** PDO from a postgresql:// URL (the form OUTBOX_PG_URL and the library's pg.url take). */
final class PgUrl
{
    public static function pdo(string $url): \PDO
    {
        $p = parse_url($url);
        if ($p === false || !in_array($p['scheme'] ?? '', ['postgresql', 'postgres'], true)) {
            throw new \InvalidArgumentException("not a postgresql:// URL: $url");
        }
        $dsn = sprintf('pgsql:host=%s;port=%d;dbname=%s', $p['host'] ?? '127.0.0.1', $p['port'] ?? 5432,
            urldecode(ltrim($p['path'] ?? '/postgres', '/')));
        return new \PDO($dsn, isset($p['user']) ? urldecode($p['user']) : null,
            isset($p['pass']) ? urldecode($p['pass']) : null, [\PDO::ATTR_ERRMODE => \PDO::ERRMODE_EXCEPTION]);
    }
}
