"""The review page of `scratchfs web` in headless Chromium (Debian's chromium and
chromium-driver), driven by Selenium; run by tests/web.rs with the page's link (token in
its fragment), the mount, and the folder for screenshots. Each check waits for what it
expects (never a fixed time) and fails with what it saw. Prints
`browser: all checks passed` at the end."""

import os
import sys
import time

from selenium import webdriver
from selenium.common.exceptions import (NoAlertPresentException, StaleElementReferenceException,
                                        TimeoutException)
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

link, mnt, shots = sys.argv[1], sys.argv[2], sys.argv[3]

opts = webdriver.ChromeOptions()
opts.binary_location = "/usr/bin/chromium"
for flag in ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic",
             "--no-first-run", "--disable-background-networking",
             "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage",
             "--window-size=1280,800"]:
    opts.add_argument(flag)
opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=opts)
WAIT = 60


def wait(what, cond):
    try:
        # The page re-renders a table when a change streams in: an element read meanwhile
        # is stale, and is read again.
        return WebDriverWait(driver, WAIT, poll_frequency=0.05,
                             ignored_exceptions=(StaleElementReferenceException,)).until(lambda d: cond())
    except TimeoutException:
        driver.save_screenshot(os.path.join(shots, "failure.png"))
        raise AssertionError(f"waited {WAIT} s for {what}; page says: {driver.execute_script('return document.body.innerText')[:3000]}")


def rows(table):
    return driver.find_elements(By.CSS_SELECTOR, f"#{table} tbody tr")


def column(table, i):
    return driver.execute_script(
        "return [...document.querySelectorAll(arguments[0])].map((r) => r.cells[arguments[1]].innerText)",
        f"#{table} tbody tr", i)


def shifts_since(t0):
    """The layout shifts the page recorded after `t0` (performance.now()), not caused by
    input: (total score, the nodes that moved)."""
    return driver.execute_script("""
        return (window.__shifts || []).filter((e) => e.t > arguments[0])
            .reduce((a, e) => [a[0] + e.value, a[1].concat(e.nodes)], [0, []]);""", t0)


def commits(n, tag):
    """`n` appends through the mount, each its own commit."""
    for i in range(n):
        with open(os.path.join(mnt, "stream.md"), "a") as f:
            f.write(f"{tag} {i}\n")


def press(e):
    """Clicks `e` after bringing it to the middle of its box (a row at a box's edge may
    sit under the table's sticky header)."""
    driver.execute_script("arguments[0].scrollIntoView({block: 'center'})", e)
    e.click()


def texts(table):
    return driver.execute_script(
        "return [...document.querySelectorAll(arguments[0])].map((r) => r.innerText)", f"#{table} tbody tr")


try:
    driver.get(link)
    wait("the timeline", lambda: len(rows("events")) > 0)
    assert "#token" not in driver.current_url, "the token stays in the address bar"
    driver.save_screenshot(os.path.join(shots, "timeline.png"))

    # Hostile names are text: shown as written, no markup made of them, no dialog.
    body = driver.find_element(By.ID, "events").text
    assert "<img src=x onerror=alert(1)>.md" in body, body
    assert "<script>alert(2)<\\script>.md" in body, body
    assert not driver.find_elements(By.CSS_SELECTOR, "#events img"), "an img element was made of a name"
    assert "q\"uo'te.md" in body, body
    # A newline and a right-to-left override are shown as escapes: no broken line, no
    # name passing for another ("\u202egnp.md" would read "dm.png").
    assert "new\\nline.md" in body, body
    assert "\\u202egnp.md" in body and "dm.png" not in body, body
    assert len(driver.find_elements(By.TAG_NAME, "script")) == 1, "a script element was injected"
    try:
        driver.switch_to.alert
        raise AssertionError("a dialog opened")
    except NoAlertPresentException:
        pass

    # A commit through the mount appears without a reload.
    before = len(rows("events"))
    marker = driver.execute_script("window.__same_page = 42; return window.__same_page;")
    started = time.monotonic()
    with open(os.path.join(mnt, "live-proof.md"), "w") as f:
        f.write("written while the page was open\n")
    wait("the new commit on the page", lambda: "live-proof.md" in driver.find_element(By.ID, "events").text)
    seen_after = time.monotonic() - started
    assert driver.execute_script("return window.__same_page;") == marker, "the page was reloaded"
    print(f"browser: a commit appeared on the page after {seen_after:.3f} s")
    # Newest at the bottom, as `scratchfs log` prints it.
    assert "live-proof.md" in rows("events")[-1].text, rows("events")[-1].text

    # No layout shift while commits stream in (Layout Instability API: every shift not
    # caused by input counts), with the timeline shown; then with a file open beside it.
    driver.execute_script("""
        window.__shifts = [];
        new PerformanceObserver((l) => { for (const e of l.getEntries()) if (!e.hadRecentInput)
          window.__shifts.push({ t: e.startTime, value: e.value,
            nodes: e.sources.map((s) => s.node ? (s.node.id || s.node.nodeName + "." + s.node.className) : "?") }); })
          .observe({ type: "layout-shift", buffered: true });""")
    t0 = driver.execute_script("return performance.now()")
    commits(12, "timeline")
    wait("the streamed commits", lambda: rows("events")[-1].text.find("stream.md") >= 0
         and len([r for r in column("events", 2) if r == "stream.md"]) >= 12)
    score, moved = shifts_since(t0)
    assert score == 0, f"layout shift {score} while commits streamed in: {moved}"

    # The same with stream.md open beside the timeline: its versions stream in too.
    wait("stream.md in the timeline", lambda: next(
        (b for b in driver.find_elements(By.CSS_SELECTOR, "#events button.link") if b.text == "stream.md"), None))
    press(driver.find_element(By.XPATH, "//table[@id='events']//button[text()='stream.md']"))
    wait("the versions of stream.md", lambda: len(rows("versions")) >= 12)
    t0 = driver.execute_script("return performance.now() + 600")  # past the click's input window
    wait("the input window to pass", lambda: driver.execute_script("return performance.now()") > t0)
    commits(12, "panel")
    wait("the versions streamed in", lambda: len(rows("versions")) >= 24)
    score, moved = shifts_since(t0)
    assert score == 0, f"layout shift {score} with a file open: {moved}"
    print("browser: no layout shift while 24 commits streamed in")

    # A file's diff: notes.md, v1 -> v2.
    link_el = wait("notes.md in the timeline", lambda: next(
        (b for b in driver.find_elements(By.CSS_SELECTOR, "#events button.link") if b.text == "notes.md"), None))
    press(link_el)
    wait("the versions of notes.md", lambda: len(rows("versions")) >= 2)
    driver.find_element(By.ID, "diff-run").click()
    wait("the unified diff", lambda: "+two" in driver.find_element(By.ID, "diff").text)
    driver.save_screenshot(os.path.join(shots, "diff.png"))
    driver.find_element(By.ID, "side").click()
    driver.find_element(By.ID, "diff-run").click()
    wait("the side-by-side diff", lambda: len(driver.find_elements(By.CSS_SELECTOR, "#diff .side")) == 1)

    # Actions (the server runs with --allow-actions): restore v1, confirmed first.
    restore_v1 = [r for r in rows("versions") if r.find_element(By.XPATH, "./td[3]").text == "v1"][0]
    press(restore_v1.find_element(By.CSS_SELECTOR, "button.restore"))
    wait("the confirmation", lambda: driver.find_element(By.ID, "confirm").is_displayed())
    asked = driver.find_element(By.ID, "confirm-text").text
    assert "notes.md" in asked and "v1" in asked, asked
    driver.find_element(By.ID, "confirm-yes").click()
    wait("the restored version", lambda: "restore" in column("versions", 3))
    with open(os.path.join(mnt, "notes.md")) as f:
        assert f.read() == "one\n", "the restore through the page"
    driver.save_screenshot(os.path.join(shots, "restore.png"))

    # A checkpoint taken from the page, then compared with now after a change.
    driver.find_element(By.CSS_SELECTOR, "#tabs button[data-tab=checkpoints]").click()
    wait("the checkpoint form", lambda: driver.find_element(By.ID, "take").is_displayed())
    driver.find_element(By.CSS_SELECTOR, "#take input[name=name]").send_keys("before-edit")
    driver.find_element(By.CSS_SELECTOR, "#take button").click()
    wait("the new checkpoint", lambda: any("before-edit" in t for t in texts("cps")))
    with open(os.path.join(mnt, "notes.md"), "a") as f:
        f.write("after the checkpoint\n")
    row = [r for r in rows("cps") if "before-edit" in r.text][0]
    row.find_elements(By.CSS_SELECTOR, "button.link")[0].click()
    wait("the compare", lambda: "changed: notes.md" in driver.find_element(By.ID, "compare").text)
    # Any two checkpoints: a second one, then before-edit -> after-edit, with the diff.
    driver.find_element(By.CSS_SELECTOR, "#take input[name=name]").send_keys("after-edit")
    driver.find_element(By.CSS_SELECTOR, "#take button").click()
    wait("the second checkpoint", lambda: "after-edit" in driver.find_element(By.ID, "cmp-to").text)
    driver.execute_script("""
        document.getElementById('cmp-from').value = 'before-edit';
        document.getElementById('cmp-to').value = 'after-edit';""")
    driver.find_element(By.CSS_SELECTOR, "#compare-form button").click()
    wait("the compare of two checkpoints", lambda: "before-edit → after-edit" in driver.find_element(By.ID, "compare").text)
    items = driver.find_element(By.ID, "compare-list").text
    assert "changed: notes.md" in items and "stream.md" not in items, items
    driver.find_element(By.CSS_SELECTOR, "#compare-list button.link").click()
    wait("the diff between the checkpoints", lambda: "after the checkpoint" in driver.find_element(By.ID, "compare-diff").text)
    driver.save_screenshot(os.path.join(shots, "checkpoints.png"))
    # A rollback asks first, naming what changes; cancelled here.
    row = [r for r in rows("cps") if "before-edit" in r.text][0]
    row.find_elements(By.CSS_SELECTOR, "button.link")[1].click()
    wait("the rollback's confirmation", lambda: "notes.md" in driver.find_element(By.ID, "confirm-list").text)
    driver.find_element(By.ID, "confirm-no").click()
    with open(os.path.join(mnt, "notes.md")) as f:
        assert f.read().endswith("after the checkpoint\n"), "a cancelled rollback changed nothing"

    # The refusal, with its reason.
    driver.find_element(By.CSS_SELECTOR, "#tabs button[data-tab=refusals]").click()
    wait("the refusal", lambda: any("state.json" in t and "agent" in t for t in texts("refused")))
    reason = wait("the refusal's reason", lambda: next(
        (r.find_element(By.CSS_SELECTOR, "td.reason").text for r in rows("refused")
         if "state.json" in r.text), None))
    assert "agent" in reason, reason
    # The content a refusal kept: small.txt past its max_bytes.
    small = wait("the refusal of small.txt", lambda: next((r for r in rows("refused") if "small.txt" in r.text), None))
    press(small.find_element(By.CSS_SELECTOR, "button.content"))
    wait("the refused content", lambda: "too long for it" in driver.find_element(By.ID, "refused-content").text)
    driver.save_screenshot(os.path.join(shots, "refusals.png"))

    # Plots: versions per minute by writer, bytes over time, a sparkline per busy file.
    driver.find_element(By.CSS_SELECTOR, "#tabs button[data-tab=activity]").click()
    wait("the rate plot", lambda: len(driver.find_elements(By.CSS_SELECTOR, "#rate-svg rect")) > 0)
    legend = driver.find_element(By.ID, "rate-legend").text
    assert "get_order" in legend and "anonymous" in legend, legend
    assert len(driver.find_elements(By.CSS_SELECTOR, "#bytes-svg polyline")) == 3
    assert "live" in driver.find_element(By.ID, "bytes-legend").text
    busiest = texts("busiest")
    assert busiest and "stream.md" in busiest[0], busiest
    assert len(driver.find_elements(By.CSS_SELECTOR, "#busiest svg.spark polyline")) == len(busiest)
    driver.save_screenshot(os.path.join(shots, "activity.png"))
    # And no layout shift while the plots follow a commit.
    t0 = driver.execute_script("return performance.now() + 600")
    wait("the input window to pass", lambda: driver.execute_script("return performance.now()") > t0)
    bars = len(driver.find_elements(By.CSS_SELECTOR, "#rate-svg rect"))
    commits(3, "activity")
    wait("the plot following", lambda: sum(int(x) for x in driver.execute_script(
        "return [...document.querySelectorAll('#busiest tbody tr')].map((r) => r.cells[1].innerText)")[:1]) >= 27)
    score, moved = shifts_since(t0)
    assert score == 0, f"layout shift {score} on the activity tab: {moved}"

    # A number followed to its source, and the source opened.
    driver.find_element(By.CSS_SELECTOR, "#tabs button[data-tab=ground]").click()
    driver.find_element(By.ID, "reply").send_keys("We refund $180 of 36000 cents on order O-9, not 777.")
    driver.find_element(By.ID, "ground-run").click()
    wait("the grounding", lambda: len(driver.find_elements(By.CSS_SELECTOR, "#ground-table tr")) >= 3)
    table = driver.find_element(By.ID, "ground-table").text
    assert "36000 sourced state.json order_total_cents = 36000" in table, table
    assert "777 UNSOURCED" in table, table
    source = driver.find_elements(By.CSS_SELECTOR, "#ground-table button.source")[0]
    source.click()
    wait("the source's file", lambda: driver.find_element(By.ID, "file-name").text == "state.json")
    wait("its keys and who set them", lambda: any("get_order" in t for t in texts("keys")))
    driver.save_screenshot(os.path.join(shots, "ground.png"))
    # why of a key: a graph (the version that set it -> the key) and a tree in words.
    total = [r for r in rows("keys") if "order_total_cents" in r.text][0]
    press(total.find_element(By.CSS_SELECTOR, "button.link"))
    wait("why", lambda: "get_order" in driver.find_element(By.ID, "why").text)
    graph = wait("why's graph", lambda: driver.find_element(By.ID, "why-graph"))
    assert len(graph.find_elements(By.CSS_SELECTOR, "g.node.key")) == 1
    assert len(graph.find_elements(By.CSS_SELECTOR, "g.node.version")) >= 1
    assert "order_total_cents" in graph.get_attribute("textContent"), graph.get_attribute("textContent")
    # why of a file whose writer read another: report.md <- read state.json.
    report = driver.execute_script("""
        return [...document.querySelectorAll('#events button.link')].find((b) => b.textContent === 'report.md')""")
    driver.find_element(By.CSS_SELECTOR, "#tabs button[data-tab=timeline]").click()
    press(report)
    wait("report.md open", lambda: driver.find_element(By.ID, "file-name").text == "report.md")
    driver.find_element(By.ID, "file-why").click()
    wait("why report.md", lambda: "report.md" in driver.find_element(By.ID, "why").text
         and len(driver.find_elements(By.CSS_SELECTOR, "#why-graph g.node.version")) >= 2)
    graph = driver.find_element(By.ID, "why-graph").get_attribute("textContent")
    assert "state.json@" in graph and "read" in graph, graph
    assert len(driver.find_elements(By.CSS_SELECTOR, "#why-graph path.edge")) >= 1
    driver.save_screenshot(os.path.join(shots, "why.png"))

    # why of a key adopted from a fork: the adopt here, and get_order there.
    adopted = driver.execute_script("""
        return [...document.querySelectorAll('#events button.link')].find((b) => b.textContent === 'adopted.json')""")
    assert adopted is not None, "adopted.json in the timeline"
    press(adopted)
    price = wait("adopted.json's keys", lambda: next((r for r in rows("keys") if "price_cents" in r.text), None))
    # The key is credited as why credits it: to get_order in the fork, not the adopter.
    assert "get_order" in price.text and "adopted from" in price.text, price.text
    press(price.find_element(By.CSS_SELECTOR, "button.link"))
    wait("why of the adopted key", lambda: "adopted from" in driver.find_element(By.ID, "why").text)
    graph = driver.find_element(By.ID, "why-graph").get_attribute("textContent")
    assert "adopted from" in graph and "get_order" in graph and "adopt by" in graph, graph
    assert len(driver.find_elements(By.CSS_SELECTOR, "#why-graph g.node.version")) >= 2, graph
    driver.save_screenshot(os.path.join(shots, "why-adopted.png"))

    # Restore of a file whose name is not UTF-8: its exact bytes go to the server.
    bad = driver.execute_script("""
        return [...document.querySelectorAll('#events button.link')].find((b) => b.textContent === 'bad\ufffd.md')""")
    assert bad is not None, "bad\\xff.md in the timeline"
    press(bad)
    wait("bad\\xff.md's versions", lambda: len(rows("versions")) >= 2)
    v1 = [r for r in rows("versions") if r.find_element(By.XPATH, "./td[3]").text == "v1"][0]
    press(v1.find_element(By.CSS_SELECTOR, "button.restore"))
    wait("the confirmation", lambda: driver.find_element(By.ID, "confirm").is_displayed())
    driver.find_element(By.ID, "confirm-yes").click()
    wait("the restored version", lambda: "restore" in column("versions", 3))
    with open(os.path.join(mnt.encode(), b"bad\xff.md"), "rb") as f:
        assert f.read() == b"x\n", "the restore of bad\\xff.md through the page"

    # Keyboard: the tabs move with the arrow keys.
    tab = driver.find_element(By.CSS_SELECTOR, "#tabs button[data-tab=ground]")
    tab.send_keys("\ue012")  # ArrowLeft
    wait("the checkpoints tab by keyboard", lambda: driver.find_element(By.ID, "checkpoints").is_displayed())

    # A phone-width window: everything still on the page.
    # (A window cannot be narrower than 500 px: the phone's viewport is emulated.)
    driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                           {"width": 390, "height": 844, "deviceScaleFactor": 1, "mobile": True})
    wait("a 390 px viewport", lambda: driver.execute_script("return innerWidth") == 390)
    driver.find_element(By.CSS_SELECTOR, "#tabs button[data-tab=timeline]").click()
    wait("the timeline at phone width", lambda: len(rows("events")) > 0)
    width = driver.execute_script("return document.documentElement.scrollWidth")
    assert width <= 400, f"the page is {width} px wide at 390"
    driver.save_screenshot(os.path.join(shots, "phone.png"))
    # The refusals keep their reasons; the plots fit.
    driver.find_element(By.CSS_SELECTOR, "#tabs button[data-tab=refusals]").click()
    # The row found and its reason read in one go: the table may re-render in between
    # (a stale row, read again, where reading the reason after the wait failed once).
    shown, text = wait("a refusal at phone width", lambda: next(
        ((c.is_displayed(), c.text) for r in rows("refused") if "state.json" in r.text
         for c in [r.find_element(By.CSS_SELECTOR, "td.reason")]), None))
    assert shown and "agent" in text, text
    driver.save_screenshot(os.path.join(shots, "phone-refusals.png"))
    driver.find_element(By.CSS_SELECTOR, "#tabs button[data-tab=activity]").click()
    wait("the plots at phone width", lambda: len(driver.find_elements(By.CSS_SELECTOR, "#rate-svg rect")) > 0)
    width = driver.execute_script("return document.documentElement.scrollWidth")
    assert width <= 400, f"the activity tab is {width} px wide at 390"
    driver.save_screenshot(os.path.join(shots, "phone-activity.png"))

    # Nothing reached the console as an error.
    errors = [e for e in driver.get_log("browser") if e.get("level") == "SEVERE"]
    assert not errors, errors
    print("browser: all checks passed")
finally:
    driver.quit()
