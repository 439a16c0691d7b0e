"""The consent page in a real browser (Debian's Chromium, headless, through its driver): it
renders (its screenshot is checked), and the operator's approval sends the browser to the
host's callback with `code`, `state` and `iss`, which the token endpoint then takes."""

from __future__ import annotations

import io
import shutil
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
from modal_workspace_core.config import load_settings
from modal_workspace_core.operations import new_service
from modal_workspace_core.surfaces.rest.app import create_app
from service_support import TOKEN, RecordingDriver, serving
from support.oauth_host import CALLBACK, OAuthHost, callback_query, pkce

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
DRIVER = shutil.which("chromedriver")

pytestmark = pytest.mark.skipif(
    CHROMIUM is None or DRIVER is None,
    reason="needs Chromium and its driver (Debian: apt-get install chromium chromium-driver)",
)


@pytest.fixture
def browser() -> Iterator[Any]:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=900,900"):
        options.add_argument(flag)
    # Tests run as root in a container: Chromium's own sandbox cannot start there.
    driver = webdriver.Chrome(service=Service(executable_path=str(DRIVER)), options=options)
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture
async def base(tmp_path: Path) -> AsyncIterator[str]:
    settings = load_settings({"MODAL_WORKSPACE_DATA_ROOT": str(tmp_path / "data")})
    async with serving(create_app(new_service(RecordingDriver(), settings), [TOKEN])) as url:
        yield url


def colours(png: bytes) -> int:
    from PIL import Image

    with Image.open(io.BytesIO(png)) as image:
        found = image.convert("RGB").getcolors(maxcolors=1 << 16)
    return len(found) if found is not None else 1 << 16


async def test_the_operator_approves_in_a_real_browser(
    browser: Any, base: str, tmp_path: Path
) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.wait import WebDriverWait

    async with httpx2.AsyncClient(timeout=30) as http:
        host = OAuthHost(http, base)
        await host.register(client_name="Browser <b>host</b>")
        verifier, challenge = pkce()
        consent = await host.authorize(challenge)

        browser.get(f"{base}{consent.location}")
        assert browser.title == "Connect to modal-workspace"
        # The client's name is shown as text, never as markup.
        assert "Browser <b>host</b>" in browser.find_element(By.TAG_NAME, "main").text
        shot = browser.get_screenshot_as_png()
        (tmp_path / "consent.png").write_bytes(shot)
        assert shot.startswith(b"\x89PNG") and colours(shot) > 20, "the page did not render"
        approve = browser.find_element(By.CSS_SELECTOR, "button[value=approve]")
        assert approve.is_displayed()

        browser.find_element(By.ID, "key").send_keys(TOKEN)
        approve.click()
        # The callback is the host's (nothing listens there in this test): where the browser
        # was sent is what counts.
        WebDriverWait(browser, 20).until(lambda driver: driver.current_url.startswith(CALLBACK))
        query = callback_query(browser.current_url)
        assert query["state"] == "state-123" and query["iss"] == base, query
        exchanged = await host.exchange(query["code"], verifier)
        assert exchanged.status_code == 200, exchanged.text
