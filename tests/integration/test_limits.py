"""Rate and concurrency limits decided by the claim, on real PostgreSQL with a moved clock:
the bounds hold, waiting jobs use no attempt and keep their order, a finishing job wakes the
next, keys have their own budgets, other work flows past, and a changed limit applies at
the next claim (issue 14)."""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Iterator
from datetime import timedelta

import pytest
from django.db import connection
from django.tasks.exceptions import InvalidTask
from django.test.utils import override_settings
from django.utils import timezone

from jobs import limits, store
from jobs.models import Job, Limit, LimitState
from jobs.states import State
from tests.support import factories
from tests.tasks import basic, limited

pytestmark = pytest.mark.django_db

T0 = timezone.now().replace(microsecond=0) + timedelta(days=1)
NAMED = {
    "reports": {"concurrency": 1, "per_key": True},
    "provider": {"rate": "5/s", "burst": 0},
}


@pytest.fixture(autouse=True)
def named_limits() -> Iterator[None]:
    limits.registry.forget()
    with override_settings(JOBS={"LIMITS": NAMED}):
        yield
    limits.registry.forget()


def states(ids: list[str]) -> dict[str, int]:
    found: dict[str, int] = {}
    for state in Job.objects.filter(id__in=ids).values_list("state", flat=True):
        found[state] = found.get(state, 0) + 1
    return found


def started(ids: list[str]) -> list[Job]:
    return list(Job.objects.filter(id__in=ids, attempt=1).order_by("started_at"))


def test_a_rate_limit_starts_rate_plus_burst_a_second_and_sets_aside_the_rest(side_effects: None) -> None:
    ids = [r.id for r in limited.rated.enqueue_many([((f"r{n}",), {}) for n in range(40)])]
    factories.run_due(now=T0)
    # Burst 2: three start at once; the rest wait for the starts the limit set aside.
    assert states(ids) == {State.SUCCEEDED: 3, State.SCHEDULED: 37}
    waiting = list(Job.objects.filter(state=State.SCHEDULED).order_by("run_at"))
    assert {(j.limit_wait, j.limit_reserved, j.attempt) for j in waiting} == {("rate", True, 0)}
    gaps = {round((b.run_at - a.run_at).total_seconds(), 3) for a, b in itertools.pairwise(waiting)}
    assert gaps == {0.1}
    # Each comes back 50 ms before its start time, to be claimed and held until then.
    lead = timedelta(milliseconds=50)
    assert waiting[0].run_at == T0 + timedelta(seconds=0.1) - lead
    # Wherever a one-second window falls, at most 10 + 2 start in it.
    starts = [T0] * 3 + [j.run_at + lead for j in waiting]
    for first in starts:
        assert sum(1 for t in starts if first <= t < first + timedelta(seconds=1)) <= 12
    # As their times come, they run without consulting the rate again (and in order).
    clock = waiting[0].run_at
    factories.run_due(now=clock)
    assert Job.objects.get(id=waiting[0].id).state == State.SUCCEEDED
    assert Job.objects.get(id=waiting[1].id).state == State.SCHEDULED


def test_a_concurrency_limit_starts_at_most_that_many_and_a_finishing_job_wakes_the_next() -> None:
    ids = [r.id for r in limited.two_at_a_time.enqueue_many([((f"c{n}",), {}) for n in range(5)])]
    token = uuid.uuid4()
    with connection.cursor() as cursor:
        claimed = store.claim(cursor, worker=token, queues=["default"], limit=10, now=T0)
    assert sorted(row.decision for row in claimed) == ["start", "start"] + ["wait_concurrency"] * 3
    assert states(ids) == {State.RUNNING: 2, State.SCHEDULED: 3}
    assert LimitState.objects.get(limit_name="task:tests.tasks.limited.two_at_a_time").running == 2
    # Nothing more starts while both run.
    with connection.cursor() as cursor:
        assert store.claim(cursor, worker=token, queues=["default"], limit=10, now=T0) == []
    # One finishes: its slot goes back and the next waiting job becomes claimable at once.
    first = next(row for row in claimed if row.decision == "start")
    with connection.cursor() as cursor:
        store.record_outcomes(
            cursor, worker=token, outcomes=[{"id": str(first.id), "attempt": 1, "state": "succeeded"}]
        )
        again = store.claim(cursor, worker=token, queues=["default"], limit=10, now=T0)
    assert [row.decision for row in again] == ["start"]
    assert states(ids) == {State.SUCCEEDED: 1, State.RUNNING: 2, State.SCHEDULED: 2}
    assert all(j.attempt == 0 for j in Job.objects.filter(id__in=ids, state=State.SCHEDULED))


def test_a_lost_workers_slot_comes_back_with_its_lease() -> None:
    ids = [r.id for r in limited.two_at_a_time.enqueue_many([((f"c{n}",), {}) for n in range(3)])]
    token = uuid.uuid4()
    with connection.cursor() as cursor:
        claimed = store.claim(cursor, worker=token, queues=["default"], limit=10, now=T0)
        store.record_outcomes(cursor, worker=token, outcomes=[], started=[(r.id, r.attempt) for r in claimed])
        # The worker vanishes: its leases run out and the reaper takes its jobs back.
        store.reap(cursor, backoff_base=1.0, backoff_cap=1.0, now=T0 + timedelta(seconds=400))
    assert LimitState.objects.get(limit_name="task:tests.tasks.limited.two_at_a_time").running == 0
    assert states(ids)[State.QUEUED] == 1  # the one that waited for a slot, woken


def test_each_key_of_a_per_key_limit_has_its_own_budget() -> None:
    for user in (1, 2):
        limited.report.using(limit_key=f"user:{user}").enqueue_many(
            [((f"u{user}-{n}",), {}) for n in range(3)]
        )
    with connection.cursor() as cursor:
        claimed = store.claim(cursor, worker=uuid.uuid4(), queues=["default"], limit=10, now=T0)
    running = Job.objects.filter(state=State.RUNNING)
    assert sorted(running.values_list("limit_key", flat=True)) == ["user:1", "user:2"]
    assert len([r for r in claimed if r.decision == "start"]) == 2


def test_other_work_flows_while_a_key_is_at_its_limit(side_effects: None) -> None:
    limited.rated.enqueue_many([((f"r{n}",), {}) for n in range(100)])
    free = [r.id for r in basic.record.enqueue_many([((f"free-{n}",), {}) for n in range(100)])]
    for _ in range(3):
        factories.run_due(now=T0, limit=100)
    # The limited jobs were set aside (once each), the others all ran.
    assert states(free) == {State.SUCCEEDED: 100}
    assert Job.objects.filter(task_path="tests.tasks.limited.rated", state=State.QUEUED).count() == 0


def test_a_limit_changed_in_the_console_applies_at_the_next_claim() -> None:
    name = "task:tests.tasks.limited.two_at_a_time"
    limited.two_at_a_time.enqueue_many([((f"c{n}",), {}) for n in range(6)])
    Limit.objects.filter(name=name).update(concurrency=4, source=limits.CONSOLE)
    with connection.cursor() as cursor:
        claimed = store.claim(cursor, worker=uuid.uuid4(), queues=["default"], limit=10, now=T0)
    assert len([r for r in claimed if r.decision == "start"]) == 4
    # And code does not overwrite what the console set.
    limits.registry.forget()
    limited.two_at_a_time.enqueue("more")
    assert Limit.objects.get(name=name).concurrency == 4


def test_a_named_limit_from_settings_is_registered_and_shared() -> None:
    limited.call_provider.enqueue_many([((f"p{n}",), {}) for n in range(10)])
    provider = Limit.objects.get(name="provider")
    assert (provider.rate, provider.burst, provider.concurrency, provider.source) == (
        5.0,
        0,
        None,
        "settings",
    )


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"rate_limit": "fast"}, "a rate is 'N/s', 'N/m' or 'N/h'"),
        ({"rate_limit": "0/s"}, "more than zero"),
        ({"rate_limit": "10/s", "burst": -1}, "burst of limit"),
        ({"concurrency_limit": 0}, "concurrency of limit"),
        ({"burst": 3}, "burst needs a rate_limit"),
        ({"limit": "nope"}, "unknown limit 'nope'"),
        ({"limit_key": "user:1"}, "limit_key needs a limit"),
        ({"limit": "reports", "rate_limit": "1/s"}, "not both"),
    ],
)
def test_bad_limits_fail_at_enqueue(options: dict, message: str) -> None:
    with pytest.raises(InvalidTask, match=message):
        basic.record.using(**options).enqueue("x")
    assert not Job.objects.exists()


def test_rates_parse_per_second_minute_and_hour() -> None:
    assert [limits.parse_rate(text) for text in ("100/s", "30/m", "7200/h", 2.5)] == [100.0, 0.5, 2.0, 2.5]


def test_starts_within_the_horizon_come_with_their_time_and_late_ones_keep_their_place() -> None:
    # 100/s with no burst: one start every 10 ms. The claim hands out the starts of the next
    # 100 ms at once, each with the seconds the worker holds it for; the rest wait.
    fast = limited.rated.using(rate_limit="100/s", burst=0)
    ids = [r.id for r in fast.enqueue_many([((f"f{n}",), {}) for n in range(30)])]
    token = uuid.uuid4()
    with connection.cursor() as cursor:
        claimed = store.claim(cursor, worker=token, queues=["default"], limit=30, now=T0)
    starts = [row for row in claimed if row.decision == "start"]
    assert [round(row.start_in, 3) for row in starts] == [n / 100 for n in range(10)]
    # The row says when each one starts, not when it was claimed, and so does the claim.
    times = [job.started_at for job in started(ids)]
    assert times == [T0 + timedelta(milliseconds=10 * n) for n in range(10)]
    assert [row.attempted_at() for row in starts] == times
    waiting = list(Job.objects.filter(id__in=ids, state=State.SCHEDULED).order_by("run_at"))
    assert len(waiting) == 20
    assert waiting[0].run_at == T0 + timedelta(milliseconds=100 - 50)
    # The claim after next comes late, 2 s on: the waiting jobs' times have passed, and
    # they start before anything enqueued since, in their order, not sent to the back.
    late = [r.id for r in fast.enqueue_many([((f"l{n}",), {}) for n in range(5)])]
    with connection.cursor() as cursor:
        cursor.execute("UPDATE jobs_job SET state = 'queued' WHERE state = 'scheduled'")
        again = store.claim(cursor, worker=token, queues=["default"], limit=40, now=T0 + timedelta(seconds=2))
    order = [str(row.id) for row in again if row.decision == "start"]
    assert order[:10] == [str(job.id) for job in waiting[:10]]
    assert not set(order) & set(late)


def test_the_claim_without_the_limits_passes_over_a_limited_job_and_says_a_limit_is_declared() -> None:
    free = basic.add.enqueue(1, 2)
    held = limited.two_at_a_time.enqueue("c")
    token = uuid.uuid4()
    with connection.cursor() as cursor:
        rows = store.claim(cursor, worker=token, queues=["default"], limit=10, now=T0, limits=False)
    assert [(row.id, row.decision) for row in rows] == [(uuid.UUID(free.id), "start"), (None, "limits")]
    assert store.LIMITS_DECLARED == "limits"
    assert Job.objects.filter(id=held.id, state=State.QUEUED, attempt=0).exists()
    # Claimed under the limits, it starts and takes its slot.
    with connection.cursor() as cursor:
        again = store.claim(cursor, worker=token, queues=["default"], limit=10, now=T0, limits=True)
    assert [(row.id, row.decision) for row in again] == [(uuid.UUID(held.id), "start")]
    assert LimitState.objects.get(limit_name="task:tests.tasks.limited.two_at_a_time").running == 1


def test_with_no_limit_declared_the_claim_without_the_limits_starts_every_due_job() -> None:
    ids = [basic.add.enqueue(1, 2).id, limited.two_at_a_time.enqueue("c").id]
    LimitState.objects.all().delete()
    Limit.objects.all().delete()
    with connection.cursor() as cursor:
        assert not store.limits_declared(cursor)
        rows = store.claim(cursor, worker=uuid.uuid4(), queues=["default"], limit=10, now=T0, limits=False)
    assert sorted(str(row.id) for row in rows) == sorted(ids)
    assert {row.decision for row in rows} == {"start"}


# --- waiting costs nothing (issue 15): parked jobs, woken by releases -----------------------

TWO = "task:tests.tasks.limited.two_at_a_time"


def parked() -> dict[str, str]:
    """Each job parked on a concurrency limit, with its row version (ctid: any write to the
    row makes a new one)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT id::text, ctid::text FROM jobs_job "
            "WHERE state = 'scheduled' AND limit_wait = 'concurrency'"
        )
        return dict(cursor.fetchall())


def finish(token: uuid.UUID, job_id: uuid.UUID | str) -> None:
    with connection.cursor() as cursor:
        store.record_outcomes(
            cursor, worker=token, outcomes=[{"id": str(job_id), "attempt": 1, "state": "succeeded"}]
        )


def test_a_full_key_parks_all_its_queued_jobs_at_once_and_nothing_reads_them_again(
    side_effects: None,
) -> None:
    ids = [r.id for r in limited.two_at_a_time.enqueue_many([((f"c{n}",), {}) for n in range(200)])]
    free = [r.id for r in basic.record.enqueue_many([((f"free-{n}",), {}) for n in range(50)])]
    token = uuid.uuid4()
    with connection.cursor() as cursor:
        first = store.claim(cursor, worker=token, queues=["default"], limit=10, now=T0)
    # Two start; the key is full, and all its other jobs park in that claim, not the eight
    # it was handed now and the rest claim by claim.
    assert [row.decision for row in first].count("start") == 2
    assert states(ids) == {State.RUNNING: 2, State.SCHEDULED: 198}
    before = parked()
    assert len(before) == 198
    # The other work is claimed over the next ten minutes: no claim and no promotion
    # writes a parked row again, and none of them is due at any time.
    for minute in range(10):
        at = T0 + timedelta(minutes=minute)
        with connection.cursor() as cursor:
            store.promote(cursor, now=at)
            store.claim(cursor, worker=token, queues=["default"], limit=10, now=at)
    assert states(free) == {State.RUNNING: 50}
    assert parked() == before
    with connection.cursor() as cursor:
        assert store.next_due(cursor).scheduled is None
    # A release wakes exactly one, the first in line, and it keeps its place in the queue.
    running = Job.objects.filter(id__in=ids, state=State.RUNNING).first()
    assert running is not None
    finish(token, running.id)
    woken = Job.objects.filter(id__in=ids, state=State.QUEUED)
    assert [job.args for job in woken] == [["c2"]]
    assert woken[0].run_at < T0


def test_a_woken_job_that_expired_passes_its_turn_to_the_next() -> None:
    ids = [r.id for r in limited.two_at_a_time.enqueue_many([((f"c{n}",), {}) for n in range(4)])]
    token = uuid.uuid4()
    with connection.cursor() as cursor:
        claimed = store.claim(cursor, worker=token, queues=["default"], limit=10, now=T0)
    waiting = sorted(Job.objects.filter(id__in=ids, state=State.SCHEDULED), key=lambda job: job.id)
    Job.objects.filter(id=waiting[0].id).update(expires_at=T0 - timedelta(seconds=1))
    finish(token, next(row.id for row in claimed if row.decision == "start"))
    with connection.cursor() as cursor:
        again = store.claim(cursor, worker=token, queues=["default"], limit=10, now=T0)
    # The one woken had expired: the claim ends it and wakes the next for the free slot.
    assert [(str(row.id), row.decision) for row in again] == [(str(waiting[0].id), "expire")]
    assert Job.objects.get(id=waiting[1].id).state == State.QUEUED
    with connection.cursor() as cursor:
        last = store.claim(cursor, worker=token, queues=["default"], limit=10, now=T0)
    assert [(str(row.id), row.decision) for row in last] == [(str(waiting[1].id), "start")]


def test_the_look_by_key_wakes_a_lost_turn_and_drops_the_keys_no_job_names() -> None:
    token = uuid.uuid4()
    lost = [r.id for r in limited.report.using(limit_key="user:1").enqueue_many([((k,), {}) for k in "abc"])]
    done = limited.report.using(limit_key="user:2").enqueue("d").id
    busy = limited.report.using(limit_key="user:3").enqueue("e").id
    with connection.cursor() as cursor:
        store.claim(cursor, worker=token, queues=["default"], limit=10, now=T0)
    assert states(lost) == {State.RUNNING: 1, State.SCHEDULED: 2}
    # user:1's running job ends and wakes the next, which an operator cancels before it is
    # claimed: its turn is lost, and the last one stays parked with the key's slot free.
    finish(token, Job.objects.get(id__in=lost, state=State.RUNNING).id)
    store.cancel(Job.objects.get(id__in=lost, state=State.QUEUED).id)
    finish(token, done)
    with connection.cursor() as cursor:
        tended = store.tend_limit_keys(cursor)
    assert tended == store.Tended(woken=1, dropped=1)
    assert states(lost) == {State.SUCCEEDED: 1, State.CANCELLED: 1, State.QUEUED: 1}
    keys = set(LimitState.objects.filter(limit_name="reports").values_list("limit_key", flat=True))
    assert keys == {"user:1", "user:3"}
    assert Job.objects.get(id=busy).state == State.RUNNING
    # A key already woken is left alone: nothing more to do.
    with connection.cursor() as cursor:
        assert store.tend_limit_keys(cursor) == store.Tended(woken=0, dropped=0)


def test_a_job_whose_key_lost_its_state_row_is_claimed_once_the_claim_made_it_again() -> None:
    job = limited.report.using(limit_key="user:9").enqueue("x")
    # Dropped as unused a moment before this job's enqueue committed.
    LimitState.objects.filter(limit_name="reports", limit_key="user:9").delete()
    token = uuid.uuid4()
    with connection.cursor() as cursor:
        assert store.claim(cursor, worker=token, queues=["default"], limit=10, now=T0) == []
        again = store.claim(cursor, worker=token, queues=["default"], limit=10, now=T0)
    assert [(str(row.id), row.decision) for row in again] == [(job.id, "start")]
    assert LimitState.objects.get(limit_name="reports", limit_key="user:9").running == 1


def test_a_rate_limited_key_keeps_its_state_row_until_its_budget_is_whole_again(side_effects: None) -> None:
    limited.rated.enqueue_many([((f"r{n}",), {}) for n in range(3)])
    factories.run_due(now=T0)
    assert states([str(j.id) for j in Job.objects.all()]) == {State.SUCCEEDED: 3}
    name = "task:tests.tasks.limited.rated"
    # Three starts at once (a burst of 2) used the budget up to T0 + 0.3 s: a row made anew
    # would let the next three start at once again.
    with connection.cursor() as cursor:
        assert store.tend_limit_keys(cursor, now=T0 + timedelta(seconds=0.1)).dropped == 0
        assert LimitState.objects.filter(limit_name=name).exists()
        assert store.tend_limit_keys(cursor, now=T0 + timedelta(seconds=1)).dropped == 1
    assert not LimitState.objects.filter(limit_name=name).exists()
