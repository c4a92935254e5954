"""The scheduler's enqueue path on real PostgreSQL, with the clock moved instead of slept."""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

import pytest
from django.db import transaction

from jobs.models import FireOutcome, FireRecord, Job, Overlap, Schedule
from jobs.scheduler.cron import Slot
from jobs.scheduler.fire import advance, fire_slot, run_now
from jobs.scheduler.validation import check
from jobs.states import State
from tests.integration.test_scheduler_support import (
    BEAT,
    fired_slots,
    jobs_of,
    make_schedule,
    run_clock,
    scheduler,
    start_blocked,
    utc,
)

pytestmark = pytest.mark.django_db

T0 = utc("2026-01-10T00:00:00")


def test_each_due_slot_becomes_one_job_with_the_schedules_payload() -> None:
    schedule = make_schedule(
        "every-minute", task_path="tests.tasks.scheduled.for_user", args=[7], kwargs={"reason": "digest"}
    )
    schedule.queue_name, schedule.priority = "low", 20
    schedule.save()
    runner = scheduler()
    run_clock(runner, T0, T0 + timedelta(minutes=5))

    slots = fired_slots(schedule)
    assert slots == [T0 + timedelta(minutes=m) for m in range(1, 6)]
    jobs = jobs_of(schedule)
    assert len(jobs) == 5
    assert {
        (j.task_path, j.queue_name, j.priority, tuple(j.args), tuple(j.kwargs.items())) for j in jobs
    } == {("tests.tasks.scheduled.for_user", "low", 20, (7,), (("reason", "digest"),))}
    schedule.refresh_from_db()
    assert schedule.last_fired_at == T0 + timedelta(minutes=5)
    assert schedule.next_fire_at == T0 + timedelta(minutes=6)


def test_two_schedulers_at_the_same_moment_fire_each_slot_once() -> None:
    schedule = make_schedule("shared")
    first, second = scheduler(), scheduler()
    now = T0
    first.tick(now=now)
    for _ in range(10):
        now += timedelta(minutes=1)
        # Both read the schedule before either writes: the fire record decides.
        first.tick(now=now)
        Schedule.objects.filter(pk=schedule.pk).update(next_fire_at=now)
        second.tick(now=now)
    assert len(fired_slots(schedule)) == 10
    assert Job.objects.count() == 10


def test_the_job_and_its_fire_record_commit_or_roll_back_together() -> None:
    schedule = make_schedule("atomic")
    task = check(schedule).task
    with pytest.raises(RuntimeError), transaction.atomic():
        fire_slot(schedule, task, Slot(T0))
        assert FireRecord.objects.count() == 1 and Job.objects.count() == 1
        raise RuntimeError("the surrounding transaction fails")
    assert FireRecord.objects.count() == 0
    assert Job.objects.count() == 0
    # The slot is still free: the next attempt fires it.
    assert fire_slot(schedule, task, Slot(T0)).outcome == FireOutcome.ENQUEUED


def test_a_slot_already_fired_is_taken_not_fired_again() -> None:
    schedule = make_schedule("taken")
    task = check(schedule).task
    assert fire_slot(schedule, task, Slot(T0)).outcome == FireOutcome.ENQUEUED
    assert fire_slot(schedule, task, Slot(T0)).outcome == "taken"
    assert Job.objects.count() == 1


def test_a_scheduler_holding_an_old_copy_does_not_fire_an_edited_or_disabled_schedule() -> None:
    stale = make_schedule("edited")
    task = check(stale).task
    fresh = Schedule.objects.get(pk=stale.pk)
    fresh.enabled = False
    fresh.save()
    assert fire_slot(stale, task, Slot(T0)).outcome == "taken"
    assert not advance(stale, next_fire_at=T0 + timedelta(days=1), last_fired_at=T0)
    fresh.refresh_from_db()
    assert fresh.next_fire_at != T0 + timedelta(days=1)
    assert Job.objects.count() == 0


@pytest.mark.django_db(transaction=True)
def test_two_saves_at_once_get_two_revisions_and_the_scheduler_writes_only_under_the_last() -> None:
    make_schedule("edited-twice", cron="0 3 * * *")
    first, second = Schedule.objects.get(name="edited-twice"), Schedule.objects.get(name="edited-twice")
    assert first.revision == second.revision
    first.cron, second.cron = "0 4 * * *", "0 5 * * *"
    with ThreadPoolExecutor(max_workers=1) as pool:
        with transaction.atomic():
            first.save()
            # The second save, on another connection, waits for the first one's row lock.
            saving = start_blocked(pool, second.save)
        saving.result(timeout=30)
    stored = Schedule.objects.get(name="edited-twice")
    assert first.revision < second.revision == stored.revision
    assert stored.cron == "0 5 * * *"
    # A scheduler that read the first edit holds a revision that no longer stands.
    task = check(first).task
    assert fire_slot(first, task, Slot(T0)).outcome == "taken"
    assert not advance(first, next_fire_at=T0 + timedelta(days=1), last_fired_at=None)
    assert advance(stored, next_fire_at=T0 + timedelta(days=1), last_fired_at=None)


def test_a_new_schedule_starts_at_revision_one_and_each_save_adds_one() -> None:
    schedule = Schedule(name="counted", task_path=BEAT, interval_seconds=60)
    schedule.save()
    assert schedule.revision == 1 == Schedule.objects.get(pk=schedule.pk).revision
    schedule.priority = 5
    schedule.save(update_fields=["priority"])
    schedule.save()
    assert schedule.revision == 3 == Schedule.objects.get(pk=schedule.pk).revision


def test_saving_a_schedule_deleted_meanwhile_says_so_and_does_not_bring_it_back() -> None:
    schedule = make_schedule("deleted-meanwhile")
    Schedule.objects.filter(pk=schedule.pk).delete()
    schedule.priority = 5
    with pytest.raises(Schedule.NotUpdated), transaction.atomic():
        schedule.save()
    assert not Schedule.objects.filter(name="deleted-meanwhile").exists()


def test_advance_never_moves_the_next_fire_time_backwards() -> None:
    schedule = make_schedule("ahead")
    assert advance(schedule, next_fire_at=T0 + timedelta(hours=2), last_fired_at=T0 + timedelta(hours=1))
    assert advance(schedule, next_fire_at=T0 + timedelta(hours=1), last_fired_at=T0)
    schedule.refresh_from_db()
    assert (schedule.next_fire_at, schedule.last_fired_at) == (
        T0 + timedelta(hours=2),
        T0 + timedelta(hours=1),
    )


def test_overlap_skip_records_a_skipped_slot_while_the_previous_job_is_unfinished() -> None:
    schedule = make_schedule("no-overlap", overlap=Overlap.SKIP)
    runner = scheduler()
    run_clock(runner, T0, T0 + timedelta(minutes=3))
    records = list(FireRecord.objects.filter(schedule=schedule).order_by("slot"))
    assert [r.outcome for r in records] == ["enqueued", "skipped_overlap", "skipped_overlap"]
    assert [r.job_id is not None for r in records] == [True, False, False]

    Job.objects.filter(id=records[0].job_id).update(state=State.SUCCEEDED, finished_at=T0)
    run_clock(runner, T0 + timedelta(minutes=4), T0 + timedelta(minutes=5))
    outcomes = list(
        FireRecord.objects.filter(schedule=schedule).order_by("slot").values_list("outcome", flat=True)
    )
    assert outcomes[3:] == ["enqueued", "skipped_overlap"]
    assert Job.objects.count() == 2


def test_overlap_allow_enqueues_every_slot() -> None:
    schedule = make_schedule("overlap-ok", overlap=Overlap.ALLOW)
    run_clock(scheduler(), T0, T0 + timedelta(minutes=3))
    assert len(jobs_of(schedule)) == 3


def test_run_now_goes_through_the_same_path_and_keeps_the_slot_free() -> None:
    schedule = make_schedule("manual", overlap=Overlap.SKIP)
    manual = run_now(schedule, now=T0 + timedelta(minutes=1))
    assert manual.outcome == FireOutcome.ENQUEUED
    record = FireRecord.objects.get(job_id=manual.job_id)
    assert record.manual and record.slot == T0 + timedelta(minutes=1)
    # The scheduled slot at the same instant still fires, once (overlap is for slots; this
    # one is skipped because the manual job is unfinished, and recorded as such).
    Schedule.objects.filter(pk=schedule.pk).update(next_fire_at=T0 + timedelta(minutes=1))
    scheduler().tick(now=T0 + timedelta(minutes=1))
    assert fired_slots(schedule) == [T0 + timedelta(minutes=1)]
    assert FireRecord.objects.get(schedule=schedule, manual=False).outcome == FireOutcome.SKIPPED_OVERLAP


# --- catch-up after downtime ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("catchup", "window", "fired_after_outage"),
    [
        ("skip", 3600, 0),
        ("latest", 3600, 1),
        ("all", 3 * 3600, 3),
        ("all", 86400, 10),
    ],
)
def test_catch_up_after_an_outage_fires_exactly_what_the_policy_says(
    catchup: str, window: int, fired_after_outage: int
) -> None:
    schedule = make_schedule("hourly", cron="0 * * * *", catchup=catchup, catchup_window=window)
    runner = scheduler()
    run_clock(runner, T0 - timedelta(minutes=30), T0)
    assert fired_slots(schedule) == [T0]
    # No scheduler runs from 00:00:01 to 10:30; then one starts.
    runner.tick(now=T0 + timedelta(hours=10, minutes=30))
    after = fired_slots(schedule)[1:]
    assert len(after) == fired_after_outage
    assert after == [T0 + timedelta(hours=h) for h in range(11 - fired_after_outage, 11)]
    schedule.refresh_from_db()
    assert schedule.next_fire_at == T0 + timedelta(hours=11)


def test_catch_up_all_is_capped(caplog: pytest.LogCaptureFixture) -> None:
    schedule = make_schedule("per-minute", catchup="all", catchup_window=86400)
    runner = scheduler(catchup_limit=25)
    runner.tick(now=T0 - timedelta(seconds=1))
    with caplog.at_level(logging.WARNING, logger="jobs.scheduler"):
        runner.tick(now=T0 + timedelta(hours=5))
    assert len(fired_slots(schedule)) == 25
    assert fired_slots(schedule)[-1] == T0 + timedelta(hours=5)
    assert "event=slots_missed" in caplog.text and "schedule=per-minute policy=all" in caplog.text


def test_a_re_enabled_schedule_starts_from_now_instead_of_catching_up() -> None:
    schedule = make_schedule("paused", catchup="all", catchup_window=86400)
    schedule.enabled = False
    schedule.save()
    schedule.enabled = True
    schedule.save()
    schedule.refresh_from_db()
    assert schedule.next_fire_at is not None
    assert FireRecord.objects.count() == 0


# --- bad schedules ----------------------------------------------------------------------


def test_invalid_schedules_are_logged_once_and_skipped_while_the_rest_fire(
    caplog: pytest.LogCaptureFixture,
) -> None:
    good = make_schedule("good")
    bad = {
        "bad-cron": {"cron": "61 * * * *"},
        "bad-task": {"task_path": "tests.tasks.scheduled.not_a_task"},
        "missing-task": {"task_path": "tests.tasks.nowhere.beat"},
        "bad-zone": {"cron": "0 3 * * *", "time_zone": "Mars/Olympus_Mons"},
        "bad-args": {"args": {"not": "a list"}},
        "bad-kwargs": {"kwargs": ["not", "a", "dict"]},
        "bad-signature": {"task_path": "tests.tasks.scheduled.for_user", "kwargs": {"nope": 1}},
        "bad-queue": {"queue_name": "nowhere"},
    }
    for name, fields in bad.items():
        make_schedule(name, **fields)
    runner = scheduler()
    with caplog.at_level(logging.INFO, logger="jobs.scheduler"):
        runner.start()
        run_clock(runner, T0, T0 + timedelta(minutes=3))
    assert len(fired_slots(good)) == 3
    assert FireRecord.objects.exclude(schedule=good).count() == 0
    invalid = [r.getMessage() for r in caplog.records if "event=schedule_invalid" in r.getMessage()]
    assert sorted(line.split("schedule=")[1].split()[0] for line in invalid) == sorted(bad)
    text = "\n".join(invalid)
    for fragment in (
        "cron: invalid cron expression '61 * * * *'",
        "is not a task (decorate it with @task)",
        "cannot be imported",
        "unknown time zone 'Mars/Olympus_Mons'",
        "args must be a JSON list, not dict",
        "kwargs must be a JSON object, not list",
        "do not fit tests.tasks.scheduled.for_user",
        "unknown queue 'nowhere'",
    ):
        assert fragment in text
    assert "event=scheduler_started" in caplog.text and "invalid=8" in caplog.text


def test_a_schedule_fixed_by_an_edit_fires_again() -> None:
    schedule = make_schedule("fixed-later", cron="61 * * * *")
    runner = scheduler()
    runner.tick(now=T0)
    schedule.cron = "*/5 * * * *"
    schedule.save()
    Schedule.objects.filter(pk=schedule.pk).update(next_fire_at=None)
    run_clock(runner, T0, T0 + timedelta(minutes=10))
    assert fired_slots(schedule) == [T0 + timedelta(minutes=5), T0 + timedelta(minutes=10)]
