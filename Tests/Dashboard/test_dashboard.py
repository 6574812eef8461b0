"""bgd's dashboard in headless Chromium, and /metrics through prometheus_client's parser.

A real bgd (temporary state directory, --http on a free loopback port) with the fixture app:
a seeded history (fetches and opens), then the checks the issue names — pages load with no
console errors, show the apps and a timeline with one mark per seeded event, update without a
reload when something happens; unauthenticated requests get 401; the listener refuses a
non-loopback address; /metrics parses and its counters move. Screenshots: $ARTIFACTS.
"""
import functools
import http.server
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

from prometheus_client.parser import text_string_to_metric_families
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

BIN = os.environ["BGD_BIN"]
ARTIFACTS = os.environ["ARTIFACTS"]
APP = "com.example.dashboard"
failures = []


def check(condition, what):
    print(("ok   " if condition else "FAIL ") + what, flush=True)
    if not condition:
        failures.append(what)


def free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def bgctl(*arguments):
    environment = dict(os.environ, BGD_SOCKET=SOCKET)
    return subprocess.run([f"{BIN}/bgctl", *arguments], check=True, capture_output=True, text=True, env=environment).stdout


def get(path, token=None):
    request = urllib.request.Request(f"http://127.0.0.1:{PORT}{path}")
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def wakes_total(text):
    total = 0.0
    for family in text_string_to_metric_families(text):
        if family.name == "bgd_wakes":
            total += sum(sample.value for sample in family.samples if sample.name == "bgd_wakes_total")
    return total


def severe(logs):
    return [entry for entry in logs if entry.get("level") == "SEVERE"]


def rgb(css):
    """'rgb(215, 0, 21)' or 'rgba(…)' -> (215, 0, 21)."""
    return tuple(int(part) for part in re.findall(r"\d+", css)[:3])


def reddish(css):
    r, g, b = rgb(css)
    return r > 180 and g < 110 and b < 110


def settled(read, tries=5):
    """What `read` reads off the page, read again if a live update replaced the page meanwhile:
    every event swaps the whole of #main, and an element found before the swap is stale after."""
    for attempt in range(tries):
        try:
            return read()
        except StaleElementReferenceException:
            if attempt == tries - 1:
                raise


def style(browser, element, prop):
    return browser.execute_script("return getComputedStyle(arguments[0]).getPropertyValue(arguments[1])", element, prop)


def serve_files(directory):
    """A real HTTP origin for the dashboard's transfers: Python's own file server on loopback."""
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=directory)
    http.server.SimpleHTTPRequestHandler.log_message = lambda *_: None
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    import threading
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


work = tempfile.mkdtemp(prefix="bgd-dash-")
SOCKET = f"{work}/bgd.sock"
PORT = free_port()
daemon = subprocess.Popen(
    [f"{BIN}/bgd", "--state-dir", f"{work}/state", "--socket", SOCKET, "--push-port", "off", "--conditions", "unconstrained",
     "--http", f"127.0.0.1:{PORT}"],
    stderr=subprocess.PIPE, text=True)
try:
    for line in daemon.stderr:
        if "Dashboard is listening" in line:
            break
    token = open(f"{work}/state/dashboard-token").read().strip()

    # A seeded history: three fetches and two opens (a moment apart: one use of the app).
    bgctl("register", APP, "--interval", "minimum", "--", f"{BIN}/bgd-fixture-app", "newData")
    for _ in range(3):
        bgctl("simulate", "fetch", APP)
    for _ in range(2):
        bgctl("open", APP)

    # Unauthenticated: refused, whatever the page.
    for path in ["/", f"/apps/{APP}", "/metrics", "/events"]:
        status, _ = get(path)
        check(status == 401, f"unauthenticated GET {path} is refused (got {status})")
    status, _ = get("/", token="not-the-token")
    check(status == 401, "a wrong token is refused")

    # Only loopback unless asked.
    refused = subprocess.run(
        [f"{BIN}/bgd", "--state-dir", f"{work}/other", "--socket", f"{work}/other.sock", "--push-port", "off", "--http", "0.0.0.0:0"],
        capture_output=True, text=True, timeout=30)
    check(refused.returncode != 0 and "loopback" in refused.stderr, "bgd refuses --http 0.0.0.0 without --http-allow-remote")

    # /metrics parses, and its counters move when the system acts.
    status, text = get("/metrics", token)
    check(status == 200, "/metrics answers with the token")
    before = wakes_total(text)
    check(before == 3, f"bgd_wakes_total counts the three fetches (got {before})")
    bgctl("simulate", "fetch", APP)
    after = wakes_total(get("/metrics", token)[1])
    check(after == before + 1, f"bgd_wakes_total moves with a fetch ({before} -> {after})")
    names = {family.name for family in text_string_to_metric_families(get("/metrics", token)[1])}
    for name in ["bgd_wakes", "bgd_store_commit_seconds", "bgd_outbox_depth", "bgd_transfers_active", "bgd_launches"]:
        check(name in names, f"/metrics has {name}")

    # The browser.
    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    for argument in ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1280,1400"]:
        options.add_argument(argument)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    browser = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)
    try:
        login = json.loads(bgctl("dashboard", "--json"))["url"]
        browser.get(login)
        check(browser.current_url.rstrip("/").endswith(str(PORT)), f"the login link lands on the overview ({browser.current_url})")
        check(APP in browser.page_source, "the overview lists the app")
        check(len(browser.find_elements(By.CSS_SELECTOR, "tr.app")) == 1, "one app row")
        check(len(browser.find_elements(By.CSS_SELECTOR, "svg.timeline")) == 1, "the system timeline is drawn")
        browser.save_screenshot(f"{ARTIFACTS}/overview-1280-first.png")
        check(not severe(browser.get_log("browser")), "no console errors on the overview")

        browser.get(f"http://127.0.0.1:{PORT}/apps/{APP}")
        runs = browser.find_elements(By.CSS_SELECTOR, "svg.timeline .mark.run")
        opens = browser.find_elements(By.CSS_SELECTOR, "svg.timeline .mark.open")
        check(len(runs) == 4, f"the app's timeline has a mark per wake (4, got {len(runs)})")
        check(len(opens) == 1, f"and per open; two a moment apart are one (1, got {len(opens)})")
        reasons = settled(lambda: [r.text for r in browser.find_elements(By.CSS_SELECTOR, "#why li .code")])
        check(len(reasons) >= 1, f"the next wake shows its reasons ({reasons})")
        browser.save_screenshot(f"{ARTIFACTS}/app.png")
        check(not severe(browser.get_log("browser")), "no console errors on the app page")

        # Live: a new wake appears without a reload.
        WebDriverWait(browser, 10).until(lambda b: b.find_element(By.ID, "live").get_attribute("class") == "on")
        browser.execute_script("window.__sameDocument = 42;")
        bgctl("simulate", "fetch", APP)
        WebDriverWait(browser, 15).until(lambda b: len(b.find_elements(By.CSS_SELECTOR, "svg.timeline .mark.run")) == 5)
        check(browser.execute_script("return window.__sameDocument") == 42, "the page updated in place (no reload)")
        check(int(browser.execute_script("return document.body.dataset.updates || 0")) >= 1, "the update came by server-sent events")
        browser.save_screenshot(f"{ARTIFACTS}/app-live.png")
        check(not severe(browser.get_log("browser")), "no console errors after the live update")

        # Trouble first. A second app whose fetch fails; three downloads of the operator's: one that
        # completes from a real HTTP origin, one that fails (a refused port, at once), one that waits
        # for its retry (the same port, in bgd's durable mode).
        BROKEN = "com.example.broken"
        bgctl("register", BROKEN, "--interval", "minimum", "--", f"{BIN}/bgd-fixture-app", "failed")
        bgctl("simulate", "fetch", BROKEN)
        files = tempfile.mkdtemp(prefix="bgd-dash-origin-")
        with open(f"{files}/big.bin", "wb") as big:
            big.write(os.urandom(3 << 20))
        origin = serve_files(files)
        bgctl("download", f"http://127.0.0.1:{origin.server_address[1]}/big.bin", "--to", f"{work}/big.bin")
        failed = subprocess.run([f"{BIN}/bgctl", "download", "http://127.0.0.1:9/gone.bin", "--to", f"{work}/gone.bin"],
                                capture_output=True, text=True, env=dict(os.environ, BGD_SOCKET=SOCKET))
        check(failed.returncode == 5, f"a download from a refused port fails at once (exit {failed.returncode})")
        bgctl("download", "http://127.0.0.1:9/later.bin", "--to", f"{work}/later.bin", "--retry-forever", "--no-wait")
        WebDriverWait(browser, 30).until(lambda _: "retrying" in bgctl("transfers"))

        browser.get(f"http://127.0.0.1:{PORT}/")
        def app_rows():
            rows = browser.find_elements(By.CSS_SELECTOR, "tr.app")
            result = rows[0].find_element(By.CSS_SELECTOR, "td.result")
            return ([row.get_attribute("data-app") for row in rows], result.get_attribute("class"),
                    style(browser, result.find_element(By.CSS_SELECTOR, ".pill"), "background-color"),
                    style(browser, rows[1].find_element(By.CSS_SELECTOR, "td.result .pill"), "background-color"))
        order, result_class, pill, ok_pill = settled(app_rows)
        check(order == [BROKEN, APP], f"the app in trouble is listed first ({order})")
        check("outcome-failed" in result_class, "its last-result cell says failed")
        check(reddish(pill), f"and is red ({pill})")
        check(not reddish(ok_pill), f"the healthy app's is not ({ok_pill})")

        tiles = settled(lambda: {tile.get_attribute("id"): tile.text for tile in browser.find_elements(By.CSS_SELECTOR, "#tiles .tile")})
        check(set(tiles) == {"tile-apps", "tile-running", "tile-failures", "tile-transfers", "tile-outbox", "tile-bgd"}, f"the six tiles ({sorted(tiles)})")
        check(tiles.get("tile-apps", "").startswith("2") and "1 in trouble" in tiles.get("tile-apps", ""), f"apps tile: {tiles.get('tile-apps')!r}")
        check(tiles.get("tile-failures", "").startswith("1"), f"failures in 24 h: {tiles.get('tile-failures')!r}")
        check(tiles.get("tile-transfers", "").startswith("1"), f"one transfer active (the waiting one): {tiles.get('tile-transfers')!r}")
        check(f"{work}/state" in tiles.get("tile-bgd", "") and "up " in tiles.get("tile-bgd", ""), f"which bgd: {tiles.get('tile-bgd')!r}")
        check("Read-only" in settled(lambda: browser.find_element(By.ID, "readonly").text), "the page says it is read-only")

        check(len(browser.find_elements(By.CSS_SELECTOR, "ul.legend li")) >= 10, "the timeline has a legend")
        check(len(browser.find_elements(By.CSS_SELECTOR, "svg.timeline line.now")) == 1, "and a now line")
        check(len(browser.find_elements(By.CSS_SELECTOR, "svg.timeline .mark.planned")) >= 1, "and the planned next wakes")
        ranges = settled(lambda: [a.text for a in browser.find_elements(By.CSS_SELECTOR, "nav.range a")])
        check(ranges == ["1 h", "6 h", "day", "week"], f"1 h / 6 h / day / week ranges ({ranges})")
        browser.find_element(By.LINK_TEXT, "1 h").click()
        check("last hour" in browser.page_source and "range=1h" in browser.current_url, "the 1 h range shows the last hour")
        check(settled(lambda: browser.find_element(By.CSS_SELECTOR, "nav.range a[aria-current]").text) == "1 h", "and marks it as the current range")

        # The rows as one snapshot, read in one script: the page updates them in place as the
        # transfers move (server-sent events), and a row found before an update and read after
        # it is a stale element. The waiting download goes back to running for each attempt (its
        # connection is retried for the connect timeout): the snapshot is taken while the page
        # shows it waiting, as the steps above may have outlasted the wait it was in.
        WebDriverWait(browser, 60).until(lambda _: browser.execute_script(
            "return [...document.querySelectorAll('tr.transfer td[data-label=state]')]"
            ".some(cell => cell.innerText.trim() === 'waiting')"))
        transfers = browser.execute_script("""
            return [...document.querySelectorAll('tr.transfer')].map(row => {
                const cell = label => row.querySelector(`td[data-label=${label}]`);
                const bar = row.querySelector('.bar'), fill = row.querySelector('.bar > div');
                return {id: row.dataset.transfer, text: row.innerText, state: cell('state')?.innerText.trim(),
                        speed: cell('speed')?.innerText ?? '', valuenow: bar?.getAttribute('aria-valuenow'),
                        fill: fill ? getComputedStyle(fill).getPropertyValue('background-color') : ''};
            })""")
        check(len(transfers) == 3, f"three transfers listed ({len(transfers)})")
        by_state = {row["state"]: row for row in transfers}
        done = by_state.get("completed")
        check(done is not None and "3.0 MiB" in done["text"] and "/s" in done["speed"],
              f"the completed one shows its size and speed ({done['text'] if done else None!r})")
        check(done is not None and f"{work}/big.bin" in done["text"], "and where it went")
        gone = by_state.get("failed")
        if gone is not None:
            check(reddish(gone["fill"]) or gone["valuenow"] == "0",
                  f"a failed transfer's bar is red, not a full blue bar ({gone['fill']})")
            check("cannotConnect" in gone["text"], f"and says why ({gone['text']!r})")
        else:
            check(False, "the failed transfer is listed")
        waiting = by_state.get("waiting")
        check(waiting is not None and "retries in" in waiting["text"],
              f"the waiting one says when it retries ({waiting['text'] if waiting else None!r})")
        done_fill = done["fill"] if done else ""
        check(done is not None and done_fill and not reddish(done_fill) and rgb(done_fill) != (10, 132, 255),
              f"the completed bar is green ({done_fill})")
        browser.save_screenshot(f"{ARTIFACTS}/overview-1280.png")
        browser.get(f"http://127.0.0.1:{PORT}/apps/{BROKEN}")
        check(len(browser.find_elements(By.CSS_SELECTOR, "#runs td.outcome-failed")) == 1, "the app page colours the failed run")
        browser.save_screenshot(f"{ARTIFACTS}/app-1280.png")
        check(not severe(browser.get_log("browser")), "no console errors on the trouble pages")

        # Readable on a phone: the page fits a narrow window without horizontal scrolling of the
        # body; the apps table becomes cards; the timeline keeps its scale and scrolls instead.
        browser.set_window_size(390, 844)
        browser.get(f"http://127.0.0.1:{PORT}/")
        overflow = browser.execute_script("return document.documentElement.scrollWidth - document.documentElement.clientWidth")
        check(overflow <= 1, f"the overview fits a phone's width (overflow {overflow}px)")
        def phone_layout():
            card = browser.find_element(By.CSS_SELECTOR, "tr.app")
            scroller = browser.find_element(By.CSS_SELECTOR, ".timeline-scroll")
            return (style(browser, card, "display"),
                    style(browser, browser.find_element(By.CSS_SELECTOR, "#apps thead"), "display"),
                    browser.execute_script("return getComputedStyle(arguments[0], '::before').content", card.find_element(By.CSS_SELECTOR, "td.result")),
                    browser.execute_script("return [arguments[0].scrollWidth, arguments[0].clientWidth, arguments[0].querySelector('svg').getBoundingClientRect().width]", scroller),
                    browser.execute_script("return arguments[0].scrollLeft + arguments[0].clientWidth - arguments[0].scrollWidth", scroller))
        display, header, label, widths, at = settled(phone_layout)
        check(display == "block", "at 390 px each app is a card")
        check(header == "none", "with no table header")
        check("last result" in label, f"each field labelled ({label})")
        check(widths[0] > widths[1] and widths[2] >= 999, f"the timeline keeps its scale and scrolls ({widths})")
        check(abs(at) <= 2, f"scrolled to now at first ({at}px from the end)")
        browser.save_screenshot(f"{ARTIFACTS}/overview-390.png")
        browser.get(f"http://127.0.0.1:{PORT}/apps/{APP}")
        overflow = browser.execute_script("return document.documentElement.scrollWidth - document.documentElement.clientWidth")
        check(overflow <= 1, f"the app page fits a phone's width (overflow {overflow}px)")
        browser.save_screenshot(f"{ARTIFACTS}/app-390.png")

        # Dark mode follows the system's preference.
        browser.set_window_size(1280, 1400)
        browser.execute_cdp_cmd("Emulation.setEmulatedMedia", {"features": [{"name": "prefers-color-scheme", "value": "dark"}]})
        browser.get(f"http://127.0.0.1:{PORT}/")
        background = rgb(style(browser, browser.find_element(By.TAG_NAME, "body"), "background-color"))
        check(sum(background) < 120, f"dark mode darkens the page ({background})")
        text = rgb(style(browser, browser.find_element(By.TAG_NAME, "body"), "color"))
        check(sum(text) > 600, f"with light text ({text})")
        browser.save_screenshot(f"{ARTIFACTS}/overview-dark-1280.png")
        browser.set_window_size(390, 844)
        browser.get(f"http://127.0.0.1:{PORT}/")
        browser.save_screenshot(f"{ARTIFACTS}/overview-dark-390.png")
        check(not severe(browser.get_log("browser")), "no console errors in dark mode or on a phone")
        origin.shutdown()
    finally:
        browser.quit()
finally:
    daemon.terminate()
    daemon.wait(timeout=30)

if failures:
    print(f"{len(failures)} dashboard check(s) failed", file=sys.stderr)
    sys.exit(1)
print("dashboard: every check passed; screenshots in " + ARTIFACTS)
