"""The console in a real browser: Debian's Chromium, headless, driven through Selenium with Debian's
chromedriver (nothing downloads a browser or a driver: both paths are given, and Selenium Manager is
told to stay offline). Signs in, lists the parked aggregates a real subscriber parked, redrives one
and skips another through the confirmation dialog, and checks a read token's page cannot act.
Screenshots go to OUTBOX_CONSOLE_SCREENSHOTS (default $OUTBOX_RUN_DIR/console-screenshots); two of
them are docs/console.png and docs/console-skip.png. A missing browser fails this test, never skips it."""
import os

import pytest

os.environ["SE_OFFLINE"] = "true"  # Selenium Manager: never fetch a browser or a driver

from selenium import webdriver  # noqa: E402
from selenium.webdriver.chrome.options import Options  # noqa: E402
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support import expected_conditions as EC  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

from support import Console, Outbox, Subscriber, stop_all, wait_until  # noqa: E402

CHROMIUM = os.environ.get("OUTBOX_CHROMIUM", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("OUTBOX_CHROMEDRIVER", "/usr/bin/chromedriver")
SHOTS = os.environ.get("OUTBOX_CONSOLE_SCREENSHOTS",
                       os.path.join(os.environ.get("OUTBOX_RUN_DIR", "/tmp"), "console-screenshots"))


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    ob = Outbox("browser")
    ob.write("Order", "1041")
    ob.relay_once("--set", "relay.max_attempts=1")  # no queue bound yet: the relay parks it, FAILED
    sub = Subscriber(ob, "search-indexer")
    sub.fail.update({"2077", "3120"})
    sub.flaky.add("4501")
    relay = ob.relay()
    ids = {}
    for agg in ["1001", "2077", "2077", "2077", "3120", "4501", "1002"]:
        ids.setdefault(agg, []).append(ob.write("Order", agg))
    console = Console(ob, str(tmp_path_factory.mktemp("console")), "--subscriber", "analytics")
    wait_until("2077 and 3120 parked, 4501 retrying", lambda: [
        (console.parked("search-indexer", a) or [{}])[0].get("state") for a in ("2077", "3120", "4501")] == [
        "parked", "parked", "retrying"])
    yield ob, sub, console, ids
    stop_all(console, relay, sub, ob)


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    # A missing browser or driver is a failure of this suite (scripts/deps.sh installs both).
    assert os.access(CHROMIUM, os.X_OK), f"{CHROMIUM} is missing: Debian's chromium (scripts/deps.sh)"
    assert os.access(CHROMEDRIVER, os.X_OK), f"{CHROMEDRIVER} is missing: Debian's chromium-driver (scripts/deps.sh)"
    opts = Options()
    opts.binary_location = CHROMIUM
    profile = tmp_path_factory.mktemp("chromium")
    for arg in ["--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu", "--no-first-run",
                "--window-size=1360,1100", f"--user-data-dir={profile}", "--disable-extensions", "--disable-sync",
                "--disable-background-networking", "--disable-component-update", "--disable-default-apps"]:
        opts.add_argument(arg)
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=opts)
    driver.set_page_load_timeout(20)
    os.makedirs(SHOTS, exist_ok=True)
    yield driver
    driver.quit()


def row(driver, aggregate):
    return driver.find_elements(By.CSS_SELECTOR, f'#parked tr[data-aggregate="Order/{aggregate}"]')


def sign_in(driver, console, token):
    driver.get(console.base + "/")
    WebDriverWait(driver, 10).until(EC.presence_of_element_located((By.ID, "token"))).send_keys(token)
    driver.find_element(By.ID, "sign-in").click()
    WebDriverWait(driver, 10).until(EC.presence_of_element_located((By.ID, "parked")))


def confirm(driver, aggregate, button, expect, reason=None, shot=None):
    """Clicks the row's button, checks the confirmation dialog, confirms; returns the status line once
    it starts with `expect`."""
    WebDriverWait(driver, 10).until(lambda d: row(d, aggregate))
    row(driver, aggregate)[0].find_element(By.CSS_SELECTOR, button).click()
    dialog = WebDriverWait(driver, 5).until(EC.visibility_of_element_located((By.ID, "confirm")))
    assert aggregate in dialog.find_element(By.ID, "confirm-title").text
    if reason is not None:
        box = driver.find_element(By.ID, "confirm-reason")
        driver.find_element(By.ID, "confirm-ok").click()  # no reason yet: the dialog stays
        assert dialog.is_displayed()
        box.send_keys(reason)
    if shot:
        driver.save_screenshot(os.path.join(SHOTS, shot))
    driver.find_element(By.ID, "confirm-ok").click()
    WebDriverWait(driver, 10).until(EC.invisibility_of_element_located((By.ID, "confirm")))
    WebDriverWait(driver, 10).until(lambda d: d.find_element(By.ID, "status").text.startswith(expect))
    return driver.find_element(By.ID, "status").text


def test_list_redrive_and_skip_in_chromium(world, browser):
    ob, sub, console, ids = world
    d = browser
    sign_in(d, console, console.operator)
    # The list: the relay's FAILED aggregate, the subscriber's two parked and one retrying, with errors.
    WebDriverWait(d, 10).until(lambda x: row(x, "2077") and row(x, "3120") and row(x, "4501") and row(x, "1041"))
    parked = row(d, "2077")[0].text
    assert "parked" in parked and "mapping conflict on field 'price'" in parked and "search-indexer" in parked
    assert "retrying" in row(d, "4501")[0].text and "HTTP 503" in row(d, "4501")[0].text
    assert row(d, "1041")[0].get_attribute("data-consumer") == "" and "relay" in row(d, "1041")[0].text
    subs = d.find_element(By.CSS_SELECTOR, '#subscribers tr[data-subscriber="search-indexer"]')
    assert subs.find_elements(By.CSS_SELECTOR, "svg.plot polyline")
    assert d.find_elements(By.CSS_SELECTOR, '#subscribers tr[data-subscriber="analytics"]')
    assert d.find_elements(By.CSS_SELECTOR, "#relay-plot svg.plot")
    cards = d.find_element(By.ID, "relay-cards").text
    assert "failed\n1" in cards and "parked aggregates\n1" in cards
    d.save_screenshot(os.path.join(SHOTS, "console.png"))

    # Redrive: the handler now succeeds for 2077; its three events are applied in order.
    sub.fail.discard("2077")
    status = confirm(d, "2077", ".act-redrive", "Redrive of")
    assert status == "Redrive of Order/2077: under way", status
    wait_until("2077's events applied in order", lambda: sub.applied("2077") == ids["2077"])
    WebDriverWait(d, 15).until(lambda x: not row(x, "2077"))

    # Skip: with a reason, recorded with the operator's name; the event is never applied.
    status = confirm(d, "3120", ".act-skip", "Skipped", reason="price fixed in the catalogue by hand",
                     shot="console-skip.png")
    assert status == f"Skipped {ids['3120'][0]} of Order/3120", status
    WebDriverWait(d, 15).until(lambda x: not row(x, "3120"))
    assert ob.sql(f'SELECT outbox_id, skipped_by, reason FROM "{ob.schema}".outbox_inbox_skipped') == [
        [ids["3120"][0], "alice", "price fixed in the catalogue by hand"]]
    assert sub.applied("3120") == []
    d.save_screenshot(os.path.join(SHOTS, "console-after.png"))

    log = console.log()
    assert 'alice (operator) from 127.0.0.1: redrive consumer="search-indexer" aggregate="Order"/"2077"' in log
    assert 'alice (operator) from 127.0.0.1: skip the head of consumer="search-indexer" aggregate="Order"/"3120"' in log


def test_a_read_token_sees_the_page_but_cannot_act(world, browser):
    _, _, console, _ = world
    d = browser
    d.find_element(By.ID, "logout").click()
    WebDriverWait(d, 10).until(EC.presence_of_element_located((By.ID, "token")))
    sign_in(d, console, console.reader)
    WebDriverWait(d, 10).until(lambda x: row(x, "4501"))
    assert "bob (read)" in d.find_element(By.ID, "who").text
    buttons = d.find_elements(By.CSS_SELECTOR, "button.act")
    assert buttons and all(not b.is_enabled() for b in buttons)
