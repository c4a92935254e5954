"""Time limits and poison pills in a real worker: a handler that never returns is stopped,
one that kills its own process ends dead with a clear reason, and in both cases the
worker keeps running and other jobs keep flowing."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from django.db import transaction

from jobs import store
from jobs.db import Connection
from jobs.worker.feeder import Feeder
from tests.conftest import side_effect_counts
from tests.support import factories
from tests.support.workers import all_in_state, job, running_worker, wait_until
from tests.tasks import basic, resilience

pytestmark = [pytest.mark.process, pytest.mark.usefixtures("side_effects")]


def _ids(results: list) -> list[uuid.UUID]:
    return [uuid.UUID(r.id) for r in results]


def test_endless_handler_is_stopped_at_its_time_limit_and_others_complete(tmp_path: Path) -> None:
    with running_worker(tmp_path, "--concurrency", "2") as worker:
        spinner = resilience.spin.enqueue("spin").id
        others = _ids(basic.record.enqueue_many([((f"other-{i}",), {}) for i in range(20)]))
        wait_until(lambda: job(spinner).state == "dead", timeout=20)
        wait_until(lambda: all_in_state(others, "succeeded"))
        assert worker.proc.poll() is None

    dead = job(spinner)
    # Retried per its policy (max_attempts=2), then dead; each attempt a timeout.
    assert dead.attempt == 2
    assert [e["exception"] for e in dead.errors] == ["jobs.exceptions.TimeLimitExceeded"] * 2
    assert "hard time limit of 0.8s exceeded" in dead.last_error
    counts = side_effect_counts()
    assert counts["spin"] == 2
    assert all(counts[f"other-{i}"] == 1 for i in range(20))
    assert worker.log().count("event=time_limit") == 2


def test_soft_time_limit_is_raised_inside_the_handler_first(tmp_path: Path) -> None:
    with running_worker(tmp_path, "--concurrency", "1") as worker:
        polite = resilience.spin_then_clean_up.enqueue("polite").id
        stubborn = resilience.ignore_soft_limit.enqueue("stubborn").id
        after = basic.record.enqueue("after").id
        wait_until(lambda: all_in_state([polite, stubborn], "dead"), timeout=20)
        wait_until(lambda: job(after).state == "succeeded")

    # The polite handler cleaned up at its soft limit; it never reached the hard one.
    assert job(polite).attempt == 2
    assert [e["exception"] for e in job(polite).errors] == ["jobs.exceptions.SoftTimeLimitExceeded"] * 2
    # The stubborn one saw the soft limit, ignored it, and was killed at the hard limit.
    assert [e["exception"] for e in job(stubborn).errors] == ["jobs.exceptions.TimeLimitExceeded"]
    assert side_effect_counts() == {"polite:cleanup": 2, "stubborn:soft": 1, "after": 1}
    assert worker.log().count("event=time_limit") == 1


@pytest.mark.parametrize("poison", [resilience.exit_abruptly, resilience.kill_own_process])
def test_handler_that_kills_its_process_ends_dead_and_others_complete(tmp_path: Path, poison) -> None:
    with running_worker(tmp_path, "--concurrency", "1") as worker:
        pill = poison.enqueue("pill").id
        others = _ids(basic.record.enqueue_many([((f"other-{i}",), {}) for i in range(20)]))
        wait_until(lambda: job(pill).state == "dead", timeout=20)
        wait_until(lambda: all_in_state(others, "succeeded"))
        late = basic.record.enqueue("late").id
        wait_until(lambda: job(late).state == "succeeded")
        assert worker.proc.poll() is None

    dead = job(pill)
    assert dead.attempt == 2
    assert [e["exception"] for e in dead.errors] == ["jobs.exceptions.ProcessDied"] * 2
    assert "executor process died while running the job" in dead.last_error
    counts = side_effect_counts()
    assert counts["pill"] == 2
    # The executor that died had other jobs in hand: they were given back, not failed,
    # and ran once.
    assert all(counts[f"other-{i}"] == 1 for i in range(20))
    assert [job(i).attempt for i in others] == [1] * len(others)


def test_unstorable_return_value_ends_dead_without_taking_its_batch_down(tmp_path: Path) -> None:
    with running_worker(tmp_path, "--concurrency", "1") as worker:
        basic.record.enqueue("warm-up")
        wait_until(lambda: side_effect_counts().get("warm-up"))
        # One claim: the bad job between good ones.
        calls = [((f"before-{i}",), {}) for i in range(5)]
        with transaction.atomic():
            before = _ids(basic.record.enqueue_many(calls))
            bad = resilience.return_unstorable.enqueue("bad").id
            after = _ids(basic.record.enqueue_many([((f"after-{i}",), {}) for i in range(5)]))
        wait_until(lambda: all_in_state([*before, *after], "succeeded"))
        wait_until(lambda: job(bad).state == "dead")
        assert worker.proc.poll() is None

    dead = job(bad)
    assert (dead.attempt, dead.errors[0]["exception"]) == (1, "jobs.exceptions.BadReturnValue")
    assert dead.last_error == "return value cannot be stored as jsonb: a string contains a NUL character"
    assert set(side_effect_counts().values()) == {1}
    assert "event=executor_lost" not in worker.log()


def test_outcome_the_database_refuses_is_recorded_dead_and_the_rest_written(transactional_db: None) -> None:
    # Whatever slips past the executor's checks: the batch is written one by one.
    token = uuid.uuid4()
    ids = _ids(basic.add.enqueue_many([((i, i), {}) for i in range(3)]))
    db = Connection("default", name="test-outcomes")
    try:
        store.claim(db.ensure(), worker=token, queues=["default"], limit=3)
        feeder = Feeder(factories.worker_config(), token=token, db=db, lanes={})
        outcomes = [
            {"id": str(job_id), "attempt": 1, "state": "succeeded", "result": "\x00" if n == 1 else n * 2}
            for n, job_id in enumerate(ids)
        ]
        feeder.outbox.write(outcomes, [])
        feeder.close()
    finally:
        db.drop()
    assert [job(i).state for i in ids] == ["succeeded", "dead", "succeeded"]
    assert "cannot be stored" in job(ids[1]).last_error
