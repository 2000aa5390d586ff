#!/usr/bin/env bash
# The operator console (`outbox console`, docs/console.md), each step able to fail the run:
#   1. Debian's Chromium and chromedriver are there (scripts/deps.sh installs them): a missing
#      browser fails this suite, it never skips the browser test;
#   2. a venv in $OUTBOX_RUN_DIR/venv-console with pytest and Selenium from the Python index (the
#      driver package only: Selenium is given Debian's browser and driver and told to stay offline);
#   3. test_console_http.py: the HTTP API against real PostgreSQL and RabbitMQ (401, 403 for a read
#      token, no state change through GET, CSRF, each action working and logged);
#   4. test_console_browser.py: Chromium headless signs in, lists, redrives and skips, with
#      screenshots in $OUTBOX_RUN_DIR/console-screenshots (docs/console.png comes from there).
# Needs OUTBOX_PG_URL and OUTBOX_AMQP_URL (scripts/services.sh env) and the release install (_install/).
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../../scripts/lib.sh"
root=$OUTBOX_REPO_ROOT

: "${OUTBOX_PG_URL:=$OUTBOX_LOCAL_PG_URL}"
: "${OUTBOX_AMQP_URL:=$OUTBOX_LOCAL_AMQP_URL}"
export OUTBOX_PG_URL OUTBOX_AMQP_URL OUTBOX_RUN_DIR
export OUTBOX_INSTALL=${OUTBOX_INSTALL:-$root/_install}
[[ -x "$OUTBOX_INSTALL/bin/outbox" ]] || outbox_die "no $OUTBOX_INSTALL/bin/outbox: run scripts/build.sh release"
export OUTBOX_CHROMIUM=${OUTBOX_CHROMIUM:-/usr/bin/chromium} OUTBOX_CHROMEDRIVER=${OUTBOX_CHROMEDRIVER:-/usr/bin/chromedriver}
for tool in "$OUTBOX_CHROMIUM" "$OUTBOX_CHROMEDRIVER"; do
  [[ -x "$tool" ]] || outbox_die "$tool is missing: scripts/deps.sh installs Debian's chromium and chromium-driver"
done
outbox_log "$("$OUTBOX_CHROMIUM" --version 2>/dev/null || echo chromium), $("$OUTBOX_CHROMEDRIVER" --version | cut -d' ' -f1-2)"

venv=$OUTBOX_RUN_DIR/venv-console
if [[ ! -x "$venv/bin/python" ]]; then
  outbox_log "creating $venv"
  "${OUTBOX_PYTHON:-python3}" -m venv "$venv"
fi
"$venv/bin/python" -m pip install --disable-pip-version-check -q pytest "pytest-timeout>=2.1" "selenium>=4.11"

export OUTBOX_CONSOLE_SCREENSHOTS=${OUTBOX_CONSOLE_SCREENSHOTS:-$OUTBOX_RUN_DIR/console-screenshots}
rm -rf "$OUTBOX_CONSOLE_SCREENSHOTS"
cd "$root/tests/console"
"$venv/bin/python" -m pytest -q -p no:cacheprovider -p timeout --timeout 120 --timeout-method thread \
  test_console_http.py test_console_browser.py
for shot in console.png console-skip.png; do
  [[ -s "$OUTBOX_CONSOLE_SCREENSHOTS/$shot" ]] || outbox_die "the browser test took no screenshot $shot"
done
outbox_log "screenshots in $OUTBOX_CONSOLE_SCREENSHOTS"
