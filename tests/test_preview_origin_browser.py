"""A preview in a real browser (Debian's Chromium, headless, through its driver): the app's own
script, on the preview's host name, reads its own files, and cannot read the gateway's pages
(by the name the gateway was reached by, or by `localhost`, the same site) nor another
preview's, the same workspace's other port: the browser's same-origin policy keeps them apart.
Chromium resolves `*.localhost` to loopback itself."""

from __future__ import annotations

import asyncio
import json
import shutil
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

import httpx2
import pytest
from test_previews import Api, LocalhostNames, gateway

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
DRIVER = shutil.which("chromedriver")

pytestmark = pytest.mark.skipif(
    CHROMIUM is None or DRIVER is None,
    reason="needs Chromium and its driver (Debian: apt-get install chromium chromium-driver)",
)

# The app's page: its script tries each URL it is given and says what it could read.
PROBE = """<!doctype html><title>probe</title><script>
const wanted = JSON.parse(decodeURIComponent(location.hash.slice(1)));
(async () => {
  const seen = {};
  for (const [name, url] of Object.entries(wanted)) {
    try {
      const answer = await fetch(url);
      seen[name] = "read " + answer.status + ": " + (await answer.text()).slice(0, 40);
    } catch (err) {
      seen[name] = "refused";
    }
  }
  document.title = "done";
  window.seen = seen;
})();
</script>"""


@pytest.fixture
def browser() -> Iterator[Any]:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu"):
        options.add_argument(flag)
    # Tests run as root in a container: Chromium's own sandbox cannot start there.
    driver = webdriver.Chrome(service=Service(executable_path=str(DRIVER)), options=options)
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture
async def api(tmp_path: Path) -> AsyncIterator[Api]:
    async with gateway(tmp_path) as api:
        yield api


async def test_a_previews_script_cannot_read_the_gateway_or_another_preview(
    api: Api, browser: Any
) -> None:
    from selenium.webdriver.support.wait import WebDriverWait

    ws = await api.workspace([8000, 8001])
    await api.write(ws, "site/probe.html", PROBE)
    await api.write(ws, "site/mine.txt", "the app's own file")
    await api.write(ws, "other/index.html", "the other port's page")
    await api.serve(ws, "cd /workspace/site && exec python3 -m http.server 8000 --bind 127.0.0.1")
    await api.serve(ws, "cd /workspace/other && exec python3 -m http.server 8001 --bind 127.0.0.1")
    link, other = (await api.link(ws, 8000))["url"], (await api.link(ws, 8001))["url"]
    async with httpx2.AsyncClient(timeout=30, transport=LocalhostNames()) as client:
        for url in (link, other):
            async with asyncio.timeout(30):
                while (await client.get(url)).status_code != 200:
                    await asyncio.sleep(0.2)
    port = urlsplit(api.base).port
    wanted = {
        "own": "mine.txt",
        "gateway": api.base + "/",
        "gateway by localhost": f"http://localhost:{port}/",
        "gateway health": f"http://localhost:{port}/healthz",
        "other preview": other,
    }
    url = link + "probe.html#" + quote(json.dumps(wanted))

    def visit() -> dict[str, str]:
        browser.get(url)
        WebDriverWait(browser, 20).until(lambda d: d.title == "done")
        seen: dict[str, str] = browser.execute_script("return window.seen")
        return seen

    seen = await asyncio.to_thread(visit)
    assert seen["own"] == "read 200: the app's own file", seen
    for name in ("gateway", "gateway by localhost", "gateway health", "other preview"):
        assert seen[name] == "refused", (name, seen)
