"""Stopping the broker ends the tasks still pending before the event loop closes: a task
the loop never runs again is destroyed pending ("Task was destroyed but it is pending!")."""

from __future__ import annotations

import asyncio
import gc
import logging

import pytest

from chute.server.process import end_remaining_tasks, new_event_loop


def test_tasks_still_pending_are_cancelled_and_end_before_the_loop_closes(
    caplog: pytest.LogCaptureFixture,
) -> None:
    loop = new_event_loop()
    ended: list[str] = []

    async def forever(name: str) -> None:
        try:
            await asyncio.Event().wait()
        finally:
            ended.append(name)

    async def main() -> None:
        loop.create_task(forever("started"))
        await asyncio.sleep(0)  # it runs up to its wait
        loop.create_task(forever("never ran"))  # what a stop leaves scheduled, not started

    with caplog.at_level(logging.ERROR, logger="asyncio"):
        loop.run_until_complete(main())
        end_remaining_tasks(loop)
        loop.close()
        gc.collect()
    assert sorted(ended) == ["never ran", "started"]
    assert not asyncio.all_tasks(loop)
    # gc.collect() may also collect tasks other tests left behind (their own business):
    # only this test's tasks, whose coroutine is forever(), count
    destroyed = [
        r.getMessage()
        for r in caplog.records
        if "destroyed but it is pending" in r.getMessage() and "forever" in r.getMessage()
    ]
    assert destroyed == []
