"""``moeplan serve`` in a real browser: Debian's headless Chromium, driven through chromedriver by
Selenium, loads the page from a server started in-process on a free localhost port, fills the form for
DeepSeek-V3 at 128K tokens on 256 H100 (FP8 blockwise), presses Plan, and finds the verdict, the
memory chart (a stacked bar per pipeline stage, with its legend), the step-time chart and the plan
table; then sorts the table, clicks another candidate, opens the Bridge overrides, and shows a bad
value beside its field. Screenshots go to ``tests/artifacts/`` (git-ignored).

`.ci/run` installs ``chromium`` and ``chromium-driver`` from Debian's packages. When they (or Selenium)
are not there, or chromium does not start, the tests skip, saying why; with ``MOEPLAN_REQUIRE_TOOLS``
set (`.ci/run` sets it) they fail instead. Selenium is given both paths, so it never tries to download
a browser or a driver.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from tests.conftest import REQUIRE_TOOLS, missing_tool

ARTIFACTS = Path(__file__).resolve().parent / "artifacts"
NO_BROWSER = (
    "no browser: Debian's chromium and chromium-driver are not installed (.ci/run installs them: "
    "apt-get install chromium chromium-driver)"
)
WIDTH, HEIGHT = 1280, 800
#: seconds to wait for the plan (about 1.5 s of search on 2 cores; slack for a loaded machine)
PLAN_WAIT = 120

try:
    from selenium import webdriver
    from selenium.common.exceptions import WebDriverException
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as EC
    from selenium.webdriver.support.ui import Select, WebDriverWait

    SELENIUM = None
except ImportError as exc:  # pragma: no cover - the test extra installs it
    SELENIUM = f"selenium is not installed ({exc}): pip install -e '.[test]'"


def _browser_paths() -> tuple[str, str]:
    """The paths of chromium and chromedriver on ``PATH``; without them (or without Selenium) the
    calling test skips, or fails under ``MOEPLAN_REQUIRE_TOOLS`` (tests.conftest.missing_tool)."""
    if SELENIUM is not None:
        missing_tool(SELENIUM)
    chromium = next((p for p in map(shutil.which, ("chromium", "chromium-browser")) if p), None)
    chromedriver = shutil.which("chromedriver")
    if chromium is None or chromedriver is None:
        missing_tool(NO_BROWSER)
    return chromium, chromedriver


@pytest.fixture(scope="module")
def server_url():
    from moeplan.web import serve_in_thread

    with serve_in_thread() as url:
        yield url


@pytest.fixture(scope="module")
def browser():
    chromium, chromedriver = _browser_paths()
    os.environ.setdefault("SE_OFFLINE", "true")  # Selenium Manager: never look anything up online
    opts = webdriver.ChromeOptions()
    opts.binary_location = chromium
    for arg in (
        "--headless=new",
        "--no-sandbox",  # CI runs as root
        "--disable-dev-shm-usage",
        "--disable-gpu",
        f"--window-size={WIDTH},{HEIGHT}",
        "--force-device-scale-factor=1",
        "--hide-scrollbars",
    ):
        opts.add_argument(arg)
    try:
        driver = webdriver.Chrome(service=Service(executable_path=chromedriver), options=opts)
    except WebDriverException as exc:
        missing_tool(f"chromium did not start headless: {exc.msg}")
    _viewport(driver, HEIGHT)
    yield driver
    driver.quit()


def _type(driver, element_id: str, text: str) -> None:
    box = driver.find_element(By.ID, element_id)
    box.clear()
    box.send_keys(text)


def _viewport(driver, height: int) -> None:
    """The page's viewport exactly ``WIDTH`` × ``height`` CSS pixels (a window's size includes its frame)."""
    metrics = {"width": WIDTH, "height": height, "deviceScaleFactor": 1, "mobile": False}
    driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", metrics)


def _screenshot(driver, name: str, height: int = HEIGHT) -> Path:
    """A screenshot of the top ``height`` pixels of the page."""
    ARTIFACTS.mkdir(exist_ok=True)
    path = ARTIFACTS / name
    _viewport(driver, height)
    driver.execute_script("window.scrollTo(0, 0)")
    driver.save_screenshot(str(path))
    _viewport(driver, HEIGHT)
    return path


def _fill_deepseek(driver) -> None:
    Select(driver.find_element(By.ID, "f-model")).select_by_value("deepseek-ai/DeepSeek-V3")
    Select(driver.find_element(By.ID, "f-gpu")).select_by_value("h100")
    _type(driver, "f-num_gpus", "256")
    _type(driver, "f-seq_length", "131072")
    Select(driver.find_element(By.ID, "f-precision")).select_by_value("fp8-blockwise")


def test_plan_deepseek_v3_128k_on_256_h100(server_url, browser):
    d = browser
    d.get(server_url)
    wait = WebDriverWait(d, 30)
    wait.until(lambda drv: len(Select(drv.find_element(By.ID, "f-model")).options) > 10)
    assert d.title.startswith("moeplan")
    _fill_deepseek(d)
    d.find_element(By.ID, "btn-plan").click()
    WebDriverWait(d, PLAN_WAIT).until(EC.visibility_of_element_located((By.CSS_SELECTOR, "#plan-table tbody tr")))
    wait.until(lambda drv: drv.find_element(By.ID, "verdict").text.strip() != "")

    rows = d.find_elements(By.CSS_SELECTOR, "#plan-table tbody tr")
    assert len(rows) == 5
    first = rows[0].find_elements(By.TAG_NAME, "td")
    assert first[0].text == "1" and first[1].text.startswith("TP")  # rank and layout label
    assert "selected" in rows[0].get_attribute("class")
    assert d.find_element(By.ID, "verdict").text.lower() in ("valid", "warn")
    assert "DeepSeek-V3" in d.find_element(By.ID, "plan-summary").text

    # the memory chart: one stacked bar per pipeline stage, the usable-HBM line, a legend
    stages = int(first[1].text.split("PP")[1].split()[0])
    bars = d.find_elements(By.CSS_SELECTOR, "#memory-svg rect")
    assert len(bars) >= 4 * stages  # weights, grads, optimizer, activations (+ other) per stage
    legend = d.find_element(By.ID, "memory-legend").text
    for part in ("weights", "gradients", "optimizer", "activations", "other", "torch max allocated", "max reserved"):
        assert part in legend
    # the three memory figures: a tick at torch's max allocated and max reserved on every stage's bar
    assert len(d.find_elements(By.CSS_SELECTOR, "#memory-svg line.mem-tick")) == 2 * stages
    assert "max allocated" in d.find_element(By.ID, "memory-verdict").text
    assert "peak stage" in d.find_element(By.ID, "peak-items").text
    # the step-time chart and its figures
    assert d.find_elements(By.CSS_SELECTOR, "#time-svg rect")
    assert "attention" in d.find_element(By.ID, "time-items").text
    metrics = d.find_element(By.ID, "time-metrics").text
    assert "tokens/s/GPU" in metrics and "MFU" in metrics
    assert "error band" in d.find_element(By.ID, "time-band").text
    assert d.find_elements(By.CSS_SELECTOR, "#why li")  # why #1 wins
    WebDriverWait(d, 30).until(EC.invisibility_of_element_located((By.ID, "busy")))
    _screenshot(d, "serve.png")  # what a 1280 × 800 window shows
    charts_bottom = d.execute_script("return document.getElementById('charts').getBoundingClientRect().bottom")
    _screenshot(d, "serve_overview.png", int(charts_bottom) + 4)  # form, plan, check, charts (the README's)
    _screenshot(d, "serve_full.png", d.execute_script("return document.documentElement.scrollHeight"))


def test_sort_select_and_export(server_url, browser):
    d = browser
    if not d.find_elements(By.CSS_SELECTOR, "#plan-table tbody tr"):
        pytest.skip("needs the plan of the test above")
    header = d.find_element(By.CSS_SELECTOR, '#plan-table th[data-key="peak"]')
    header.click()
    cells = [r.find_elements(By.TAG_NAME, "td") for r in d.find_elements(By.CSS_SELECTOR, "#plan-table tbody tr")]
    peaks = [float(c[5].text) for c in cells]
    assert peaks == sorted(peaks)
    rows = d.find_elements(By.CSS_SELECTOR, "#plan-table tbody tr")
    target = next(r for r in rows if r.find_elements(By.TAG_NAME, "td")[0].text != "1")
    rank = target.find_elements(By.TAG_NAME, "td")[0].text
    target.click()
    WebDriverWait(d, 30).until(lambda drv: drv.find_element(By.ID, "selected-title").text == f"Candidate #{rank}")
    assert d.find_element(By.ID, "why-title").text == f"#{rank} against #1"
    d.find_element(By.CSS_SELECTOR, 'button[data-format="mbridge-overrides"]').click()
    WebDriverWait(d, 30).until(EC.visibility_of_element_located((By.ID, "export-preview")))
    text = d.find_element(By.ID, "export-preview").text
    assert "model.tensor_model_parallel_size=" in text
    assert d.find_element(By.ID, "export-name").text == "mbridge_overrides.txt"


def test_bad_value_is_shown_beside_its_field(server_url, browser):
    d = browser
    d.get(server_url)
    WebDriverWait(d, 30).until(lambda drv: len(Select(drv.find_element(By.ID, "f-model")).options) > 10)
    _fill_deepseek(d)
    _type(d, "f-sets", "tensor_model_parallel_size=three")
    d.find_element(By.ID, "btn-estimate").click()
    err = d.find_element(By.CSS_SELECTOR, '[data-error-for="sets"]')
    WebDriverWait(d, 30).until(lambda drv: err.text != "")
    assert "layout.tensor_model_parallel_size" in err.text and "not valid" in err.text
    assert "field-invalid" in d.find_element(By.ID, "f-sets").get_attribute("class")
    assert "Traceback" not in d.page_source


def test_an_uploaded_config_json_is_planned(server_url, browser, tmp_path):
    """A model outside the catalog: its config.json chosen in the page is read there and sent as text."""
    from importlib import resources

    config = tmp_path / "my_model_config.json"
    config.write_text((resources.files("moeplan.catalog") / "data" / "models" / "Qwen__Qwen3-8B.json").read_text())
    d = browser
    d.get(server_url)
    WebDriverWait(d, 30).until(lambda drv: len(Select(drv.find_element(By.ID, "f-model")).options) > 10)
    d.find_element(By.ID, "f-config").send_keys(str(config))
    WebDriverWait(d, 10).until(lambda drv: "my_model_config.json" in drv.find_element(By.ID, "config-name").text)
    assert not d.find_element(By.ID, "f-model").is_enabled()
    _type(d, "f-num_gpus", "8")
    _type(d, "f-seq_length", "4096")
    d.find_element(By.ID, "btn-plan").click()
    WebDriverWait(d, PLAN_WAIT).until(EC.visibility_of_element_located((By.CSS_SELECTOR, "#plan-table tbody tr")))
    WebDriverWait(d, 30).until(lambda drv: drv.find_element(By.ID, "verdict").text.strip() != "")
    assert "config.json" in d.find_element(By.ID, "plan-summary").text
    assert "moeplan-web-" not in d.page_source  # the server's temporary folder never shows


def test_a_missing_browser_fails_the_browser_tests_when_tools_are_required(tmp_path, monkeypatch):
    monkeypatch.setitem(globals(), "SELENIUM", None)  # the browser alone is missing
    monkeypatch.setenv("PATH", str(tmp_path / "no-tools"))
    monkeypatch.setenv(REQUIRE_TOOLS, "1")
    with pytest.raises(pytest.fail.Exception, match=r"chromium-driver are not installed.*MOEPLAN_REQUIRE_TOOLS is set"):
        _browser_paths()


def test_a_missing_browser_skips_the_browser_tests_when_tools_are_not_required(tmp_path, monkeypatch):
    monkeypatch.setitem(globals(), "SELENIUM", None)  # the browser alone is missing
    monkeypatch.setenv("PATH", str(tmp_path / "no-tools"))
    monkeypatch.delenv(REQUIRE_TOOLS, raising=False)
    with pytest.raises(pytest.skip.Exception, match=r"apt-get install chromium chromium-driver\)$"):
        _browser_paths()


def test_the_browser_tests_find_chromium_and_its_driver_on_path(tmp_path, monkeypatch):
    """Both found on ``PATH`` (Ubuntu's ``chromium-browser`` name too): their paths, in that order."""
    for name in ("chromium-browser", "chromedriver"):
        (tmp_path / name).write_text("#!/bin/sh\n")
        (tmp_path / name).chmod(0o755)
    monkeypatch.setitem(globals(), "SELENIUM", None)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setenv(REQUIRE_TOOLS, "1")
    assert _browser_paths() == (str(tmp_path / "chromium-browser"), str(tmp_path / "chromedriver"))
