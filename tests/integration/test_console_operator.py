"""The console as an operator uses it, in headless Chromium (see test_console.py): the
broker's state above every view, a filter that finds any destination, a queue created
with a button, a message published and fetched, bodies that are text shown as text, and
a user who may manage only some destinations seeing those without errors.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import ConsoleMessage, Error, Page, expect, sync_playwright

import chute
from tests.tools import need_tool

from .admin_calls import ALICE_USERS
from .conftest import ChuteServer, free_port, start_server
from .test_console import CHROMIUM, CHROMIUM_ARGS, WAIT_MS, artifacts_dir, row
from .test_stomp import Client

pytestmark = [pytest.mark.acceptance, pytest.mark.slow, pytest.mark.timeout(240)]

TIGHT = "queue:console.tight"
CONFIG = f"""
[destinations."{TIGHT}"]
max_messages = 1
overflow = "block"
"""


@contextmanager
def chromium(tmp_path: Path, credentials: tuple[str, str] | None = None) -> Iterator[Any]:
    """A headless Chromium page (logging in as ``credentials`` when the broker asks), the
    errors its scripts report, and the console messages of resources refused."""
    need_tool(CHROMIUM, "the console's browser tests drive Chromium")
    errors: list[str] = []
    refused: list[str] = []
    with sync_playwright() as playwright:
        context = playwright.chromium.launch_persistent_context(
            str(tmp_path / "chromium-profile"),
            executable_path=CHROMIUM,
            headless=True,
            args=CHROMIUM_ARGS,
            viewport={"width": 1360, "height": 1000},
            http_credentials=(
                {"username": credentials[0], "password": credentials[1]} if credentials else None
            ),
        )
        try:
            page = context.new_page()
            page.set_default_timeout(WAIT_MS)

            def console(message: ConsoleMessage) -> None:
                if message.type != "error":
                    return
                if message.text.startswith("Failed to load resource"):
                    refused.append(message.location.get("url", ""))
                else:
                    errors.append(f"console: {message.text} at {message.location}")

            def page_error(error: Error) -> None:
                errors.append(f"script: {error}")

            page.on("console", console)
            page.on("pageerror", page_error)
            yield page, errors, refused
        finally:
            context.close()


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[tuple[ChuteServer, str, int]]:
    config = tmp_path / "chute.toml"
    config.write_text(CONFIG)
    http, stomp = free_port(), free_port()
    server = start_server(
        tmp_path, "--config", str(config), "--http-port", str(http), "--stomp-port", str(stomp)
    )
    yield server, f"http://127.0.0.1:{http}/", stomp
    server.stop()


def state(page: Page, key: str) -> Any:
    return page.locator(f'#state [data-state="{key}"]')


def test_the_console_shows_memory_disk_and_who_waits(
    broker: tuple[ChuteServer, str, int], tmp_path: Path
) -> None:
    server, url, stomp_port = broker
    with chromium(tmp_path) as (page, errors, refused):
        page.goto(url)
        expect(state(page, "memory")).to_contain_text("of 256 MiB")  # memory_high_watermark
        expect(state(page, "memory")).to_contain_text("page at 64 MiB")  # max_memory
        expect(state(page, "disk")).to_contain_text("under 64 MiB")  # disk_free_limit
        expect(state(page, "producers").locator(".value")).to_have_text("0")
        expect(state(page, "blocked").locator(".value")).to_have_text("0")
        producer = Client(stomp_port)
        try:
            for n in range(2):  # the second waits: overflow = block, max_messages = 1
                producer.conn.send(f"/queue/{TIGHT.removeprefix('queue:')}", f"m{n}")
            expect(state(page, "blocked").locator(".value")).to_have_text("1")
            expect(state(page, "blocked")).to_have_class(re.compile("alarm"))
            page.screenshot(path=artifacts_dir() / "console-state.png")
            with chute.connect(server.url) as conn:
                consumer = conn.session().consumer(TIGHT)
                for _ in range(2):
                    assert consumer.receive(timeout=10) is not None
            expect(state(page, "blocked").locator(".value")).to_have_text("0")
            expect(state(page, "blocked")).not_to_have_class(re.compile("alarm"))
        finally:
            producer.close()
        assert page.locator("#banner").is_hidden()
        assert errors == []
        assert refused == []


def test_the_filter_finds_a_destination_past_the_first_2000(
    broker: tuple[ChuteServer, str, int], tmp_path: Path
) -> None:
    server, url, _ = broker
    with chute.connect(server.url) as conn:
        session = conn.session(confirm_window=256)
        for i in range(2100):
            session.send(f"queue:bulk.{i:04}", "x")
        session.send("queue:zz.findme", "x")
        session.flush()
    with chromium(tmp_path) as (page, errors, refused):
        page.goto(url)
        expect(page.locator("#truncated")).to_be_visible()
        page.locator("#filter").fill("FINDME")
        expect(page.locator(f"{row('queue:zz.findme')} td.depth")).to_have_text("1")
        expect(page.locator("#destinations tbody tr[data-address]")).to_have_count(1)
        expect(page.locator("#truncated")).to_be_hidden()
        assert page.locator("#banner").is_hidden()
        assert errors == []
        assert refused == []


def test_a_queue_is_created_and_a_message_published_and_fetched(
    broker: tuple[ChuteServer, str, int], tmp_path: Path
) -> None:
    server, url, _ = broker
    with chromium(tmp_path) as (page, errors, refused):
        page.goto(url)
        expect(page.locator("h1")).to_have_text("Destinations")
        page.locator("#create").click()
        page.locator("#dialog-input").fill("queue:console.made")
        page.locator("#dialog-ok").click()
        expect(page.locator("#notice")).to_contain_text("Created queue:console.made.")
        expect(page.locator(f"{row('queue:console.made')} td.depth")).to_have_text("0")

        # Publish a message from its page, see it as text, then get it.
        page.locator(row("queue:console.made")).click()
        expect(page.locator("#detail-address")).to_have_text("queue:console.made")
        page.locator("#publish summary").click()
        page.locator("#publish-body").fill('{"order": 7}')
        page.locator("#publish-content-type").fill("application/json")
        page.locator("#publish-properties").fill("region=eu\ncount=3")
        page.locator("#publish-send").click()
        expect(page.locator("#notice")).to_contain_text("Published a message")
        message = page.locator("#message-table tbody tr[data-seq]")
        expect(message).to_have_count(1)
        expect(message.locator("td.body")).to_have_text('{"order": 7}')
        with chute.connect(server.url) as conn:  # bytes from a client, no content type
            conn.session().send("queue:console.made", b"plain words, sent as bytes")
        page.locator("#refresh-messages").click()
        expect(message).to_have_count(2)
        expect(message.nth(1).locator("td.body")).to_have_text("plain words, sent as bytes")
        page.locator("#get summary").click()
        page.locator("#get-count").fill("1")
        page.locator("#get-send").click()
        expect(page.locator("#notice")).to_contain_text("Got 1 message from queue:console.made")
        expect(page.locator("#got")).to_contain_text('{"order": 7}')
        expect(page.locator("#got")).to_contain_text("region")
        expect(message).to_have_count(1)  # removed
        page.locator("#get-mode").select_option("requeue")
        page.locator("#get-send").click()
        expect(page.locator("#got")).to_contain_text("plain words, sent as bytes")
        expect(page.locator("#notice")).to_contain_text("given back")
        expect(message).to_have_count(1)  # given back
        expect(message.locator("td.num").nth(2)).to_have_text("1")  # delivered once
        page.screenshot(path=artifacts_dir() / "console-publish-get.png")
        with chute.connect(server.url) as conn:
            got = conn.session().consumer("queue:console.made").receive(timeout=10)
            assert got is not None
            assert got.body == b"plain words, sent as bytes"
            assert got.redelivered
        assert page.locator("#banner").is_hidden()
        assert errors == []
        assert refused == []


def test_the_connections_view_closes_a_connection(
    broker: tuple[ChuteServer, str, int], tmp_path: Path
) -> None:
    server, url, _ = broker
    with (
        chute.connect(server.url, client_id="closing-me") as conn,
        chromium(tmp_path) as (page, errors, refused),
    ):
        conn.session().consumer("queue:console.watched")
        page.goto(url)
        page.locator("#tab-connections").click()
        connection = page.locator("#connection-table tbody tr", has_text="closing-me")
        expect(connection).to_have_count(1)
        expect(page.locator("#consumers")).to_contain_text("queue:console.watched")
        connection.locator("button").click()
        page.locator("#dialog-ok").click()
        expect(page.locator("#notice")).to_contain_text("Closed connection")
        expect(connection).to_have_count(0)
        assert page.locator("#banner").is_hidden()
        assert errors == []
        assert refused == []


def test_a_user_who_manages_some_destinations_sees_those_without_errors(
    tmp_path: Path,
) -> None:
    config = tmp_path / "chute.toml"
    config.write_text(ALICE_USERS)
    http = free_port()
    server = start_server(tmp_path, "--config", str(config), "--http-port", str(http))
    try:
        with chute.connect(server.url, login="admin", passcode="admin-pw") as conn:
            conn.session().send("queue:other", "not hers")
        with (
            chute.connect(server.url, login="alice", passcode="alice-pw") as alice,
            chromium(tmp_path, ("alice", "alice-pw")) as (page, errors, refused),
        ):
            alice.session().send("queue:alice.inbox", "hers")
            page.goto(f"http://127.0.0.1:{http}/")
            expect(page.locator(f"{row('queue:alice.inbox')} td.depth")).to_have_text("1")
            alice.session().send("queue:alice.inbox", "again")
            expect(page.locator(f"{row('queue:alice.inbox')} td.depth")).to_have_text("2")
            expect(page.locator("#destinations tbody tr[data-address]")).to_have_count(1)
            expect(page.locator("#state")).to_be_hidden()
            assert page.locator("#banner").is_hidden()

            consumer = alice.session().consumer("queue:alice.inbox", prefetch=1)
            page.locator("#tab-connections").click()
            expect(page.locator("#connections-forbidden")).to_be_visible()
            expect(page.locator("#consumers")).to_contain_text("queue:alice.inbox")
            alice.session().send("queue:alice.inbox", "a third")  # polls go on
            page.locator("#tab-destinations").click()
            expect(page.locator(f"{row('queue:alice.inbox')} td.inflight")).to_have_text("1")
            expect(page.locator(f"{row('queue:alice.inbox')} td.depth")).to_have_text("3")
            assert page.locator("#banner").is_hidden()
            assert page.get_by_text("Loading…").count() == 0
            consumer.close()
            assert errors == []
            # The 403s that told the console what the user may not see came once each.
            assert sorted(u.rsplit("/", 1)[-1] for u in refused) == ["connections", "overview"]
    finally:
        assert server.stop() == 0, server.output


def test_a_message_published_to_a_topic_reaches_its_subscriber_without_an_error(
    broker: tuple[ChuteServer, str, int], tmp_path: Path
) -> None:
    """A topic's page has no messages to browse: after a publish it asks for none (it
    asked, and the broker's refusal put up the red banner)."""
    server, url, _ = broker
    detail = "/api/destinations/topic%3Aconsole.news"
    with (
        chute.connect(server.url) as conn,
        chromium(tmp_path) as (page, errors, refused),
    ):
        subscriber = conn.session().consumer("topic:console.news")
        asked: list[str] = []
        page.on("requestfinished", lambda request: asked.append(request.url))
        page.goto(f"{url}#/destination/topic:console.news")
        expect(page.locator("#detail-address")).to_have_text("topic:console.news")
        page.locator("#publish summary").click()
        page.locator("#publish-body").fill("extra, extra")
        # the page refreshes after a publish: wait for its destination asked again
        with page.expect_request_finished(
            lambda request: (
                any(u.endswith("/publish") for u in asked) and request.url.endswith(detail)
            )
        ):
            page.locator("#publish-send").click()
        expect(page.locator("#notice")).to_contain_text("Published a message")
        got = subscriber.receive(timeout=10)
        assert got is not None
        assert got.body == b"extra, extra"
        assert not [u for u in asked if f"{detail}/messages" in u]
        assert page.locator("#banner").is_hidden()
        assert errors == []
        assert refused == []
