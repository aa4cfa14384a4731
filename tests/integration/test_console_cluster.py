"""The web console of a node of a cluster, in a real browser (headless Chromium via
Playwright): its Cluster tab shows every node with its state and links, and each
destination's depth on each node; a node killed turns down. A broker on its own has no
Cluster tab."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from tests.integration.etcd_fixture import EtcdProcess
from tests.integration.test_cluster_nodes import DEADLINE, Nodes, send
from tests.integration.test_ha import Pair

from .conftest import ChuteServer, free_port
from .test_console import artifacts_dir
from .test_console import broker as broker  # noqa: PLC0414 - the fixtures, for this module
from .test_console import page as page  # noqa: PLC0414

pytestmark = [pytest.mark.acceptance, pytest.mark.slow, pytest.mark.timeout(180)]


@pytest.fixture
def nodes(tmp_path: Path, etcd: EtcdProcess) -> Iterator[Nodes]:
    made = Nodes(tmp_path, etcd)
    yield made
    made.stop()


def test_the_cluster_page_shows_the_nodes_and_the_depth_on_each(
    nodes: Nodes, page: tuple[Page, list[str]]
) -> None:
    browser, errors = page
    http = free_port()
    a = nodes.start("a", "--http-port", str(http))
    b = nodes.start("b")
    c = nodes.start("c")
    for server, others in ((a, "bc"), (b, "ac"), (c, "ab")):
        for other in others:
            server.wait_for_line(f"linked to node {other}", timeout=DEADLINE)
    send(a, "queue:console.orders", ["1", "2"])
    send(b, "queue:console.orders", ["3", "4", "5"])
    send(c, "queue:console.only-c", ["x"])

    browser.goto(f"http://127.0.0.1:{http}/")
    tab = browser.locator("#tab-cluster")
    expect(tab).to_be_visible()
    tab.click()
    expect(browser.locator("h1")).to_have_text("Cluster")
    expect(browser.locator("#cluster-name")).to_contain_text("seen from node a: 3 of 3 nodes up")
    node_rows = browser.locator("#node-table tbody tr")
    expect(node_rows).to_have_count(3)
    for name, links in (("a", "b, c"), ("b", "a, c"), ("c", "a, b")):
        row = browser.locator(f'#node-table tr[data-node="{name}"]')
        expect(row.locator("td.node-state .chip")).to_have_text("up")
        expect(row.locator("td.links")).to_have_text(links)
    expect(browser.locator('#node-table tr[data-node="a"] td.name')).to_contain_text("this node")
    orders = browser.locator('#depth-table tr[data-address="queue:console.orders"]')
    expect(orders.locator('td[data-node="a"]')).to_have_text("2")
    expect(orders.locator('td[data-node="b"]')).to_have_text("3")
    expect(orders.locator("td.total")).to_have_text("5")
    only_c = browser.locator('#depth-table tr[data-address="queue:console.only-c"]')
    expect(only_c.locator('td[data-node="c"]')).to_have_text("1")
    expect(only_c.locator('td[data-node="a"]')).to_have_text("")
    browser.screenshot(path=artifacts_dir() / "console-cluster.png")

    c.stop(signal.SIGKILL)
    down = browser.locator('#node-table tr[data-node="c"]')
    expect(down.locator("td.node-state .chip")).to_have_text("down")
    expect(down.locator("td.node-state .reason")).not_to_be_empty()
    expect(browser.locator("#cluster-name")).to_contain_text("2 of 3 nodes up")
    expect(only_c).to_have_count(0)  # what a node that is down holds is not known
    browser.screenshot(path=artifacts_dir() / "console-cluster-down.png")
    assert browser.locator("#banner").is_hidden()
    assert errors == []


def test_a_broker_on_its_own_has_no_cluster_tab(
    broker: tuple[ChuteServer, str], page: tuple[Page, list[str]]
) -> None:
    _, url = broker
    browser, errors = page
    browser.goto(url)
    expect(browser.locator("h1")).to_have_text("Destinations")
    expect(browser.locator("#live")).to_be_visible()
    browser.wait_for_function("() => !document.getElementById('live').classList.contains('stale')")
    expect(browser.locator("#tab-cluster")).to_be_hidden()
    assert browser.locator("#banner").is_hidden()
    assert errors == []


def test_the_cluster_page_of_a_live_shows_its_role_epoch_and_backups(
    tmp_path: Path, etcd: EtcdProcess, page: tuple[Page, list[str]]
) -> None:
    browser, errors = page
    pair = Pair(tmp_path, etcd)
    try:
        http = free_port()
        live = pair.spawn("one", http_port=http)
        live.wait_for_line("chute listening", timeout=DEADLINE)
        backup = pair.spawn("two")
        backup.wait_for_line("in sync with the live", timeout=DEADLINE)
        browser.goto(f"http://127.0.0.1:{http}/")
        browser.locator("#tab-cluster").click()
        expect(browser.locator("#ha-role")).to_contain_text("This process is the node's live")
        expect(browser.locator("#ha-role")).to_contain_text("epoch")
        rows = browser.locator("#backup-table tbody tr")
        expect(rows).to_have_count(1)
        expect(rows.locator("td.backup-state .chip")).to_have_text("in-sync")
        backup.process.kill()
        expect(rows.locator("td.backup-state .chip")).to_have_text("down", timeout=DEADLINE * 1000)
        assert not errors
    finally:
        pair.stop()
