"""``runworker --reload``: a changed task module is picked up without a manual restart, a task
added meanwhile does not go to dead as unknown, a Ctrl-C stops the worker gracefully, and a
worker that died is started again on the next change."""

from __future__ import annotations

import importlib
import os
import signal
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.support.workers import children_of, is_alive, job, running_worker, wait_until

pytestmark = [pytest.mark.process, pytest.mark.django_db(transaction=True)]

FIRST = """from django.tasks import task


@task
def version() -> int:
    return 1
"""

SECOND = """from django.tasks import task


@task
def version() -> int:
    return 2


@task
def added() -> str:
    return "added while the worker ran"
"""


RELOAD = "event=reload changed="
STARTED = "event=worker_started"


@pytest.fixture
def task_module() -> Iterator[tuple[str, Path]]:
    """A task module inside the project (the reloader watches the project's folders)."""
    name = f"_reload_{uuid.uuid4().hex[:8]}"
    path = ROOT / "tests" / "tasks" / f"{name}.py"
    path.write_text(FIRST)
    try:
        yield f"tests.tasks.{name}", path
    finally:
        path.unlink()
        for cached in (path.parent / "__pycache__").glob(f"{name}.*"):
            cached.unlink()


def succeeded(job_id: str) -> object:
    row = job(job_id)
    return row.state == "succeeded" and row


def test_a_changed_task_module_restarts_the_worker_gracefully(
    tmp_path: Path, task_module: tuple[str, Path]
) -> None:
    name, path = task_module
    module = importlib.import_module(name)
    with running_worker(tmp_path, "--reload", "--concurrency", "1") as worker:
        first = module.version.enqueue()
        assert wait_until(lambda: succeeded(first.id)).result == 1

        path.write_text(SECOND)
        worker.wait_for_log(rf"event=reload changed=tests/tasks/{name.rpartition('.')[2]}\.py")
        worker.wait_for_log("event=worker_started", count=2)
        module = importlib.reload(module)
        again, added = module.version.enqueue(), module.added.enqueue()
        assert wait_until(lambda: succeeded(again.id)).result == 2
        assert wait_until(lambda: succeeded(added.id)).result == "added while the worker ran"

        # A terminal's Ctrl-C goes to the reloader's process group; the worker has its own,
        # so it is told once (by the reloader) and stops gracefully, not at once.
        os.killpg(worker.pid, signal.SIGINT)
        assert worker.wait() == 0

    log = worker.log()
    lines = log.splitlines()
    started = [i for i, line in enumerate(lines) if "event=worker_started" in line]
    stopped = [i for i, line in enumerate(lines) if "event=worker_stopped" in line]
    assert len(started) == len(stopped) == 2
    # The first worker had stopped before the second started.
    assert stopped[0] < started[1]
    assert "event=shutdown_forced" not in log
    assert "event=reloader_stopped code=0" in lines[-1]


def test_a_worker_that_died_starts_again_on_the_next_change(
    tmp_path: Path, task_module: tuple[str, Path]
) -> None:
    _, path = task_module
    with running_worker(tmp_path, "--reload", "--concurrency", "1") as worker:
        (child,) = children_of(worker.pid)
        os.kill(child, signal.SIGKILL)
        worker.wait_for_log(r"event=worker_exited code=-9 next='restart on a file change'")
        assert is_alive(worker.pid), "the reloader outlives its worker"

        path.write_text(SECOND)
        worker.wait_for_log("event=worker_started", count=2)
        worker.signal(signal.SIGTERM)
        assert worker.wait() == 0
    assert "event=reloader_stopped code=0" in worker.log()


def test_a_task_module_written_while_the_worker_runs_and_edited_at_once_is_picked_up(
    tmp_path: Path,
) -> None:
    # The newcomer's path: a new module, one job of it run, and the module edited, all
    # before the watcher's next look. The edit must still restart the worker.
    name = f"_reload_{uuid.uuid4().hex[:8]}"
    path = ROOT / "tests" / "tasks" / f"{name}.py"
    try:
        with running_worker(tmp_path, "--reload", "--concurrency", "1") as worker:
            path.write_text(FIRST)
            module = importlib.import_module(f"tests.tasks.{name}")
            first = module.version.enqueue()
            assert wait_until(lambda: succeeded(first.id)).result == 1
            path.write_text(SECOND)
            # A reload seen after the edit, and the worker it started (a reload for the new
            # file alone may have come before the edit, and its worker may have run the
            # module as it first was).
            reloads = worker.log().count(RELOAD)

            def restarted() -> bool:
                log = worker.log()
                return log.count(RELOAD) > reloads and log.count(STARTED) > log.count(RELOAD)

            wait_until(restarted, timeout=15)
            module = importlib.reload(module)
            again = module.version.enqueue()
            assert wait_until(lambda: succeeded(again.id)).result == 2
            worker.signal(signal.SIGTERM)
            assert worker.wait() == 0
    finally:
        path.unlink(missing_ok=True)
        for cached in (path.parent / "__pycache__").glob(f"{name}.*"):
            cached.unlink()


def test_a_stop_while_a_reload_starts_the_new_worker_exits_cleanly(
    tmp_path: Path, task_module: tuple[str, Path]
) -> None:
    # Ctrl-C just after saving a file: the new worker is still importing Django, with no
    # handler of its own yet, so the stop ends it by the signal itself. That is still the
    # stop that was asked for, and the reloader says so with a clean exit.
    _, path = task_module
    with running_worker(tmp_path, "--reload", "--concurrency", "1") as worker:
        (first,) = children_of(worker.pid)
        path.write_text(SECOND)
        wait_until(lambda: [child for child in children_of(worker.pid) if child != first])
        worker.signal(signal.SIGTERM)
        assert worker.wait() == 0
    log = worker.log()
    assert log.count(STARTED) == 1, "the stop came before the new worker started"
    assert "event=reloader_stopped code=0" in log
