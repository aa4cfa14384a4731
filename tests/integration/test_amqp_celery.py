"""A Celery worker (a subprocess, ``broker_url = "amqp://…"`` at chute) runs 1,000 tasks
with ``acks_late`` and retries; killed with ``kill -9`` mid-task, a second worker
finishes the job: every task runs to completion, none is lost."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from .amqp_support import AmqpServer, serve

TASKS = 1000
SLOW = range(400, 404)  # tasks that take long enough to be killed in
APP = textwrap.dedent(
    """
    import os
    import time

    from celery import Celery

    app = Celery("chutetest", broker=os.environ["BROKER_URL"])
    app.conf.update(
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        task_ignore_result=True,
        worker_prefetch_multiplier=4,
        broker_connection_retry_on_startup=True,
    )
    OUT = os.environ["TASKS_OUT"]

    @app.task(bind=True, max_retries=3)
    def work(self, n, slow=False):
        if n % 50 == 7 and self.request.retries == 0:
            raise self.retry(countdown=0)
        if slow:
            open(os.path.join(OUT, f"started-{n}"), "w").close()
            time.sleep(3)
        open(os.path.join(OUT, f"done-{n}"), "w").close()
    """
)


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[AmqpServer]:
    yield from serve(tmp_path)


def _worker(app_dir: Path, env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "celeryapp",
            "worker",
            "--pool=threads",
            "--concurrency=4",
            "--loglevel=INFO",
        ],
        cwd=app_dir,
        env=env,
        stdout=log.open("ab"),
        stderr=subprocess.STDOUT,
    )


def _wait_for(condition: object, timeout: float, what: str, log: Path) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():  # type: ignore[operator]
            return
        time.sleep(0.1)
    raise AssertionError(f"{what} within {timeout} s; worker log:\n{log.read_text()[-5000:]}")


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_celery_worker_killed_mid_task_loses_nothing(broker: AmqpServer, tmp_path: Path) -> None:
    app_dir = tmp_path / "app"
    out = tmp_path / "out"
    app_dir.mkdir()
    out.mkdir()
    (app_dir / "celeryapp.py").write_text(APP)
    env = dict(
        os.environ,
        BROKER_URL=broker.url,
        TASKS_OUT=str(out),
        PYTHONPATH=os.pathsep.join([str(app_dir), os.environ.get("PYTHONPATH", "")]),
    )
    log = tmp_path / "worker.log"
    sys.path.insert(0, str(app_dir))
    os.environ["BROKER_URL"], os.environ["TASKS_OUT"] = broker.url, str(out)
    try:
        import celeryapp  # type: ignore[import-not-found]

        with celeryapp.app.connection_for_write() as conn:
            for n in range(TASKS):
                celeryapp.work.apply_async((n, n in SLOW), connection=conn)
        first = _worker(app_dir, env, log)
        try:
            _wait_for(
                lambda: any((out / f"started-{n}").exists() for n in SLOW),
                120,
                "a slow task started",
                log,
            )
            first.send_signal(signal.SIGKILL)  # mid-task
            first.wait(10)
            killed_before = sum(1 for n in SLOW if not (out / f"done-{n}").exists())
            assert killed_before, "the worker was killed while a task ran"
        finally:
            if first.poll() is None:
                first.kill()
        second = _worker(app_dir, env, log)
        try:
            _wait_for(
                lambda: sum(1 for p in out.iterdir() if p.name.startswith("done-")) == TASKS,
                180,
                f"all {TASKS} tasks done",
                log,
            )
        finally:
            second.send_signal(signal.SIGTERM)
            try:
                second.wait(20)
            except subprocess.TimeoutExpired:
                second.kill()
    finally:
        sys.path.remove(str(app_dir))
        sys.modules.pop("celeryapp", None)
    done = {int(p.name[5:]) for p in out.iterdir() if p.name.startswith("done-")}
    assert done == set(range(TASKS))
