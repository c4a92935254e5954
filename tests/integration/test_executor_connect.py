"""What an executor does when its connection comes up (jobs/worker/executor.py): on a
reconnect it gives back the rows a claim took under its token while the reply was lost
(nobody would run them until their lease ran out); on its first connection there can be
none, and it sends no statement for them."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from django.db import connection

from jobs import store
from jobs.models import Job
from jobs.states import State
from jobs.worker.executor import Executor
from jobs.worker.slots import SlotTable
from tests.support import factories
from tests.tasks import basic

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def executor() -> Iterator[Executor]:
    config = factories.worker_config()
    made = Executor(config, index=0, token=uuid.uuid4(), slots=SlotTable(1, config.slot_entries))
    yield made
    made.db.drop()
    made.feeder.close()


@pytest.fixture
def releases(monkeypatch: pytest.MonkeyPatch) -> list[uuid.UUID]:
    """The tokens store.release was called for (it still runs)."""
    calls: list[uuid.UUID] = []
    real = store.release

    def release(cursor: Any, **kwargs: Any) -> list[uuid.UUID]:
        calls.append(kwargs["worker"])
        return real(cursor, **kwargs)

    monkeypatch.setattr(store, "release", release)
    return calls


def test_the_first_connection_sends_nothing_for_orphans_and_a_reconnect_gives_them_back(
    executor: Executor, releases: list[uuid.UUID]
) -> None:
    executor.db.ensure()
    assert releases == []

    # A claim under the executor's token committed, and its reply never came back.
    job_id = uuid.UUID(basic.add.enqueue(1, 2).id)
    with connection.cursor() as cursor:
        claimed = store.claim(cursor, worker=executor.token, queues=["default"], limit=1)
    assert [row.id for row in claimed] == [job_id]

    executor.db.drop()
    executor.db.ensure()
    assert releases == [executor.token]
    job = Job.objects.get(id=job_id)
    assert (job.state, job.attempt, job.worker_id) == (State.QUEUED, 0, None)
