"""``manage.py jobs``: the operators' CLI, in process (call_command) and, for the exit
status, as a real subprocess."""

from __future__ import annotations

import json
import uuid
from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from jobs import stats
from jobs.models import Job, Limit, PausedQueue
from jobs.states import State
from tests.conftest import manage
from tests.support import factories

pytestmark = pytest.mark.django_db


def jobs(*args: str) -> str:
    out = StringIO()
    call_command("jobs", *args, stdout=out, stderr=StringIO())
    return out.getvalue()


def test_stats_json_has_the_documented_shape() -> None:
    factories.insert_queued(3, queue_name="email")
    factories.job(State.SCHEDULED, queue_name="email")
    factories.job(State.SCHEDULED, queue_name="email", attempt=1)
    factories.job(State.RUNNING, queue_name="email")
    factories.job(State.DEAD, queue_name="email")
    factories.job(State.SUCCEEDED, queue_name="email")
    PausedQueue.objects.create(name="push")
    data = json.loads(jobs("stats", "--json"))
    assert set(data) == {"queues", "workers"}
    email = data["queues"]["email"]
    assert {k: email[k] for k in ("queued", "scheduled", "retrying", "running", "dead")} == {
        "queued": 3, "scheduled": 1, "retrying": 1, "running": 1, "dead": 1,
    }  # fmt: skip
    assert email["oldest_due_age_s"] >= 0 and email["paused"] is False
    assert data["queues"]["push"]["paused"] is True
    assert data["workers"] == 0
    assert "email" in jobs("stats")


def test_the_counts_follow_every_kind_of_write_and_survive_compaction() -> None:
    job = factories.job(State.QUEUED)
    factories.insert_queued(4, queue_name="email")
    Job.objects.filter(queue_name="email").update(state=State.CANCELLED, finished_at=timezone.now())
    Job.objects.filter(id=job.id).delete()
    before = stats.counts()
    assert before == {"email": {"cancelled": 4}}
    stats.compact()
    assert stats.counts() == before
    with __import__("django.db").db.connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM jobs_queue_count")
        assert cursor.fetchone()[0] == 1


def test_list_filters_and_json() -> None:
    dead = factories.job(State.DEAD, queue_name="email", task_path="tests.tasks.basic.fail_always")
    factories.job(State.SUCCEEDED)
    rows = json.loads(jobs("list", "--state", "dead", "--json"))
    assert [row["id"] for row in rows] == [str(dead.id)]
    assert json.loads(jobs("list", "--queue", "email", "--task", "tests.tasks.basic.fail_always", "--json"))
    assert json.loads(jobs("list", "--queue", "nowhere", "--json")) == []
    assert str(dead.id) in jobs("list", "--limit", "5")


def test_show_retry_and_cancel() -> None:
    dead = factories.job(State.DEAD, args=["<a>"])
    shown = json.loads(jobs("show", str(dead.id)))
    assert shown["args"] == ["<a>"] and len(shown["errors"]) == 3
    assert "replayed" in jobs("retry", str(dead.id))
    assert Job.objects.get(id=dead.id).state == State.QUEUED
    assert "cancelled" in jobs("cancel", str(dead.id))
    assert Job.objects.get(id=dead.id).state == State.CANCELLED


def test_retry_dead_by_filter_is_capped() -> None:
    factories.insert_finished(5, state=State.DEAD, task_path="tests.tasks.basic.add")
    factories.insert_finished(2, state=State.DEAD)
    out = jobs("retry", "--dead", "--task", "tests.tasks.basic.add", "--limit", "3")
    assert "3 replayed, 0 refused" in out
    assert Job.objects.filter(state=State.QUEUED, task_path="tests.tasks.basic.add").count() == 3
    assert Job.objects.filter(state=State.DEAD).count() == 4


def test_pause_resume_prune_and_enqueue() -> None:
    assert "paused" in jobs("pause", "email")
    assert "already paused" in jobs("pause", "email")
    assert PausedQueue.objects.filter(name="email").exists()
    assert "resumed" in jobs("resume", "email")
    assert not PausedQueue.objects.exists()

    factories.job(State.SUCCEEDED, now=timezone.now() - timedelta(days=40))
    fresh = factories.job(State.SUCCEEDED)
    assert "deleted 1" in jobs("prune", "--older-than", "30d", "--state", "succeeded")
    assert list(Job.objects.values_list("id", flat=True)) == [fresh.id]

    job_id = jobs(
        "enqueue", "tests.tasks.basic.add", "--args", "[1, 2]", "--queue", "email", "--delay", "60"
    ).strip()
    job = Job.objects.get(id=job_id)
    assert (job.args, job.queue_name, job.state) == ([1, 2], "email", State.SCHEDULED)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["show", "not-an-id"], "is not a job id"),
        (["show", str(uuid.uuid4())], "no job with id"),
        (["retry"], "give job ids"),
        (["retry", str(uuid.uuid4()), "--dead"], "not both"),
        (["retry", str(uuid.uuid4())], "could not be replayed"),
        (["prune", "--older-than", "soon"], "a duration is"),
        (["enqueue", "tests.tasks.basic.add", "--args", "[1,"], "--args is not valid JSON"),
        (["enqueue", "tests.tasks.basic.add", "--args", "{}"], "--args must be a JSON list"),
        (["enqueue", "tests.tasks.basic.add", "--args", "[1]"], "missing a required argument"),
        (["enqueue", "no.such.task"], "cannot be imported"),
        (["list", "--limit", "0"], "at least 1"),
        (["limit", "resend", "--rate", "fast"], "a rate is"),
        (["limit", "resend"], "sets neither a rate nor a concurrency"),
    ],
)
def test_bad_input_is_a_clear_error_and_changes_nothing(args: list[str], message: str) -> None:
    before = Job.objects.count()
    # (Limits that other tests' tasks registered, on connections of their own, may exist.)
    limits_before = list(Limit.objects.order_by("name").values())
    with pytest.raises(CommandError, match=message):
        jobs(*args)
    assert Job.objects.count() == before
    assert list(Limit.objects.order_by("name").values()) == limits_before
    assert not Limit.objects.filter(name="resend").exists()


def test_limit_changes_a_named_limit_as_the_console_does_and_limits_lists_them() -> None:
    waiting = factories.job(State.SCHEDULED, limit_name="resend", limit_wait="rate", limit_reserved=True,
                            run_at=timezone.now() + timedelta(hours=1))  # fmt: skip
    out = jobs("limit", "resend", "--rate", "100/s", "--burst", "10")
    assert "rate 100/s, burst 10" in out and "1 waiting job(s) decided again" in out
    limit = Limit.objects.get(name="resend")
    assert (limit.rate, limit.burst, limit.concurrency, limit.source) == (100.0, 10, None, "console")
    # Woken to be decided again under the new values at the next claim.
    assert Job.objects.get(id=waiting.id).state == State.QUEUED
    jobs("limit", "resend", "--concurrency", "3", "--per-key")
    limit.refresh_from_db()
    assert (limit.rate, limit.concurrency, limit.per_key) == (100.0, 3, True)
    listing = jobs("limits")
    assert "resend" in listing and "console" in listing
    jobs("limit", "resend", "--lift")
    limit.refresh_from_db()
    assert (limit.rate, limit.concurrency) == (None, None)


def test_a_failing_command_exits_non_zero() -> None:
    proc = manage("jobs", "show", "nope", stdout=__import__("subprocess").PIPE,
                  stderr=__import__("subprocess").PIPE)  # fmt: skip
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 1
    assert "is not a job id" in err
