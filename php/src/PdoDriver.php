<?php
declare(strict_types=1);

namespace Outbox;

use FFI;

/**
 * What the library's step machines (the consumer loop, the write plan) need of PDO: a statement
 * the library hands out, run on PDO, and its outcome reported in the library's terms. No rule of
 * its own: what an error means is the library's to judge.
 */
final class PdoDriver
{
    public function __construct(private FFI $f)
    {
    }

    /** The statement's parameters as PHP strings and nulls. */
    public function params(FFI\CData $st): array
    {
        $params = [];
        for ($i = 0, $n = $this->f->outbox_statement_param_count($st); $i < $n; $i++) {
            $params[] = $this->f->outbox_statement_param($st, $i);
        }
        return $params;
    }

    /** Runs a statement that returns at most one row; the row, or null. */
    public function fetch(\PDO $pdo, FFI\CData $st): ?array
    {
        $q = $pdo->prepare($this->f->outbox_statement_sql($st));
        $q->execute($this->params($st));
        return $q->fetch(\PDO::FETCH_NUM) ?: null;
    }

    /** [sqlstate or null, message] of a PDO error (PDO's HY000 is its own "general error": no server SQLSTATE). */
    public static function failure(\PDOException $e): array
    {
        $state = $e->errorInfo[0] ?? null;
        return [is_string($state) && $state !== 'HY000' && strlen($state) === 5 ? $state : null, $e->getMessage()];
    }

    /**
     * Calls $report(values, count) with a row as the library takes it: a C array of its values
     * as text (PDO gives PHP bools and ints), or (null, 0) for no row.
     */
    public function withRow(?array $row, callable $report): int
    {
        if ($row === null || $row === []) {
            return $report(null, 0);
        }
        $values = $this->f->new('char*[' . count($row) . ']');
        $keep = [];
        foreach (array_values($row) as $i => $v) {
            if ($v === null) {
                $values[$i] = null;
                continue;
            }
            $keep[$i] = $this->cString(is_bool($v) ? ($v ? 't' : 'f') : (string)$v);
            $values[$i] = FFI::cast('char*', FFI::addr($keep[$i][0]));
        }
        return $report(FFI::cast('const char**', FFI::addr($values[0])), count($row));
    }

    /** A NUL-terminated copy of $s, kept alive as long as the returned array. */
    public function cString(string $s): FFI\CData
    {
        $buf = $this->f->new('char[' . (strlen($s) + 1) . ']');
        FFI::memcpy($buf, $s, strlen($s));
        return $buf;
    }
}
