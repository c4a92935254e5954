"""The job detail page's history through Django's test client: each failed attempt's
exception and the application's own frames come before the engine's folded frames, and a
replayed job shows every run, the replay between them and the run that succeeded."""

from __future__ import annotations

import re

import pytest
from django.test import Client
from django.urls import reverse

from jobs import store
from jobs.console.history import exception_name, is_engine_file, split_traceback
from jobs.models import Job
from jobs.states import State
from tests.support import factories

pytestmark = pytest.mark.django_db

LIST = reverse("admin:jobs_job_changelist")


@pytest.fixture
def admin_client(client: Client, django_user_model) -> Client:
    client.force_login(django_user_model.objects.create(username="ops", is_staff=True, is_superuser=True))
    return client


def detail(job: Job) -> str:
    return reverse("admin:jobs_job_change", args=[job.pk])


def test_the_exception_and_the_applications_frame_come_before_the_folded_engine_frames(
    admin_client: Client,
) -> None:
    job = factories.job(State.QUEUED, task_path="tests.tasks.basic.fail_always", max_attempts=1,
                        kwargs={"message": "card declined for order 42"})  # fmt: skip
    factories.run_due()
    job.refresh_from_db()
    assert job.state == State.DEAD
    traceback = job.errors[0]["traceback"]
    # The worker's real traceback: the engine's frames come first, the task's last.
    assert traceback.index("/jobs/worker/lanes.py") < traceback.index("tests/tasks/basic.py")

    page = admin_client.get(detail(job)).content.decode()
    exception = page.index("<strong>RuntimeError</strong>: card declined for order 42")
    app_frame = page.index("tests/tasks/basic.py&quot;, line")
    folded = page.index('<details class="traceback-full">')
    assert exception < app_frame < folded
    # The engine's frames are inside the folded full traceback only.
    assert page.index("/jobs/worker/lanes.py") > folded
    assert re.search(r"Full traceback \(\d+ engine frames? folded\)", page)


def test_a_traceback_is_split_into_the_applications_frames_and_the_engines() -> None:
    text = (
        "Traceback (most recent call last):\n"
        '  File "/opt/venv/lib/python3.13/site-packages/jobs/worker/attempt.py", line 90, in call\n'
        "    return handler(*args)\n"
        '  File "/opt/venv/lib/python3.13/site-packages/django/tasks/base.py", line 180, in call\n'
        "    return self.func(*args, **kwargs)\n"
        '  File "/srv/shop/billing/tasks.py", line 12, in charge\n'
        "    gateway.charge(order)\n"
        "    ~~~~~~~~~~~~~~^^^^^^^\n"
        '  File "/srv/shop/billing/gateway.py", line 40, in charge\n'
        '    raise Declined("card declined")\n'
        "billing.gateway.Declined: card declined\n"
    )
    split = split_traceback(text)
    assert split is not None and split.folded == 2
    assert split.app_frames.splitlines()[0] == '  File "/srv/shop/billing/tasks.py", line 12, in charge'
    assert "gateway.py" in split.app_frames and "Declined: card declined" not in split.app_frames
    assert split_traceback("") is None
    assert exception_name("builtins.KeyError") == "KeyError"
    assert exception_name("billing.gateway.Declined") == "billing.gateway.Declined"
    # A directory named like the package is not the package.
    assert not is_engine_file("/home/jobs/app/tasks.py")


def test_a_job_replayed_after_three_failures_shows_four_runs_and_the_replay(admin_client: Client) -> None:
    job = factories.job(State.DEAD, max_attempts=3)
    assert len(job.errors) == 3
    response = admin_client.post(
        LIST, {"action": "replay_jobs", "_selected_action": [str(job.id)], "index": "0"}, follow=True
    )
    messages = [str(m) for m in response.context["messages"]]
    assert messages == ["Replayed 1 job."]
    factories.run_due()
    job.refresh_from_db()
    assert (job.state, job.attempt) == (State.SUCCEEDED, 1)

    page = admin_client.get(detail(job)).content.decode()
    runs = re.findall(r'<tr class="run run-(\w+)">\s*<td class="run-number"><strong>(\d+)</strong>', page)
    assert runs == [("failed", "1"), ("failed", "2"), ("failed", "3"), ("succeeded", "4")]
    assert page.count('<tr class="replay-mark">') == 1
    replay_at = page.index("<strong>Replay 1</strong> by ops")
    assert page.rfind("<strong>3</strong>", 0, replay_at) > 0 and page.index("<strong>4</strong>") > replay_at
    assert "replay 1, attempt 1</small>" in page
    assert "(it was dead)" in page
    assert "attempt 1 of 3 after replay 1 (run 4 in all)" in page


def test_each_replay_is_recorded_with_who_and_how_many_errors_came_before() -> None:
    job = factories.job(State.DEAD, max_attempts=2)
    store.replay(job.id, by="ops")
    job.refresh_from_db()
    [mark] = job.edits
    assert (mark["by"], mark["was"], mark["attempt"], mark["errors"]) == ("ops", "dead", 2, 2)
    assert "args" not in mark and mark["at"]
    # An edited payload is recorded in the same entry, with the payload it replaced.
    Job.objects.filter(id=job.id).update(state=State.DEAD)
    store.replay(job.id, args=[7], by="ann")
    job.refresh_from_db()
    assert [e.get("args") for e in job.edits] == [None, []]
    assert job.edits[1]["by"] == "ann" and job.args == [7]


def test_bulk_messages_count_in_words(admin_client: Client) -> None:
    jobs = [factories.job(State.DEAD) for _ in range(2)]
    response = admin_client.post(
        LIST,
        {"action": "replay_jobs", "_selected_action": [str(j.id) for j in jobs], "index": "0",
         "confirmed": "yes"},
        follow=True,
    )  # fmt: skip
    assert [str(m) for m in response.context["messages"]] == ["Replayed 2 jobs."]
