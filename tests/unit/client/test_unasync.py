"""The blocking client is written from the asyncio client (scripts/unasync.py):
every blocking module it writes must be what its asyncio source makes now."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def test_generated_blocking_modules_match_their_asyncio_source() -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "unasync.py"), "--check"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_rewrite_drops_async_and_renames_what_differs() -> None:
    spec = importlib.util.spec_from_file_location("unasync", ROOT / "scripts" / "unasync.py")
    assert spec is not None
    assert spec.loader is not None
    unasync = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(unasync)
    source = (
        "async def f(link: AsyncLink, close: Callable[[], Awaitable[None]])"
        " -> AsyncIterator[int]:\n"
        '    """One task at a time, on the asyncio client."""\n'
        "    async with asyncio.Lock():\n"
        "        await close()\n"
        "    async for x in link:\n"
        "        yield x\n"
    )
    assert unasync.unasync(source, "src.py").splitlines()[1:] == [
        "def f(link: Link, close: Callable[[], None]) -> Iterator[int]:",
        '    """One thread at a time, on the blocking client."""',
        "    with threading.Lock():",
        "        close()",
        "    for x in link:",
        "        yield x",
    ]
