"""bgd's dashboard in headless Chromium, and /metrics through prometheus_client's parser.

A real bgd (temporary state directory, --http on a free loopback port) with the fixture app:
a seeded history (fetches and opens), then the checks the issue names — pages load with no
console errors, show the apps and a timeline with one mark per seeded event, update without a
reload when something happens; unauthenticated requests get 401; the listener refuses a
non-loopback address; /metrics parses and its counters move. Screenshots: $ARTIFACTS.
"""
import json
import os
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

    # A seeded history: three fetches and two opens.
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
    for argument in ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1200,1400"]:
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
        browser.save_screenshot(f"{ARTIFACTS}/overview.png")
        check(not severe(browser.get_log("browser")), "no console errors on the overview")

        browser.get(f"http://127.0.0.1:{PORT}/apps/{APP}")
        runs = browser.find_elements(By.CSS_SELECTOR, "svg.timeline .mark.run")
        opens = browser.find_elements(By.CSS_SELECTOR, "svg.timeline .mark.open")
        check(len(runs) == 4, f"the app's timeline has a mark per wake (4, got {len(runs)})")
        check(len(opens) == 2, f"and per open (2, got {len(opens)})")
        reasons = browser.find_elements(By.CSS_SELECTOR, "#why li .code")
        check(len(reasons) >= 1, f"the next wake shows its reasons ({[r.text for r in reasons]})")
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

        # Readable on a phone: the page fits a narrow window without horizontal scrolling of the body.
        browser.set_window_size(390, 844)
        browser.get(f"http://127.0.0.1:{PORT}/")
        overflow = browser.execute_script("return document.documentElement.scrollWidth - document.documentElement.clientWidth")
        check(overflow <= 1, f"the overview fits a phone's width (overflow {overflow}px)")
        browser.save_screenshot(f"{ARTIFACTS}/overview-phone.png")
    finally:
        browser.quit()
finally:
    daemon.terminate()
    daemon.wait(timeout=30)

if failures:
    print(f"{len(failures)} dashboard check(s) failed", file=sys.stderr)
    sys.exit(1)
print("dashboard: every check passed; screenshots in " + ARTIFACTS)
