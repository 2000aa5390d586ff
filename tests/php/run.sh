#!/usr/bin/env bash
# The PHP package (php/) end to end, each step able to fail the run:
#   1. the shipped header equals the outbox_ffi.h the build generates (it cannot drift);
#   2. tests/php/outbox_test.php from the command line, the library found by the package's search;
#   3. with no library anywhere, the error lists every place searched;
#   4. a request under php-cgi with FFI set up as the package README tells FPM/CGI users
#      (ffi.enable=preload, opcache.preload=preload.php, ffi.preload=the scope header);
#      the same request without the preload, and with ffi.enable=0, fails with the clear error;
#   5. a Composer install of the package into an empty project, offline from the path repository,
#      then a write through vendor/autoload.php.
# Needs OUTBOX_PG_URL and OUTBOX_AMQP_URL (scripts/services.sh env) and the release install (_install/).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
: "${OUTBOX_PG_URL:?set OUTBOX_PG_URL (scripts/services.sh env)}"
tmp=$(mktemp -d)
schema="php_cgi_$$"
cleanup() {
  psql "$OUTBOX_PG_URL" -qXc "DROP SCHEMA IF EXISTS $schema CASCADE" >/dev/null 2>&1 || true
  rm -rf "$tmp"
}
trap cleanup EXIT
fail() { echo "  FAIL  $*" >&2; exit 1; }
ok() { echo "  ok    $*"; }

# 1. The shipped header.
for generated in "$root/build/release/capi/outbox_ffi.h" "$root/_install/share/outbox/outbox_ffi.h"; do
  cmp -s "$root/php/include/outbox_ffi.h" "$generated" \
    || fail "php/include/outbox_ffi.h differs from $generated (cp it over after changing outbox.h)"
done
ok "php/include/outbox_ffi.h equals the generated outbox_ffi.h"

# 2. The PHP checks, OUTBOX_LIB unset: the search finds _install/lib/liboutbox.so.0.
env -u OUTBOX_LIB php "$root/tests/php/outbox_test.php"

# 3. The package away from the checkout and no library installed: the error lists the search.
cp -r "$root/php" "$tmp/pkg"
if out=$(env -u OUTBOX_LIB php -r 'require $argv[1]; new Outbox\Outbox();' "$tmp/pkg/autoload.php" 2>&1); then
  fail "loading with no library anywhere succeeded: $out"
fi
for part in 'liboutbox not found; looked in:' 'OUTBOX_LIB (not set)' '/usr/local/lib/liboutbox.so.0' \
            "/usr/lib/$(uname -m)-linux-gnu/liboutbox.so.0" 'Set OUTBOX_LIB'; do
  grep -qF -- "$part" <<<"$out" || fail "the not-found error lacks '$part': $out"
done
ok "no library: LoadException lists every place searched"

# 4. php-cgi requests.
"$root/_install/bin/outbox" migrate --pg-url "$OUTBOX_PG_URL" --schema "$schema" >/dev/null
php "$root/php/bin/outbox-ffi-header" "$tmp/outbox_ffi_scope.h" >/dev/null
request() { # php-cgi ini flags...
  OUTBOX_SCHEMA=$schema REQUEST_METHOD=GET REDIRECT_STATUS=200 SCRIPT_FILENAME="$root/tests/php/cgi_write.php" \
    php-cgi -d ffi.enable=preload -d opcache.enable=1 "$@" | tail -n 1
}
out=$(request -d opcache.preload="$root/php/preload.php" -d opcache.preload_user="$(id -un)" \
              -d ffi.preload="$tmp/outbox_ffi_scope.h")
grep -qF '"status":"success"' <<<"$out" && grep -qF '"sapi":"cgi-fcgi"' <<<"$out" \
  && grep -qF '"event_type":"ProductCreated"' <<<"$out" || fail "php-cgi write with the preload: $out"
rows=$(psql "$OUTBOX_PG_URL" -qXAtc "SELECT count(*) FROM $schema.outbox WHERE payload->>'XPRD01' = 'from php-cgi'")
[ "$rows" = 1 ] || fail "php-cgi write: $rows event rows, expected 1"
ok "php-cgi (ffi.enable=preload, opcache.preload, ffi.preload): DataStore::insert commits its event"
out=$(request)
grep -qF '"error":"Outbox\\LoadException"' <<<"$out" && grep -qF 'opcache.preload=' <<<"$out" \
  && grep -qF 'ffi.preload=' <<<"$out" || fail "php-cgi without the preload: $out"
ok "php-cgi without the preload: LoadException telling how to preload"
out=$(request -d ffi.enable=0)
grep -qF 'FFI is disabled (ffi.enable=0)' <<<"$out" || fail "php-cgi with ffi.enable=0: $out"
ok "php-cgi with ffi.enable=0: LoadException saying FFI is disabled"

# 5. Composer, offline, from the path repository.
if ! command -v composer >/dev/null; then fail "composer is not installed (scripts/deps.sh)"; fi
mkdir "$tmp/app"
cat >"$tmp/app/composer.json" <<JSON
{
    "name": "test/app",
    "repositories": [{"type": "path", "url": "$root/php"}, {"packagist.org": false}],
    "require": {"outbox/outbox": "*@dev"}
}
JSON
COMPOSER_HOME="$tmp/composer-home" COMPOSER_CACHE_DIR="$tmp/composer-cache" COMPOSER_DISABLE_NETWORK=1 \
  composer install --working-dir="$tmp/app" --no-interaction --no-progress --quiet \
  || fail "composer install from the path repository"
cat >"$tmp/app/write.php" <<'PHP'
<?php
$loader = require __DIR__ . '/vendor/autoload.php';
$file = $loader->findFile(Outbox\Outbox::class);
require $argv[1] . '/examples/php/DataStore.php';
$own = in_array($argv[1] . '/php/autoload.php', get_included_files(), true);
$pdo = Outbox\PgUrl::pdo(getenv('OUTBOX_PG_URL'));
$pdo->exec('SET search_path TO ' . $pdo->quote($argv[2]));
$r = (new DataStore($pdo, new Outbox\Outbox(), ['outbox.schema' => $argv[2]]))->insert('PRD', ['XPRD01' => 'from composer']);
echo json_encode($r + ['class_file' => $file, 'own_autoloader' => $own], JSON_UNESCAPED_SLASHES), "\n";
PHP
out=$(env -u OUTBOX_LIB php "$tmp/app/write.php" "$root" "$schema")
grep -qF '"status":"success"' <<<"$out" && grep -qF "\"class_file\":\"$tmp/app/vendor/composer/../outbox/outbox/src/Outbox.php\"" <<<"$out" \
  && grep -qF '"own_autoloader":false' <<<"$out" \
  || fail "write through the Composer-installed package: $out"
rows=$(psql "$OUTBOX_PG_URL" -qXAtc "SELECT count(*) FROM $schema.outbox WHERE payload->>'XPRD01' = 'from composer'")
[ "$rows" = 1 ] || fail "Composer write: $rows event rows, expected 1"
ok "composer install (path repository, packagist.org off) into an empty project, then a write"
echo "php package: all steps passed"
