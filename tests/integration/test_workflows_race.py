"""Exactly-once advancement: two workers that record the last two members of a group at
the same moment, each on its own connection, start the chord callback once."""

from __future__ import annotations

import threading
import uuid

import pytest

from jobs import store
from jobs.db import connect
from jobs.models import Job, Workflow, WorkflowNode
from jobs.workflows import chord, group, step
from tests.tasks import workflows as t

RUNS = 60


def record_at_once(outcomes: list[tuple[uuid.UUID, dict]]) -> None:
    """Each (worker, outcome) on its own connection, released together by a barrier."""
    conns = [connect(application_name="race") for _ in outcomes]
    barrier = threading.Barrier(len(outcomes))
    errors: list[BaseException] = []

    def finish(conn, worker, outcome) -> None:
        try:
            barrier.wait()
            with conn.cursor() as cursor:
                store.record_outcomes(cursor, worker=worker, outcomes=[outcome])
        except BaseException as exc:  # noqa: BLE001 - reported by the test thread below
            errors.append(exc)

    threads = [
        threading.Thread(target=finish, args=(conn, worker, outcome))
        for conn, (worker, outcome) in zip(conns, outcomes, strict=True)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for conn in conns:
        conn.close()
    assert not errors, errors


@pytest.mark.django_db(transaction=True)
def test_the_last_two_members_finishing_together_start_the_callback_once() -> None:
    for run in range(RUNS):
        flow = chord(group(*(step(t.add, run, i) for i in range(3))), step(t.collect, f"run{run}"))
        workflow = flow.enqueue()
        members = list(
            Job.objects.filter(state="queued", task_path__endswith=".add").order_by("workflow_position")
        )
        workers = [uuid.uuid4() for _ in members]
        with connect(application_name="race") as conn, conn.cursor() as cursor:
            for job, worker in zip(members, workers, strict=True):
                [claimed] = store.claim(cursor, worker=worker, queues=["default"], limit=1)
                assert claimed.id == job.id
            # The first member finishes alone; the last two at the same moment.
            store.record_outcomes(
                cursor, worker=workers[0],
                outcomes=[{"id": str(members[0].id), "attempt": 1, "state": "succeeded", "result": run}],
            )  # fmt: skip
        record_at_once(
            [
                (
                    workers[i],
                    {"id": str(members[i].id), "attempt": 1, "state": "succeeded", "result": run + i},
                )
                for i in (1, 2)
            ]
        )
        callbacks = Job.objects.filter(task_path__endswith=".collect", workflow_node__isnull=False)
        assert [(c.state, c.args) for c in callbacks] == [("queued", [[run, run + 1, run + 2], f"run{run}"])]
        [header] = WorkflowNode.objects.filter(workflow_id=workflow.id, kind="group")
        assert (header.state, header.remaining) == ("succeeded", 0)
        # Clear the way for the next run.
        Job.objects.all().delete()
        Workflow.objects.all().delete()
