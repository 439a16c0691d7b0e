"""A real browser for the pages' tests: Debian's Chromium, headless, through its driver, with
its console kept (where Chromium reports what a page's policy refused)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
DRIVER = shutil.which("chromedriver")
needs_browser = pytest.mark.skipif(
    CHROMIUM is None or DRIVER is None,
    reason="needs Chromium and its driver (Debian: apt-get install chromium chromium-driver)",
)


@contextmanager
def chromium(width: int = 1100, height: int = 900) -> Iterator[Any]:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu"):
        options.add_argument(flag)
    options.add_argument(f"--window-size={width},{height}")
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    # Tests run as root in a container: Chromium's own sandbox cannot start there.
    driver = webdriver.Chrome(service=Service(executable_path=str(DRIVER)), options=options)
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()


def policy_refusals(driver: Any) -> list[str]:
    """What the page's Content-Security-Policy refused, as the console says it."""
    console = [entry["message"] for entry in driver.get_log("browser")]
    return [m for m in console if "Content Security Policy" in m]
