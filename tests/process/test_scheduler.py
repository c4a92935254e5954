"""Real ``runscheduler`` processes: several at once, killed, signalled, cut off from the
database. Time is compressed by schedules that fire every second (real seconds: the
processes use the database clock, as in production, so no test-only time source is needed).
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.db import connection

from jobs.models import FireRecord, Job, Schedule
from tests.conftest import manage, subprocess_env
from tests.support.schedules import (
    assert_one_job_per_slot_without_gaps,
    database_now,
    every_second,
    slots_by_schedule,
)

pytestmark = [pytest.mark.process, pytest.mark.django_db(transaction=True)]

ENV = {"JOBS_LOG_LEVEL": "INFO", "JOBS_SCHEDULER_MAX_SLEEP": "1"}


class SchedulerProcess:
    def __init__(self, log_path: Path, *args: str) -> None:
        self.log_path = log_path
        self._log = log_path.open("w")
        self.proc = manage(
            "runscheduler",
            *args,
            env=subprocess_env(**ENV),
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def log(self) -> str:
        return self.log_path.read_text()

    def wait_for_log(self, pattern: str, timeout: float = 15.0) -> None:
        wait_until(lambda: re.search(pattern, self.log()), timeout, f"{pattern!r} in\n{self.log()}")

    def signal(self, signum: int) -> None:
        os.kill(self.proc.pid, signum)

    def stop(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=10)
        self._log.close()


@pytest.fixture
def start(tmp_path: Path) -> Iterator[Callable[..., SchedulerProcess]]:
    started: list[SchedulerProcess] = []

    def start_one(*args: str) -> SchedulerProcess:
        process = SchedulerProcess(tmp_path / f"scheduler-{len(started)}.log", *args)
        started.append(process)
        return process

    yield start_one
    for process in started:
        process.stop()


def wait_until(condition: Callable[[], Any], timeout: float, message: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = condition()
        if result:
            return result
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {message}")


def test_three_schedulers_fire_every_slot_exactly_once_and_survive_one_being_killed(
    start: Callable[..., SchedulerProcess],
) -> None:
    names = [f"s{i:02d}" for i in range(16)] + ["cron-a", "cron-b"]
    for name in names[:16]:
        every_second(name)
    for name in names[16:]:
        every_second(name, cron="* * * * * *")
    schedulers = [start() for _ in range(3)]
    for process in schedulers:
        process.wait_for_log("event=scheduler_started")
    time.sleep(2.0)
    schedulers[0].signal(signal.SIGKILL)
    killed_at = database_now()

    def survivors_went_on() -> bool:
        slots = slots_by_schedule()
        return all(slots.get(name) and slots[name][-1] >= killed_at + timedelta(seconds=2) for name in names)

    wait_until(survivors_went_on, 10, "slots fired after the kill")
    for process in schedulers[1:]:
        process.signal(signal.SIGTERM)
    for process in schedulers[1:]:
        assert process.proc.wait(timeout=10) == 0
        assert "event=scheduler_stopped" in process.log()
    slots = assert_one_job_per_slot_without_gaps(names)
    assert sum(len(s) for s in slots.values()) >= len(names) * 4
    # Every slot was contended: at least two schedulers enqueued jobs.
    assert sum("event=slot_enqueued" in process.log() for process in schedulers) >= 2


def test_a_bad_schedule_is_reported_at_start_and_the_rest_keep_firing(
    start: Callable[..., SchedulerProcess],
) -> None:
    every_second("good")
    bad = every_second("bad")
    # Bypass the model's validation, as a hand-written SQL update would.
    Schedule.objects.filter(pk=bad.pk).update(interval_seconds=None, cron="0 0 31 2 *")
    every_second("unknown-task", task_path="tests.tasks.scheduled.missing")
    process = start()
    process.wait_for_log(r"event=scheduler_started .* invalid=2")
    wait_until(lambda: len(slots_by_schedule().get("good", [])) >= 3, 10, "three slots of 'good'")
    process.signal(signal.SIGINT)
    assert process.proc.wait(timeout=10) == 0
    log = process.log()
    assert re.search(r"event=schedule_invalid .* schedule=bad errors=.*never fires", log)
    assert re.search(r"event=schedule_invalid .* schedule=unknown-task errors=.*cannot be imported", log)
    assert log.count("schedule=bad errors") == 1  # reported once, not on every pass
    assert set(slots_by_schedule()) == {"good"}


def test_the_scheduler_reconnects_after_its_connections_are_terminated(
    start: Callable[..., SchedulerProcess],
) -> None:
    every_second("steady")
    process = start()
    wait_until(lambda: len(slots_by_schedule().get("steady", [])) >= 2, 10, "first slots")
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
    cut_at = database_now()
    wait_until(
        lambda: any(slot > cut_at + timedelta(seconds=2) for slot in slots_by_schedule().get("steady", [])),
        10,
        f"slots after the cut\n{process.log()}",
    )
    process.signal(signal.SIGTERM)
    assert process.proc.wait(timeout=10) == 0
    # Slots that came due while it reconnected were caught up (within the grace): no gap.
    assert_one_job_per_slot_without_gaps(["steady"])


def test_once_fires_what_is_due_and_exits(start: Callable[..., SchedulerProcess]) -> None:
    schedule = every_second("due")
    Schedule.objects.filter(pk=schedule.pk).update(next_fire_at=database_now() - timedelta(seconds=3))
    process = start("--once")
    assert process.proc.wait(timeout=15) == 0
    assert len(slots_by_schedule()["due"]) >= 3
    assert Job.objects.count() == FireRecord.objects.count()


def test_a_sleeping_scheduler_wakes_for_a_schedule_saved_meanwhile(
    start: Callable[..., SchedulerProcess],
) -> None:
    # Only the nightly built-ins exist, so it would sleep the whole --max-sleep.
    process = start("--max-sleep", "30")
    process.wait_for_log("event=scheduler_started")
    time.sleep(0.5)
    saved_at = time.monotonic()
    every_second("new")  # save() notifies on commit
    wait_until(lambda: slots_by_schedule().get("new"), 5, f"the new schedule to fire\n{process.log()}")
    assert time.monotonic() - saved_at < 5
    process.signal(signal.SIGTERM)
    assert process.proc.wait(timeout=10) == 0


def test_once_fails_instead_of_hanging_when_the_database_is_unreachable(tmp_path: Path) -> None:
    log = tmp_path / "unreachable.log"
    with log.open("w") as out:
        # Port 1 refuses connections at once.
        env = subprocess_env(**ENV, DATABASE_URL="postgres://postgres@127.0.0.1:1/nowhere")
        process = manage("runscheduler", "--once", env=env, stdout=out, stderr=subprocess.STDOUT)
        assert process.wait(timeout=30) == 1
    assert log.read_text().count("event=db_unavailable") == 5
