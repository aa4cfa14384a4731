"""The web console on a stream, in a real browser (headless Chromium via Playwright).

A stream is listed with its kind; its page shows its offsets, its readers and how
far behind the head each is, and browses its messages by offset; moving, retrying
and deleting one message (what only a queue allows) are not offered. Purging it
from the page empties it, as the chute client then sees.
"""

from __future__ import annotations

import pytest
from playwright.sync_api import Page, expect

import chute
from chute.core.model.readers import WINDOW

from .conftest import ChuteServer
from .test_console import artifacts_dir, row
from .test_console import broker as broker  # noqa: PLC0414 - the fixtures, for this module
from .test_console import page as page  # noqa: PLC0414

pytestmark = [pytest.mark.acceptance, pytest.mark.slow, pytest.mark.timeout(180)]

TICKS = "stream:console.ticks"
BEHIND = 44
"""How far the slow reader is behind the head: what it has not taken into its window."""


def test_a_stream_shows_its_offsets_and_readers_and_is_only_browsed(
    broker: tuple[ChuteServer, str], page: tuple[Page, list[str]]
) -> None:
    server, url = broker
    browser, errors = page
    sent = WINDOW + BEHIND
    browser.goto(url)
    expect(browser.locator("h1")).to_have_text("Destinations")

    with chute.connect(server.url) as conn:
        session = conn.session()
        for n in range(sent):
            session.send(TICKS, f"tick {n}")
        slow = session.consumer(TICKS, offset="first", prefetch=1)
        assert slow.receive(timeout=10) is not None

        listed = browser.locator(row(TICKS))
        expect(listed.locator(".chip")).to_have_text("stream")
        expect(listed.locator("td.depth")).to_have_text(f"{sent}")

        listed.click()
        expect(browser.locator("#detail-address")).to_have_text(TICKS)
        expect(browser.locator("#detail-kind")).to_have_text("stream")
        counters = browser.locator("#counters")
        expect(counters.locator('[data-counter="first"] .value')).to_have_text("1")
        expect(counters.locator('[data-counter="head"] .value')).to_have_text(f"{sent + 1}")
        expect(counters.locator('[data-counter="lag"] .value')).to_have_text(f"{BEHIND}")
        expect(counters.locator('[data-counter="acked"]')).to_have_count(0)
        reader = browser.locator("#reader-table tbody tr")
        expect(reader).to_have_count(1)
        expect(reader.locator("td.lag")).to_have_text(f"{BEHIND}")
        browser.screenshot(path=artifacts_dir() / "console-stream.png")

        messages = browser.locator("#message-table tbody tr[data-seq]")
        expect(messages).to_have_count(50)  # a page
        expect(messages.first).to_contain_text("tick 0")
        expect(browser.locator("#message-table thead")).to_contain_text("Offset")
        expect(browser.locator("#move")).to_have_count(0)
        expect(browser.locator("#retry-all")).to_have_count(0)
        expect(messages.locator("button")).to_have_count(0)  # no Delete, no Retry
        expect(messages.locator("input[type=checkbox]")).to_have_count(0)
        browser.locator("#next-page").click()
        expect(messages.first).to_contain_text("tick 50")

        browser.locator("#purge").click()
        expect(browser.locator("#dialog-text")).to_contain_text("this stream keeps")
        browser.locator("#dialog-ok").click()
        expect(browser.locator("#notice")).to_contain_text(f"Purged {sent} messages")
        expect(browser.locator("#messages")).to_contain_text("No messages kept")
        assert session.browse(TICKS) == []

    assert browser.locator("#banner").is_hidden()
    assert errors == []
