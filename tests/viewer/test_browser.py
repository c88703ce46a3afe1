"""The viewer page in a real headless Chromium (Debian's chromium and chromedriver).

Run by ``make test-browser`` (marker ``browser``, deselected by ``make test``). A browser
that cannot start fails these tests; they never skip. The network is blocked: every host
resolves to nothing and every proxied request goes to a closed port.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

import bindscope
from bindscope.interventions import Zero
from tests.viewer.conftest import TEXT, write_results, write_unit_maps

pytestmark = pytest.mark.browser

CHROMIUM = os.environ.get("BINDSCOPE_CHROMIUM", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("BINDSCOPE_CHROMEDRIVER", "/usr/bin/chromedriver")
# Stored weights are round(w * 1e6) / 1e6; the page prints them with 6 decimals.
ROUNDING = 5e-7 + 1e-7


@pytest.fixture(scope="module")
def browser():
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    os.environ["SE_OFFLINE"] = "true"  # Selenium Manager: never download a driver or browser
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1400,1000",
                 "--host-resolver-rules=MAP * ~NOTFOUND", "--proxy-server=127.0.0.1:9",
                 "--disable-background-networking", "--disable-dev-shm-usage"):  # fmt: skip
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL", "performance": "ALL"})
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    yield driver
    driver.quit()


@pytest.fixture(scope="module")
def page(tmp_path_factory, llama_tiny) -> Path:
    out = tmp_path_factory.mktemp("viewer")
    write_results(out, llama_tiny)
    return bindscope.view(llama_tiny, results=out, intervene=Zero([(1, 0)])).save(out / "page.html")


def open_page(driver, path: Path) -> None:
    from selenium.webdriver.support.ui import WebDriverWait

    driver.get_log("browser"), driver.get_log("performance")  # empty both logs
    driver.get(path.as_uri())
    WebDriverWait(driver, 20).until(
        lambda d: d.find_element("tag name", "body").get_attribute("data-ready") == "1"
    )


def requests(driver) -> list[str]:
    """Every URL the page asked for, from the DevTools performance log."""
    urls = []
    for entry in driver.get_log("performance"):
        message = json.loads(entry["message"])["message"]
        if message["method"] == "Network.requestWillBeSent":
            urls.append(message["params"]["request"]["url"])
    return urls


def test_page_opens_offline_with_no_console_errors(browser, page):
    open_page(browser, page)
    errors = [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]
    assert errors == []
    urls = requests(browser)
    assert urls and all(u.startswith(("file:", "data:")) for u in urls), urls


def test_the_request_check_sees_a_fetch(browser, tmp_path):
    # negative control: a page that fetches shows the request (and its error) in the logs
    fetching = tmp_path / "fetching.html"
    fetching.write_text('<body data-ready="1"><img src="http://example.invalid/x.png"></body>')
    open_page(browser, fetching)
    assert any(u.startswith("http://example.invalid") for u in requests(browser))


def hover_cell(driver, canvas, query: int, key: int) -> None:
    from selenium.webdriver.common.action_chains import ActionChains

    left, top, cell = (int(canvas.get_attribute(a)) for a in ("data-left", "data-top", "data-cell"))
    size = canvas.size  # offsets count from the element's centre
    x = left + (key + 0.5) * cell - size["width"] / 2
    y = top + (query + 0.5) * cell - size["height"] / 2
    ActionChains(driver).move_to_element_with_offset(canvas, int(x), int(y)).perform()


@pytest.mark.parametrize("run", [0, 1])
def test_hover_shows_the_stored_weight(browser, page, llama_tiny, run):
    open_page(browser, page)
    browser.find_element("css selector", '.thumb[data-layer="2"][data-head="1"]').click()
    canvas = browser.find_element("id", f"pattern-{run}")
    browser.execute_script("arguments[0].scrollIntoView({block: 'center'})", canvas)
    hover_cell(browser, canvas, 7, 3)
    hover = browser.find_element("id", f"hover-{run}")
    assert 'query 7 "' in hover.text and "→ key 3" in hover.text and "L2 H1" in hover.text
    spec = Zero([(1, 0)]) if run else None
    expected = float(llama_tiny.attention_probs([TEXT], intervene=spec)[0][2, 1, 7, 3])
    assert abs(float(hover.get_attribute("data-weight")) - expected) <= ROUNDING


@pytest.mark.parametrize("name", ["c5", "scan", "patching"])
def test_clicking_a_head_map_cell_opens_that_head(browser, page, name):
    open_page(browser, page)
    title = browser.find_element("id", "pattern-title")
    assert title.text.startswith("Layer 0, head 0")
    cell = browser.find_element(
        "css selector", f'.map-cell[data-map="{name}"][data-layer="2"][data-head="3"]'
    )
    browser.execute_script("arguments[0].scrollIntoView({block: 'center'})", cell)
    cell.click()
    assert title.text.startswith("Layer 2, head 3")
    selected = browser.find_element("css selector", ".thumb.selected")
    assert (selected.get_attribute("data-layer"), selected.get_attribute("data-head")) == (
        "2", "3")  # fmt: skip


def test_a_position_map_cell_opens_no_head(browser, llama_tiny, tmp_path):
    write_unit_maps(tmp_path, llama_tiny)
    open_page(browser, bindscope.view(llama_tiny, TEXT, results=tmp_path).save(tmp_path / "p.html"))
    cell = browser.find_element(
        "css selector", '.map-cell[data-map="patching"][data-layer="2"][data-head="3"]'
    )
    browser.execute_script("arguments[0].scrollIntoView({block: 'center'})", cell)
    cell.click()  # its columns are positions from the end, not heads
    assert browser.find_element("id", "pattern-title").text.startswith("Layer 0, head 0")
    assert browser.get_log("browser") == []


def test_the_circuit_slider_changes_the_edge_count(browser, page):
    from selenium.webdriver.common.keys import Keys

    open_page(browser, page)
    edges = lambda: len(browser.find_elements("css selector", "#circuit-svg .edge"))  # noqa: E731
    slider = browser.find_element("id", "circuit-slider")
    assert edges() == int(slider.get_attribute("value")) == 7  # every edge: 7 < 20
    browser.execute_script("arguments[0].scrollIntoView({block: 'center'})", slider)
    slider.send_keys(Keys.HOME)
    assert edges() == 1
    slider.send_keys(Keys.RIGHT)
    assert edges() == 2
    assert "keeps 0.200" in browser.find_element("id", "circuit-faithfulness").text
    labels = {n.text for n in browser.find_elements("css selector", "#circuit-svg .node text")}
    assert {"embed", "logits", "L1.H3", "L2.g0.k", "MLP1"} <= labels


@pytest.mark.slow
def test_smollm2_page_at_40_tokens(browser, smollm2, tmp_path):
    text = " ".join(["In web accessibility, a screen reader reads the page aloud."] * 4)
    text = smollm2.tokenizer.decode(smollm2.tokenize(text)[:40])
    spec = Zero([(9, 3), (10, 1)])
    path = bindscope.view(smollm2, text, intervene=spec).save(tmp_path / "smollm2.html")
    assert path.stat().st_size < 2_000_000
    open_page(browser, path)
    assert [e for e in browser.get_log("browser") if e["level"] == "SEVERE"] == []
    assert len(browser.find_elements("css selector", ".thumb")) == 270
    browser.find_element("css selector", '.thumb[data-layer="11"][data-head="4"]').click()
    canvas = browser.find_element("id", "pattern-1")
    browser.execute_script("arguments[0].scrollIntoView({block: 'center'})", canvas)
    hover_cell(browser, canvas, 39, 20)
    shown = float(browser.find_element("id", "hover-1").get_attribute("data-weight"))
    expected = float(smollm2.attention_probs([text], intervene=spec)[0][11, 4, 39, 20])
    assert abs(shown - expected) <= ROUNDING
