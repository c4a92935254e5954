"""Limits with real workers (2 runworker processes x 2 executors): sampled from the side
effects the handlers record with their times, a rate is never exceeded over any second, a
concurrency limit holds at every instant (also while a worker is SIGKILLed), a limited key
does not hold up another, and a limit changed in the console applies mid-run (issue 14)."""

from __future__ import annotations

import itertools
import os
import signal
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import override_settings

from jobs import limits
from jobs.models import Job, Limit
from jobs.states import State
from tests.support.workers import running_worker, wait_until
from tests.tasks import basic, limited

pytestmark = [pytest.mark.process, pytest.mark.usefixtures("side_effects")]

# Registered in the database by the first enqueue; the workers read them from there.
NAMED = {"reports": {"concurrency": 1, "per_key": True}, "provider": {"rate": "5/s"}}


@pytest.fixture(autouse=True)
def named_limits() -> Iterator[None]:
    limits.registry.forget()
    with override_settings(JOBS={"LIMITS": NAMED}):
        yield
    limits.registry.forget()


def events(prefix: str = "") -> list[tuple[str, datetime]]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT key, at FROM test_side_effects WHERE key LIKE %s ORDER BY at", [prefix + "%"])
        return list(cursor.fetchall())


def most_running(spans: list[tuple[datetime, datetime]]) -> int:
    points = sorted([(start, 1) for start, _ in spans] + [(end, -1) for _, end in spans])
    running = peak = 0
    for _, change in points:
        running += change
        peak = max(peak, running)
    return peak


def spans_of(
    records: list[tuple[str, datetime]], *, cut_off: datetime | None = None
) -> list[tuple[datetime, datetime]]:
    """(start, end) of each attempt; an attempt killed before its end ends at ``cut_off``."""
    open_starts: dict[str, datetime] = {}
    spans = []
    for key, at in records:
        name, _, edge = key.rpartition(":")
        if edge == "start":
            if name in open_starts and cut_off is not None:
                spans.append((open_starts[name], cut_off))
            open_starts[name] = at
        elif name in open_starts:
            spans.append((open_starts.pop(name), at))
    if cut_off is not None:
        spans.extend((start, cut_off) for start in open_starts.values())
    return spans


def two_workers(tmp_path: Path, **env: str):  # type: ignore[no-untyped-def]
    settings = {"JOBS_LEASE_SECONDS": "2", **env}
    first = running_worker(tmp_path, "--concurrency", "2", name="first", **settings)
    second = running_worker(tmp_path, "--concurrency", "2", name="second", **settings)
    return first, second


def test_a_concurrency_limit_holds_at_every_instant_even_when_a_worker_is_killed(tmp_path: Path) -> None:
    ids = [r.id for r in limited.slow_three_at_a_time.enqueue_many([((f"c{n}", 0.3), {}) for n in range(40)])]
    first, second = two_workers(tmp_path)
    with first as one, second:
        wait_until(lambda: len(events()) >= 20, timeout=30, message="the run to get going")
        os.killpg(one.pid, signal.SIGKILL)
        one.wait()
        with connection.cursor() as cursor:
            cursor.execute("SELECT clock_timestamp()")
            killed_at = cursor.fetchone()[0]
        wait_until(lambda: Job.objects.filter(id__in=ids, state=State.SUCCEEDED).count() == 40, timeout=60)
    records = events()
    # Attempts the kill cut short ran until the kill, no longer.
    before = [r for r in records if r[1] <= killed_at]
    after = [r for r in records if r[1] > killed_at]
    assert most_running(spans_of(before, cut_off=killed_at)) <= 3
    assert most_running(spans_of(after)) <= 3
    # And the limit was used, not only kept.
    assert most_running(spans_of(records, cut_off=killed_at)) >= 2


def test_a_rate_limit_holds_over_every_second_across_workers(tmp_path: Path) -> None:
    limited.hundred_a_second.enqueue_many([((f"r{n}",), {}) for n in range(300)])
    first, second = two_workers(tmp_path)
    with first, second:
        wait_until(lambda: len(events("r")) == 300, timeout=30)
    # The start times the claims gave out (what the jobs' rows record): 100/s with a burst
    # of 5, so at most 105 in any second that begins at a start.
    jobs = Job.objects.filter(task_path=limited.hundred_a_second.module_path)
    given = {job.args[0]: job.last_attempted_at for job in jobs}
    assert len(given) == 300 and busiest_second(list(given.values())) <= 105
    # And no handler ran before its time (on the database's clock, as the times were
    # given): a worker only ever starts a job late, never early.
    assert all(at >= given[key] for key, at in events("r"))


def busiest_second(starts: list[datetime]) -> int:
    starts = sorted(starts)
    return max(
        sum(1 for other in starts[index:] if (other - at).total_seconds() < 1.0)
        for index, at in enumerate(starts)
    )


def test_a_key_at_its_limit_does_not_hold_up_another_key(tmp_path: Path) -> None:
    limited.report_slowly.using(limit_key="user:1").enqueue_many([((f"slow-{n}", 1.0), {}) for n in range(6)])
    first, second = two_workers(tmp_path)
    with first, second:
        wait_until(lambda: events("slow"), timeout=20)
        # user:1 has one report running at a time; user:2's all finish meanwhile.
        limited.report_slowly.using(limit_key="user:2").enqueue_many(
            [((f"quick-{n}", 0.0), {}) for n in range(10)]
        )
        wait_until(lambda: len(events("quick")) == 10, timeout=20)
        assert len(events("slow")) < 6
        wait_until(lambda: len(events("slow")) == 6, timeout=30)
    # One of user:1's at a time: each slow report starts a second or more after the last.
    slow = [at for _, at in events("slow")]
    assert all((later - earlier).total_seconds() >= 0.95 for earlier, later in itertools.pairwise(slow))


def test_a_limit_changed_in_the_console_applies_mid_run(tmp_path: Path, django_user_model) -> None:  # type: ignore[no-untyped-def]
    ids = [r.id for r in limited.call_provider.enqueue_many([((f"p{n}",), {}) for n in range(150)])]
    first, second = two_workers(tmp_path)
    with first, second:
        wait_until(lambda: len(events("p")) >= 10, timeout=20)
        slow_rate = _rate(events("p"))
        assert slow_rate <= 5 * 1.3 + 1
        admin = django_user_model.objects.create_superuser("ops", "ops@example.com", "pw-ops-123456")
        client = Client()
        client.force_login(admin)
        response = client.post(
            "/admin/jobs/limit/provider/change/",
            {"rate": "100", "burst": "0", "concurrency": "", "per_key": ""},
        )
        assert response.status_code == 302, response.content[:500]
        changed = time.monotonic()
        wait_until(lambda: Job.objects.filter(id__in=ids, state=State.SUCCEEDED).count() == 150, timeout=30)
        assert time.monotonic() - changed < 10
    assert Limit.objects.get(name="provider").source == limits.CONSOLE


def _rate(records: list[tuple[str, datetime]]) -> float:
    starts = [at for key, at in records if key.endswith(":start")]
    span = (starts[-1] - starts[0]).total_seconds()
    return (len(starts) - 1) / span if span else 0.0


def test_jobs_parked_on_a_full_key_all_run_once_in_turn_and_other_work_passes_them(tmp_path: Path) -> None:
    # Three keys of a per-key concurrency of 1, 40 jobs each: all but one per key park at
    # the first claim, and each release wakes the next. Other work enqueued behind them
    # does not wait for them.
    limited_ids = []
    for key in ("k1", "k2", "k3"):
        jobs = limited.report_in_turn.using(limit_key=key).enqueue_many(
            [((f"{key}-{n}", 0.01), {}) for n in range(40)]
        )
        limited_ids += [job.id for job in jobs]
    first, second = two_workers(tmp_path)
    with first, second:
        wait_until(lambda: len(events("k")) >= 6, timeout=30, message="the limited jobs to get going")
        other = [r.id for r in basic.record.enqueue_many([((f"other-{n}",), {}) for n in range(50)])]
        wait_until(lambda: len(events("other")) == 50, timeout=30, message="the other work")
        wait_until(
            lambda: Job.objects.filter(id__in=limited_ids, state=State.SUCCEEDED).count() == 120,
            timeout=90,
            message="every parked job to run",
        )
    # None lost, none run twice, and never two of one key at once.
    records = events("k")
    starts = [key.rpartition(":")[0] for key, _ in records if key.endswith(":start")]
    assert sorted(starts) == sorted(f"{key}-{n}" for key in ("k1", "k2", "k3") for n in range(40))
    assert set(Job.objects.filter(id__in=limited_ids).values_list("attempt", flat=True)) == {1}
    for key in ("k1", "k2", "k3"):
        assert most_running(spans_of([r for r in records if r[0].startswith(f"{key}-")])) == 1
    assert Job.objects.filter(id__in=other, state=State.SUCCEEDED).count() == 50
