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

    # A file's diff: notes.md, v1 -> v2.
    link_el = wait("notes.md in the timeline", lambda: next(
        (b for b in driver.find_elements(By.CSS_SELECTOR, "#events button.link") if b.text == "notes.md"), None))
    link_el.click()
    wait("the versions of notes.md", lambda: len(rows("versions")) >= 2)
    driver.find_element(By.ID, "diff-run").click()
    wait("the unified diff", lambda: "+two" in driver.find_element(By.ID, "diff").text)
    driver.save_screenshot(os.path.join(shots, "diff.png"))
    driver.find_element(By.ID, "side").click()
    driver.find_element(By.ID, "diff-run").click()
    wait("the side-by-side diff", lambda: len(driver.find_elements(By.CSS_SELECTOR, "#diff .side")) == 1)

    # Actions (the server runs with --allow-actions): restore v1, confirmed first.
    restore_v1 = [r for r in rows("versions") if r.find_element(By.XPATH, "./td[3]").text == "v1"][0]
    restore_v1.find_element(By.CSS_SELECTOR, "button.restore").click()
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
    reason = rows("refused")[0].find_element(By.CSS_SELECTOR, "td.reason").text
    assert "agent" in reason, reason
    driver.save_screenshot(os.path.join(shots, "refusals.png"))

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
    # why of a key, as a tree.
    driver.find_element(By.CSS_SELECTOR, "#keys button.link").click()
    wait("why", lambda: "get_order" in driver.find_element(By.ID, "why").text)

    # Keyboard: the tabs move with the arrow keys.
    tab = driver.find_element(By.CSS_SELECTOR, "#tabs button[data-tab=ground]")
    tab.send_keys("\ue012")  # ArrowLeft
    wait("the checkpoints tab by keyboard", lambda: driver.find_element(By.ID, "checkpoints").is_displayed())

    # A phone-width window: everything still on the page.
    driver.set_window_size(390, 844)
    driver.find_element(By.CSS_SELECTOR, "#tabs button[data-tab=timeline]").click()
    wait("the timeline at phone width", lambda: len(rows("events")) > 0)
    width = driver.execute_script("return document.documentElement.scrollWidth")
    assert width <= 400, f"the page is {width} px wide at 390"
    driver.save_screenshot(os.path.join(shots, "phone.png"))

    # Nothing reached the console as an error.
    errors = [e for e in driver.get_log("browser") if e.get("level") == "SEVERE"]
    assert not errors, errors
    print("browser: all checks passed")
finally:
    driver.quit()
