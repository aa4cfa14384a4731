"""The console's routes: the page and its files, with headers that keep it to itself,
and nothing else (a request cannot name another file of the package)."""

from __future__ import annotations

import asyncio
import re
from importlib import resources

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from chute.admin.console import ASSETS, add_console_routes


async def fetch(*paths: str) -> list[tuple[int, dict[str, str], bytes]]:
    app = web.Application()
    add_console_routes(app)
    answers = []
    async with TestClient(TestServer(app)) as client:
        for path in paths:
            response = await client.get(path)
            answers.append((response.status, dict(response.headers), await response.read()))
    return answers


def test_the_page_and_its_files_are_served_with_protective_headers() -> None:
    paths = ["/", *(f"/console/{name}" for name in ASSETS)]
    answers = asyncio.run(fetch(*paths))
    for path, (status, headers, body) in zip(paths, answers, strict=True):
        assert status == 200, path
        assert body, path
        policy = headers["Content-Security-Policy"]
        assert "default-src 'self'" in policy
        assert "frame-ancestors 'none'" in policy
        assert headers["X-Content-Type-Options"] == "nosniff"
        assert headers["X-Frame-Options"] == "DENY"
    assert answers[0][1]["Content-Type"] == "text/html; charset=utf-8"
    assert answers[paths.index("/console/console.js")][1]["Content-Type"].startswith(
        "text/javascript"
    )


def test_the_page_loads_only_its_own_files() -> None:
    [(_, _, page)] = asyncio.run(fetch("/"))
    html = page.decode()
    assert "<script>" not in html  # the policy forbids inline script
    for link in re.findall(r'(?:src|href)="([^"#]+)"', html):
        assert link.startswith("/console/"), link
        assert link.removeprefix("/console/") in ASSETS


@pytest.mark.parametrize(
    "path", ["/console/nope.js", "/console/..%2Fconsole.py", "/console/%2E%2E%2F__init__.py"]
)
def test_other_files_are_not_served(path: str) -> None:
    [(status, _, body)] = asyncio.run(fetch(path))
    assert status == 404
    assert b"import" not in body


def test_every_module_the_console_imports_is_served() -> None:
    folder = resources.files("chute.admin").joinpath("console")
    scripts = [name for name in ASSETS if name.endswith(".js")]
    for name in scripts:
        source = folder.joinpath(name).read_text(encoding="utf-8")
        for module in re.findall(r'^import [^;]*? from "\./([^"]+)";', source, re.M | re.S):
            assert module in ASSETS, f"{name} imports {module}, which the console does not serve"
    on_disk = {entry.name for entry in folder.iterdir() if entry.name.endswith(".js")}
    assert on_disk == set(scripts)
