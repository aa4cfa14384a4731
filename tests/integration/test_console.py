"""The web console in a real browser: Debian's Chromium, headless, driven by Playwright.

A real ``chute serve`` with its HTTP port on serves the console at ``/``; the
test opens it, watches a queue's depth follow what the chute client sends, makes
a dead letter, retries it from the console and checks with the client that the
message is back where it came from. Playwright never downloads a browser here:
it launches ``/usr/bin/chromium`` (``make install-test`` installs it, through
scripts/ensure-chromium.sh). The screenshots land in ``$CHUTE_TEST_ARTIFACTS``
(``test-artifacts/`` under the repository by default).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import ConsoleMessage, Error, Page, expect, sync_playwright

import chute
from tests.tools import need_tool

from .conftest import ChuteServer, free_port, start_server

pytestmark = [pytest.mark.acceptance, pytest.mark.slow, pytest.mark.timeout(180)]

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
WAIT_MS = 20_000
"""How long the page may take to show a change (it polls the API every 2 s)."""
ORDERS = "queue:console.orders"
DEAD_LETTERS = "queue:__sys__deadLetter"


def artifacts_dir() -> Path:
    default = Path(__file__).resolve().parents[2] / "test-artifacts"
    folder = Path(os.environ.get("CHUTE_TEST_ARTIFACTS") or default)
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[tuple[ChuteServer, str]]:
    """A ``chute serve`` with its HTTP listener, and the console's URL."""
    http_port = free_port()
    server = start_server(tmp_path, "--http-port", str(http_port))
    yield server, f"http://127.0.0.1:{http_port}/"
    server.stop()


@pytest.fixture
def page(tmp_path: Path) -> Iterator[tuple[Page, list[str]]]:
    """A fresh headless Chromium page, and the errors its console and scripts report."""
    need_tool(CHROMIUM, "the console's browser tests drive Chromium")
    errors: list[str] = []
    with sync_playwright() as playwright:
        context = playwright.chromium.launch_persistent_context(
            str(tmp_path / "chromium-profile"),
            executable_path=CHROMIUM,
            headless=True,
            args=CHROMIUM_ARGS,
            viewport={"width": 1360, "height": 1000},
        )
        try:
            page = context.new_page()
            page.set_default_timeout(WAIT_MS)

            def console(message: ConsoleMessage) -> None:
                if message.type == "error":
                    errors.append(f"console: {message.text} at {message.location}")

            def page_error(error: Error) -> None:
                errors.append(f"script: {error}")

            page.on("console", console)
            page.on("pageerror", page_error)
            yield page, errors
        finally:
            context.close()


def row(address: str) -> str:
    return f'#destinations tr[data-address="{address}"]'


def test_console_shows_depth_and_retries_a_dead_letter(
    broker: tuple[ChuteServer, str], page: tuple[Page, list[str]]
) -> None:
    server, url = broker
    browser, errors = page
    artifacts = artifacts_dir()

    response = browser.goto(url)
    assert response is not None
    assert response.ok
    assert "'self'" in response.headers["content-security-policy"]
    assert response.headers["x-content-type-options"] == "nosniff"
    expect(browser.locator("h1")).to_have_text("Destinations")
    expect(browser.locator("#live")).not_to_have_class(re.compile("stale"))

    with chute.connect(server.url) as conn:
        session = conn.session()
        for i in range(3):
            session.send(ORDERS, f"order {i}", properties={"i": i})
        expect(browser.locator(f"{row(ORDERS)} td.depth")).to_have_text("3")

        # A consumer that refuses a message dead-letters it ("rejected").
        refusing = conn.session(ack="individual")
        consumer = refusing.consumer(ORDERS, prefetch=1)
        first = consumer.receive(timeout=10)
        assert first is not None
        assert first.text == "order 0"
        first.nack(requeue=False)
        consumer.close()
        expect(browser.locator(f"{row(ORDERS)} td.depth")).to_have_text("2")
        expect(browser.locator(f"{row(DEAD_LETTERS)} td.depth")).to_have_text("1")

        # Open the dead-letter queue, see where its message came from, send it back.
        browser.locator(row(DEAD_LETTERS)).click()
        expect(browser.locator("#detail-address")).to_have_text(DEAD_LETTERS)
        message = browser.locator("#message-table tbody tr[data-seq]")
        expect(message).to_have_count(1)
        expect(message).to_contain_text(ORDERS)
        expect(message).to_contain_text("rejected")
        expect(browser.locator("#retry-all")).to_be_visible()
        browser.screenshot(path=artifacts / "console-dead-letters.png")

        message.locator("button.retry").click()
        expect(browser.locator("#notice")).to_contain_text("Retried 1 message")
        expect(browser.locator("#messages")).to_contain_text("No messages waiting")
        back = [m.text for m in session.browse(ORDERS)]
        assert sorted(back) == ["order 0", "order 1", "order 2"]
        assert session.browse(DEAD_LETTERS) == []

    browser.locator("#tab-destinations").click()
    expect(browser.locator(f"{row(ORDERS)} td.depth")).to_have_text("3")
    expect(browser.locator(f"{row(DEAD_LETTERS)} td.depth")).to_have_text("0")
    shot = artifacts / "console-destinations.png"
    browser.screenshot(path=shot)
    assert shot.read_bytes().startswith(b"\x89PNG")
    assert (artifacts / "console-dead-letters.png").read_bytes().startswith(b"\x89PNG")
    assert browser.locator("#banner").is_hidden()
    assert errors == []
