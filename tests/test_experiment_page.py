"""An experiment run's page for people, through a served gateway on the local driver with the
real agent: `experiment_page_url` (REST, with the bearer token) mints a ticket; the page opens
in a real browser (Debian's Chromium, headless) without the token, shows the run (its name as
text, however hostile), its metrics and its plot (the screenshot is checked), and follows a
running run to its end without being reloaded. A ticket for another run, another workspace or
another purpose, altered or expired, is refused with one answer that says nothing more."""

from __future__ import annotations

import asyncio
import io
import re
import shutil
import time
from collections.abc import AsyncIterator, Iterator
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import httpx2
import pytest
from modal_workspace_core import _core
from modal_workspace_core.config import Settings, load_settings
from modal_workspace_core.errors import PermissionDeniedError
from modal_workspace_core.operations import open_service
from modal_workspace_core.operations.experiment_page import PAGE_ROUTE, PURPOSE
from modal_workspace_core.operations.machinery import tickets
from modal_workspace_core.surfaces.http_serving import _path_with_query
from modal_workspace_core.surfaces.rest.app import create_app
from service_support import TOKEN, serving

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
DRIVER = shutil.which("chromedriver")
needs_browser = pytest.mark.skipif(
    CHROMIUM is None or DRIVER is None,
    reason="needs Chromium and its driver (Debian: apt-get install chromium chromium-driver)",
)

# A name a page that took markup from the workspace would run.
HOSTILE = "<script>window.pwned=1</script><b>bold</b>"
QUICK = 'for i in 1 2 3 4; do echo "::metric loss=$((16 / i)) acc=$((i * 20))"; done'
# Long enough for the page to see it running, short enough to see it end.
SLOW = 'for i in 1 2 3 4 5 6; do echo "::metric loss=$((36 / i))"; sleep 1; done'


class Api:
    def __init__(self, base: str, client: httpx2.AsyncClient, settings: Settings) -> None:
        self.base, self.client, self.settings = base, client, settings

    async def workspace(self) -> str:
        made = await self.client.post("/api/workspaces", json={})
        assert made.status_code == 200, made.text
        return str(made.json()["workspace_id"])

    async def start(self, ws: str, command: str, name: str = "") -> str:
        body = {"command": command, "name": name}
        started = await self.client.post(f"/api/workspaces/{ws}/experiments", json=body)
        assert started.status_code == 200, started.text
        return str(started.json()["run_id"])

    async def state(self, ws: str, run: str) -> str:
        got = await self.client.get(f"/api/workspaces/{ws}/experiments/{run}")
        return str(got.json()["state"])

    async def finished(self, ws: str, command: str, name: str = "") -> str:
        run = await self.start(ws, command, name)
        async with asyncio.timeout(60):
            while await self.state(ws, run) == "running":
                await asyncio.sleep(0.2)
        return run

    async def page_url(self, ws: str, run: str, **params: Any) -> dict[str, Any]:
        got = await self.client.get(f"/api/workspaces/{ws}/experiments/{run}/page", params=params)
        assert got.status_code == 200, got.text
        answer: dict[str, Any] = got.json()
        return answer


@pytest.fixture
async def api(tmp_path: Path) -> AsyncIterator[Api]:
    # The tokens in the settings, as a deployment has them: tickets are signed with the key
    # derived from them (`Settings.ticket_secret`), which every gateway of it shares.
    env = {"MODAL_WORKSPACE_MCP_TOKEN": TOKEN, "MODAL_WORKSPACE_JANITOR_SECONDS": "0"}
    settings = load_settings(env, data_root=tmp_path / "d")
    async with serving(create_app(open_service(settings), [TOKEN])) as url:
        headers = {"Authorization": f"Bearer {TOKEN}"}
        async with httpx2.AsyncClient(base_url=url, headers=headers, timeout=60) as client:
            api = Api(url, client, settings)
            try:
                yield api
            finally:
                for listed in (await client.get("/api/workspaces")).json()["workspaces"]:
                    await client.delete(f"/api/workspaces/{listed['workspace_id']}")


@pytest.fixture
def browser() -> Iterator[Any]:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1100,1500"):
        options.add_argument(flag)
    # The console, where Chromium reports what the page's policy refused.
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    # Tests run as root in a container: Chromium's own sandbox cannot start there.
    driver = webdriver.Chrome(service=Service(executable_path=str(DRIVER)), options=options)
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()


def colours(png: bytes, box: tuple[int, int, int, int] | None = None) -> int:
    from PIL import Image

    with Image.open(io.BytesIO(png)) as image:
        part = image.convert("RGB") if box is None else image.convert("RGB").crop(box)
        found = part.getcolors(maxcolors=1 << 16)
    return len(found) if found is not None else 1 << 16


def size(png: bytes) -> tuple[int, int]:
    from PIL import Image

    with Image.open(io.BytesIO(png)) as image:
        return image.size


def plot_loaded(driver: Any) -> bool:
    return bool(
        driver.execute_script(
            "const p = document.getElementById('plot'); return p.complete && p.naturalWidth > 0;"
        )
    )


def facts(driver: Any) -> dict[str, str]:
    """The run's facts as the page shows them, term by term."""
    pairs = driver.execute_script(
        "return [...document.querySelectorAll('#facts dt')]"
        ".map(dt => [dt.textContent, dt.nextElementSibling.textContent]);"
    )
    return dict(pairs)


def urls_used(driver: Any) -> list[str]:
    """Every URL the page was opened at or fetched: itself, its script, style, JSON, plots."""
    fetched = driver.execute_script(
        "return performance.getEntriesByType('resource').map(e => e.name);"
    )
    return [driver.current_url, *fetched]


@needs_browser
async def test_the_page_shows_the_run_with_its_name_as_text_in_a_real_browser(
    api: Api, browser: Any, tmp_path: Path
) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.wait import WebDriverWait

    ws = await api.workspace()
    run = await api.finished(ws, QUICK, name=HOSTILE)
    page = await api.page_url(ws, run)
    assert page["url"] == api.base + page["path"] and page["path"].startswith(PAGE_ROUTE)
    assert TOKEN not in page["url"]

    browser.get(page["url"])  # no Authorization header: the ticket is the credential
    WebDriverWait(browser, 30).until(plot_loaded)
    # The name is shown as the text it is, and nothing in it ran or became markup.
    assert browser.find_element(By.ID, "name").text == HOSTILE
    assert browser.title == f"{HOSTILE} · experiment"
    assert browser.execute_script("return window.pwned === undefined")
    assert browser.find_elements(By.CSS_SELECTOR, "main b, main script") == []
    assert browser.find_element(By.ID, "state").text == "finished"
    shown = facts(browser)
    assert shown["Run"] == run and shown["Exit code"] == "0" and "Wall time" in shown
    rows = [r.text for r in browser.find_elements(By.CSS_SELECTOR, "#metrics tr")]
    assert rows == ["acc 80 20 80 4", "loss 4 4 16 4"]

    shot = browser.get_screenshot_as_png()
    (tmp_path / "experiment-page.png").write_bytes(shot)
    assert shot.startswith(b"\x89PNG") and colours(shot) > 20, "the page did not render"
    # The plot, where the page placed it, is a drawing (curves, axes, text), not a blank box.
    plot = browser.find_element(By.ID, "plot").rect
    bottom = min(int(plot["y"] + plot["height"]), size(shot)[1])
    box = (int(plot["x"]), int(plot["y"]), int(plot["x"] + plot["width"]), bottom)
    assert bottom - plot["y"] > 200, "the plot is below the screenshot"
    assert plot["width"] > 400 and colours(shot, box) > 20, "the plot is not on the page"

    # The page's own script and style are within its policy: nothing was refused.
    console = [entry["message"] for entry in browser.get_log("browser")]
    assert not [m for m in console if "Content Security Policy" in m], console

    # Nothing the page used carries the bearer token, and all of it is this gateway's.
    used = urls_used(browser)
    assert any(u.endswith("/plot.png") for u in used) and len(used) >= 4, used
    for url in used:
        assert TOKEN not in url, url
        # The browser asks for /favicon.ico on its own (with no referrer: the page's policy).
        assert url.startswith(api.base + "/pages/") or url == api.base + "/favicon.ico", url


@needs_browser
async def test_the_page_follows_a_running_run_to_its_end_without_reloading(
    api: Api, browser: Any, tmp_path: Path
) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.wait import WebDriverWait

    ws = await api.workspace()
    run = await api.start(ws, SLOW, name="slow steps")
    page = await api.page_url(ws, run)
    browser.get(page["url"])
    assert browser.find_element(By.ID, "state").text == "running"
    assert "Running for" in facts(browser) and "Exit code" not in facts(browser)
    # Kept only as long as the document is: a reload would lose it.
    browser.execute_script("window.sameDocument = 'yes';")

    def ended(driver: Any) -> bool:
        return bool(driver.find_element(By.ID, "state").text == "finished")

    # The script polls in the browser while this test waits; selenium's waits block the loop,
    # which serves nothing here (the gateway runs on its own thread).
    WebDriverWait(browser, 60, poll_frequency=0.3).until(ended)
    assert browser.execute_script("return window.sameDocument") == "yes"
    assert await api.state(ws, run) == "finished"
    # What it ended with is shown: the metric's last value, the exit code, a fresh plot.
    WebDriverWait(browser, 20).until(
        lambda d: d.find_element(By.CSS_SELECTOR, "#metrics tr").text == "loss 6 6 36 6"
    )
    assert facts(browser)["Exit code"] == "0" and "Wall time" in facts(browser)
    WebDriverWait(browser, 30).until(plot_loaded)
    assert "drawn=" in browser.find_element(By.ID, "plot").get_attribute("src")
    assert browser.find_element(By.ID, "status").text == "The run has ended."
    shot = browser.get_screenshot_as_png()
    (tmp_path / "experiment-page-ended.png").write_bytes(shot)
    assert colours(shot) > 20
    assert all(TOKEN not in url for url in urls_used(browser))


async def get(url: str) -> httpx2.Response:
    async with httpx2.AsyncClient(timeout=60) as anonymous:  # no bearer token
        return await anonymous.get(url)


async def test_a_ticket_for_another_run_workspace_or_purpose_altered_or_expired_is_refused(
    api: Api,
) -> None:
    ws, other_ws = await api.workspace(), await api.workspace()
    run = await api.finished(ws, QUICK, name="the run")
    other_run = await api.finished(ws, "true", name="another run")
    foreign_run = await api.finished(other_ws, "true", name="another workspace's run")
    url = (await api.page_url(ws, run))["url"]
    assert (await get(url)).status_code == 200
    base, ticket = url.rsplit("/", 1)
    purpose, workspace, obj, expires, nonce, signature = ticket.split(".")
    assert (purpose, workspace, obj) == (PURPOSE, ws, run)

    expired = (await api.page_url(ws, run, seconds=1))["url"]
    await asyncio.sleep(1.1)
    flipped = ("B" if signature[0] == "A" else "A") + signature[1:]
    forged = {
        "another run": f"{purpose}.{ws}.{other_run}.{expires}.{nonce}.{signature}",
        "another workspace": f"{purpose}.{other_ws}.{foreign_run}.{expires}.{nonce}.{signature}",
        "another purpose": f"terminal-write.{ws}.{run}.{expires}.{nonce}.{signature}",
        "a later expiry": f"{purpose}.{ws}.{run}.{int(expires) + 60}.{nonce}.{signature}",
        "another nonce": f"{purpose}.{ws}.{run}.{expires}.{'A' * 22}.{signature}",
        "an altered signature": f"{purpose}.{ws}.{run}.{expires}.{nonce}.{flipped}",
        "no signature": f"{purpose}.{ws}.{run}.{expires}.{nonce}",
        "expired": expired.rsplit("/", 1)[1],
        "not a ticket": "not-a-ticket",
        "too long": ticket + "A" * 4000,
        "markup": "%3Cscript%3Ealert(1)%3C%5Cscript%3E",
    }
    answers = set()
    for what, bad in forged.items():
        for suffix in ("", "/run.json", "/plot.png"):
            refused = await get(f"{base}/{bad}{suffix}")
            assert refused.status_code == 403, (what, suffix, refused.text[:200])
            assert refused.headers["cache-control"] == "no-store"
            if not suffix:
                answers.add(refused.text)
    # One page for every refusal: nothing says which part was wrong, nor echoes it.
    (answer,) = answers
    assert "not valid" in answer and "script" not in answer.split("</head>")[1]
    assert "the run" not in answer and ws not in answer

    # A run is minted for only in its own workspace (a fork's parent's runs count as its own).
    missing = await api.client.get(f"/api/workspaces/{other_ws}/experiments/{run}/page")
    assert missing.status_code == 404, missing.text
    too_long = await api.client.get(f"/api/workspaces/{ws}/experiments/{run}/page?seconds=3601")
    assert too_long.status_code == 400


async def test_a_ticket_signed_with_the_deployments_key_is_taken_by_its_gateways(
    api: Api,
) -> None:
    ws = await api.workspace()
    run = await api.finished(ws, QUICK)
    # Another gateway of the deployment derives the same key from the same tokens.
    key = Settings(tokens=(TOKEN,), data_root=Path("/nonexistent")).ticket_secret
    assert key is not None and key != api.settings.link_secret
    minted, _ = _core.mint_ticket(key, PURPOSE, ws, run, int(time.time()), 60)
    assert (await get(f"{api.base}{PAGE_ROUTE}{minted}/run.json")).json()["state"] == "finished"
    # A deployment with other tokens has another key.
    other = Settings(tokens=("another-token-0123456789",), data_root=Path("/x")).ticket_secret
    assert other is not None
    foreign, _ = _core.mint_ticket(other, PURPOSE, ws, run, int(time.time()), 60)
    assert (await get(f"{api.base}{PAGE_ROUTE}{foreign}")).status_code == 403
    # Checked for a workspace or an object (as a terminal's or a preview's route will), a
    # ticket for another is refused.
    assert tickets.check(api.settings, minted, PURPOSE, workspace_id=ws, object_id=run)
    for wrong in ({"workspace_id": "ws-" + "f" * 32}, {"object_id": "xp-" + "f" * 32}):
        with pytest.raises(PermissionDeniedError):
            tickets.check(api.settings, minted, PURPOSE, **wrong)


class Resources(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.scripts: list[dict[str, str | None]] = []
        self.inline: list[str] = []
        self.urls: list[str] = []
        self.handlers: list[str] = []
        self._in_script = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        named = dict(attrs)
        self._in_script = tag == "script"
        if tag == "script":
            self.scripts.append(named)
        self.urls += [v or "" for k, v in attrs if k in ("src", "href", "action", "srcset")]
        self.handlers += [k for k, _ in attrs if k.startswith("on")]

    def handle_endtag(self, tag: str) -> None:
        self._in_script = False

    def handle_data(self, data: str) -> None:
        if self._in_script and data.strip():
            self.inline.append(data)


async def test_the_page_loads_only_the_gateways_own_files_and_keeps_its_ticket_to_itself(
    api: Api,
) -> None:
    ws = await api.workspace()
    run = await api.finished(ws, QUICK, name=HOSTILE)
    url = (await api.page_url(ws, run))["url"]
    page = await get(url)
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    found = Resources()
    found.feed(page.text)
    # No inline script, no handler; every file relative to the page (this gateway's).
    assert found.inline == [] and found.handlers == []
    assert [s.get("src") for s in found.scripts] == ["../assets/experiment-page.js"]
    assert found.urls and all(not re.match(r"^[a-z]+:|^//", u) for u in found.urls), found.urls
    assert HOSTILE not in page.text and "&lt;script&gt;window.pwned=1&lt;/script&gt;" in page.text
    assert TOKEN not in page.text

    for suffix in ("", "/run.json", "/plot.png"):
        answer = await get(url + suffix)
        assert answer.status_code == 200, (suffix, answer.text[:200])
        policy = answer.headers["content-security-policy"]
        for directive in (
            "default-src 'self'",
            "img-src 'self'",
            "script-src 'self'",
            "frame-ancestors 'none'",
            "base-uri 'none'",
        ):
            assert directive in policy, (suffix, directive)
        assert "unsafe-inline" not in policy and "unsafe-eval" not in policy
        assert answer.headers["referrer-policy"] == "no-referrer"
        assert answer.headers["cache-control"] == "no-store"
        assert answer.headers["x-content-type-options"] == "nosniff"
        assert answer.headers["cross-origin-opener-policy"] == "same-origin"
    assert (await get(url + "/plot.png")).content.startswith(b"\x89PNG")
    view = (await get(url + "/run.json")).json()
    assert view["name"] == HOSTILE and view["live"] is False
    script = await get(f"{api.base}/pages/assets/experiment-page.js")
    assert script.status_code == 200 and script.headers["content-type"].startswith(
        "text/javascript"
    )
    assert "innerHTML" not in script.text and "eval(" not in script.text
    assert (await get(f"{api.base}/pages/assets/..%2Fapp.py")).status_code == 404


def test_the_access_log_names_a_pages_route_never_its_ticket() -> None:
    ticket = f"{PURPOSE}.ws-{'0' * 32}.xp-{'1' * 32}.1700000000.{'A' * 22}.{'B' * 43}"
    for suffix in ("", "/run.json", "/plot.png"):
        scope = {"path": f"{PAGE_ROUTE}{ticket}{suffix}", "query_string": b""}
        assert _path_with_query(scope) == f"{PAGE_ROUTE}<ticket>{suffix}"
