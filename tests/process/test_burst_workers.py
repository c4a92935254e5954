"""Real ``manage.py runworker --burst`` processes on the test database."""

from __future__ import annotations

import subprocess
import sys
import time
from collections import Counter

import pytest
from django.db import connection
from django.db.models import Count

from jobs.db import connect
from jobs.models import Job
from jobs.states import State
from tests.conftest import ROOT, manage, side_effect_counts, subprocess_env
from tests.support import factories
from tests.tasks import basic, engine

pytestmark = pytest.mark.process


def start_worker(**env: str) -> subprocess.Popen[str]:
    return manage(
        "runworker",
        "--burst",
        "--concurrency",
        "1",
        # One log line per job, as the tests read them.
        env=subprocess_env(**{"JOBS_JOB_LOG_LEVEL": "INFO", **env}),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )


def finish(worker: subprocess.Popen[str], timeout: float = 60) -> str:
    try:
        output, _ = worker.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        worker.kill()
        output, _ = worker.communicate()
        pytest.fail(f"runworker --burst did not exit within {timeout}s:\n{output[-5000:]}")
    assert worker.returncode == 0, output[-5000:]
    return output


def wait_for(condition, *, timeout: float = 30, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.02)


def holders() -> int:
    return Job.objects.filter(state=State.RUNNING).values("worker_id").distinct().count()


def test_two_workers_drain_2000_jobs_running_each_exactly_once(side_effects: None) -> None:
    total = 2000
    basic.record.enqueue_many(([f"key-{n}"], {}) for n in range(total))

    # Hold the side-effect table so that each worker's first handler blocks: both workers
    # are then certainly holding a job before either can drain the queue alone.
    with connect(application_name="test-gate") as gate:
        with gate.transaction():
            gate.execute("LOCK TABLE test_side_effects IN EXCLUSIVE MODE")
            # Handlers keep their Django connection between jobs (with the default of 0,
            # Django reconnects after every job, which triples this test's run time).
            workers = [start_worker(CONN_MAX_AGE="600") for _ in range(2)]
            try:
                wait_for(lambda: holders() == 2, what="both workers to hold a job")
            except BaseException:
                for worker in workers:
                    worker.kill()
                raise
        outputs = [finish(worker) for worker in workers]

    counts = side_effect_counts()
    assert len(counts) == total
    assert set(counts) == {f"key-{n}" for n in range(total)}
    assert set(counts.values()) == {1}
    assert dict(Job.objects.values_list("state").annotate(n=Count("id"))) == {State.SUCCEEDED: total}
    assert set(Job.objects.values_list("attempt", flat=True)) == {1}
    tokens = Counter(str(ids[0]) for ids in Job.objects.values_list("worker_ids", flat=True))
    assert len(tokens) == 2, tokens
    # One key=value line per outcome, from the worker that ran the job.
    logged = [line for out in outputs for line in out.splitlines() if "outcome=succeeded" in line]
    assert len(logged) == total
    assert all(" attempt=1/5 " in line and " task=tests.tasks.basic.record " in line for line in logged)


def test_rows_that_cannot_run_go_to_dead_and_the_worker_keeps_running(side_effects: None) -> None:
    bad = {
        "unknown task": factories.job(task_path="tests.tasks.basic.vanished"),
        "malformed path": factories.job(task_path=".x"),
        "not a task": factories.job(task_path="tests.tasks.engine.record_key", args=["x"]),
        "args not a list": factories.job(task_path="tests.tasks.basic.record", args={"key": "x"}),
        # (jsonb holds JSON only: the nearest thing to a payload that is not JSON is a string.)
        "args a string": factories.job(task_path="tests.tasks.basic.record", args="[not json"),
        "wrong arity": factories.job(task_path="tests.tasks.basic.record", args=["a", "b"]),
    }
    reasons = {
        "unknown task": "task 'tests.tasks.basic.vanished' cannot be imported",
        "malformed path": "task '.x' cannot be imported: ValueError('Empty module name')",
        "not a task": "'tests.tasks.engine.record_key' is not a task",
        "args not a list": "payload must be a list of args and a dict of kwargs, got dict and dict",
        "args a string": "payload must be a list of args and a dict of kwargs, got str and dict",
        "wrong arity": "payload does not fit the task's signature: too many positional arguments",
    }
    good = basic.record.enqueue_many(([f"good-{n}"], {}) for n in range(20))
    odd = {
        "not JSON result": basic.returns_object.enqueue(),
        "NUL in error": engine.fail_with_nul.enqueue("nul"),
        "async": basic.async_add.enqueue(2, 3),
        "context": basic.report_attempt.enqueue(),
        "bad options": factories.job(
            task_path="tests.tasks.engine.misconfigured", non_retryable=["tests.tasks.engine.NoSuchError"]
        ),
    }

    # No grace for tasks that do not import: they go dead at once, with the reason.
    output = finish(start_worker(JOBS_UNKNOWN_TASK_GRACE="0"))

    for name, job in bad.items():
        job.refresh_from_db()
        assert (job.state, job.attempt) == (State.DEAD, 1), name
        assert job.last_error.startswith(reasons[name]), (name, job.last_error)
    assert {Job.objects.get(id=r.id).state for r in good} == {State.SUCCEEDED}
    counts = side_effect_counts()
    assert {k: v for k, v in counts.items() if k.startswith("good-")} == {f"good-{n}": 1 for n in range(20)}

    not_json = Job.objects.get(id=odd["not JSON result"].id)
    assert (not_json.state, not_json.errors[0]["exception"]) == (State.DEAD, "jobs.exceptions.BadReturnValue")
    # Its error could not be stored as it was; the job still waits for its retry, once.
    nul = Job.objects.get(id=odd["NUL in error"].id)
    assert (nul.state, nul.attempt, nul.last_error) == (State.SCHEDULED, 1, "bad byte \\x00 in the message")
    assert counts["nul"] == 1
    misconfigured = Job.objects.get(id=odd["bad options"].id)
    assert (misconfigured.state, misconfigured.errors[0]["exception"]) == (
        State.DEAD,
        "jobs.exceptions.BadTaskOptions",
    )
    assert basic.async_add.get_result(odd["async"].id).return_value == 5
    assert basic.report_attempt.get_result(odd["context"].id).return_value == 1
    assert "event=executor_crashed" not in output
    assert "event=executor_lost" not in output


def test_a_worker_runs_higher_priority_jobs_first_within_and_across_batches(side_effects: None) -> None:
    # Interleaved priorities, enqueued in one statement: claims come in batches of up to
    # JOBS_MAX_BATCH, and each batch must still run in priority order.
    calls = [
        (basic.record.using(priority=priority), [f"p{priority}:{n}"], {})
        for n in range(40)
        for priority in (-5, 0, 5)
    ]
    basic.record.get_backend().bulk_enqueue(calls)
    finish(start_worker(JOBS_MAX_BATCH="50"))
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT key FROM test_side_effects ORDER BY id")
        order = [int(key.split(":")[0][1:]) for (key,) in cursor.fetchall()]
    assert len(order) == 120
    assert order == sorted(order, reverse=True)


@pytest.mark.parametrize(
    ("command", "url", "says"),
    [
        (
            ["runworker", "--burst"],
            "postgres://postgres@127.0.0.1:5432/no_such_database",
            'database "no_such_database"',
        ),
        (["runworker"], "postgres://no_such_role@127.0.0.1:5432/postgres", 'role "no_such_role"'),
        (
            ["runscheduler", "--once"],
            "postgres://postgres@127.0.0.1:5432/no_such_database",
            "no_such_database",
        ),
    ],
)
def test_a_database_that_refuses_the_connection_is_a_clear_error_at_once(
    command: list[str], url: str, says: str
) -> None:
    # Retrying cannot help (a worker used to retry such a database until it was killed):
    # the command names what is wrong and exits with EX_CONFIG, which supervisors can be
    # told not to restart.
    env = subprocess_env(DATABASE_URL=url)
    proc = manage(*command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    output, _ = proc.communicate(timeout=60)
    assert proc.returncode == 78, output
    assert "cannot use database" in output and says in output and "Check DATABASE_URL" in output, output
    assert "worker_started" not in output


@pytest.fixture
def unmigrated_database():
    """A database that exists and takes the connection, without the queue's tables."""
    # Named after this run's test database: two suites on one server do not collide.
    name = f"{connection.settings_dict['NAME']}_unmigrated"
    server = subprocess_env()["DATABASE_URL"].rsplit("/", 1)[0]
    with connect("default", dbname="postgres") as admin:
        admin.execute(f"DROP DATABASE IF EXISTS {name}")
        admin.execute(f"CREATE DATABASE {name}")
    try:
        yield f"{server}/{name}"
    finally:
        with connect("default", dbname="postgres") as admin:
            admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


@pytest.mark.parametrize("command", [["runworker", "--burst"], ["runscheduler", "--once"]])
def test_a_database_without_the_queues_migrations_is_a_clear_error_at_once(
    command: list[str], unmigrated_database: str
) -> None:
    # Every claim would fail on the missing table, logged and retried until killed: the
    # command names the migration it needs and exits with EX_CONFIG instead.
    env = subprocess_env(DATABASE_URL=unmigrated_database)
    proc = manage(*command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    output, _ = proc.communicate(timeout=60)
    assert proc.returncode == 78, output
    latest = max(path.stem for path in (ROOT / "jobs" / "migrations").glob("0*.py"))
    assert f"migration {latest} is not applied" in output and "manage.py migrate" in output, output
    assert "worker_started" not in output and "claim_failed" not in output


def test_loading_the_project_imports_no_cron_parser() -> None:
    # croniter runs `file` on the interpreter when imported: a subprocess and about 16 ms at
    # the start of every worker and web process. Only reading a cron expression loads it.
    code = (
        "import django, sys; django.setup(); import jobs.worker.supervisor, jobs.scheduler.declared; "
        "print('loaded' if 'croniter' in sys.modules else 'clean'); "
        "from jobs.scheduler import Timing; Timing.parse(cron='*/5 * * * *', zone='UTC'); "
        "print('loaded' if 'croniter' in sys.modules else 'clean')"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=subprocess_env(), capture_output=True, text=True
    )
    assert result.stdout.split() == ["clean", "loaded"], result.stderr
