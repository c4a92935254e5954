"""The whole engine through a real PgBouncer in transaction mode (tests/support/servers.py), where
consecutive transactions of one client may run on different server sessions: enqueue from
Django (no prepared statements), claims, outcomes, heartbeats, the reaper after a SIGKILL,
a SIGTERM hand-back, the scheduler's one job per slot, LISTEN only on a direct connection,
and no session state left behind on the pooled server connections."""

from __future__ import annotations

import json
import signal
import subprocess
import uuid
from pathlib import Path

import psycopg
import pytest
from django.db import connection

from jobs.models import Job
from tests.conftest import manage, side_effect_counts, subprocess_env
from tests.support.schedules import assert_one_job_per_slot_without_gaps, every_second, slots_by_schedule
from tests.support.servers import PgBouncer
from tests.support.workers import all_in_state, job, running_worker, start_marked, wait_until

pytestmark = [pytest.mark.pgbouncer, pytest.mark.usefixtures("side_effects")]


def django_shell(code: str, env: dict[str, str]) -> str:
    """Run ``code`` in ``manage.py shell`` with ``env`` (through the pooler); its stdout."""
    proc = manage(
        "shell",
        "--no-imports",
        "-c",
        code,
        env=subprocess_env(**env),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    return out


ENQUEUE = """
import json
from django.db import transaction
from tests.tasks import basic, resilience
ids = [str(basic.record.enqueue(f"one-{i}").id) for i in range(5)]
with transaction.atomic():
    ids.append(str(basic.record.enqueue("in-a-transaction").id))
    ids.append(str(basic.add.enqueue(2, 3).id))
try:
    with transaction.atomic():
        basic.record.enqueue("rolled-back")
        raise RuntimeError
except RuntimeError:
    pass
ids += [str(r.id) for r in basic.record.enqueue_many([((f"bulk-{i}",), {}) for i in range(300)])]
dead = str(basic.fail_value_error.enqueue().id)
# Runs three times longer than its one-second lease: alive on heartbeats.
long = str(resilience.outlive_lease.enqueue("long", 2.5).id)
print(json.dumps({"ids": ids, "dead": dead, "long": long}))
"""


def test_the_engine_works_through_pgbouncer_and_leaves_no_session_state(
    tmp_path: Path, pooled: dict[str, str], pgbouncer: PgBouncer
) -> None:
    from tests.tasks import basic

    with running_worker(tmp_path, "--concurrency", "2", **pooled) as worker:
        enqueued = json.loads(django_shell(ENQUEUE, pooled))
        ids = [uuid.UUID(i) for i in enqueued["ids"]]
        long_job = enqueued["long"]
        wait_until(lambda: all_in_state(ids, "succeeded"), timeout=30, message="jobs through the pooler")
        wait_until(lambda: job(enqueued["dead"]).state == "dead", message="the failing job")
        wait_until(lambda: job(long_job).state == "succeeded", timeout=20, message="the long job")
        # Pooled without JOBS_LISTEN_URL: no LISTEN anywhere, the worker polls.
        assert listener_pids() == []
        worker.signal(signal.SIGTERM)
        assert worker.wait() == 0
    counts = side_effect_counts()
    # It ran several times longer than its lease, alive on heartbeats: once.
    assert counts.pop("long:start") == counts.pop("long:end") == 1
    assert job(long_job).attempt == 1
    assert counts == {
        **{f"one-{i}": 1 for i in range(5)},
        "in-a-transaction": 1,
        **{f"bulk-{i}": 1 for i in range(300)},
    }
    assert basic.add.get_result(str(ids[6])).return_value == 5
    assert job(enqueued["dead"]).last_error == "bad input, not worth retrying"
    assert "prepared statement" not in worker.log()
    assert_no_session_state(pooled["DATABASE_URL"], pgbouncer)


def test_a_sigkilled_worker_behind_pgbouncer_loses_nothing(tmp_path: Path, pooled: dict[str, str]) -> None:
    from tests.tasks import resilience

    hanging = resilience.hang_on_first_attempt.enqueue("hanging").id
    with running_worker(tmp_path, "--concurrency", "1", name="killed", **pooled) as killed:
        wait_until(lambda: side_effect_counts().get("hanging:start"))
        wait_until(lambda: start_marked(hanging), message="the start mark through the pooler")
        killed.stop()
    with running_worker(tmp_path, "--concurrency", "1", name="survivor", **pooled):
        # The survivor's reaper takes the lease back and runs the job's second attempt.
        wait_until(lambda: job(hanging).state == "succeeded", timeout=45, message="reaped and rerun")
    assert (job(hanging).attempt, job(hanging).result) == (2, 2)
    assert side_effect_counts() == {"hanging:start": 2, "hanging:end": 1}


def test_sigterm_behind_pgbouncer_hands_unstarted_jobs_back(tmp_path: Path, pooled: dict[str, str]) -> None:
    from tests.tasks import resilience

    with running_worker(
        tmp_path, "--concurrency", "1", "--shutdown-timeout", "10", JOBS_PREFETCH_HORIZON="3", **pooled
    ) as worker:
        first = resilience.sleep_and_record.enqueue("first", 0.2).id
        wait_until(lambda: job(first).state == "succeeded")
        calls = [((f"job-{i}", 0.3), {}) for i in range(8)]
        batch = [uuid.UUID(r.id) for r in resilience.sleep_and_record.enqueue_many(calls)]
        wait_until(lambda: Job.objects.filter(id__in=batch, state="running").count() > 2)
        worker.signal(signal.SIGTERM)
        assert worker.wait() == 0
    jobs = list(Job.objects.filter(id__in=batch))
    finished = [j for j in jobs if j.state == "succeeded"]
    given_back = [j for j in jobs if j.state == "queued"]
    assert finished and given_back and len(finished) + len(given_back) == len(batch)
    assert all(j.attempt == 0 and j.worker_ids == [] for j in given_back)
    counts = side_effect_counts()
    assert all(counts[f"{j.args[0]}:end"] == 1 for j in finished)
    assert not any(f"{j.args[0]}:start" in counts for j in given_back)


@pytest.mark.django_db(transaction=True)
def test_schedulers_behind_pgbouncer_fire_each_slot_once(tmp_path: Path, pooled: dict[str, str]) -> None:
    names = [f"pooled-{i}" for i in range(4)]
    for name in names:
        every_second(name)
    env = subprocess_env(JOBS_LOG_LEVEL="INFO", JOBS_SCHEDULER_MAX_SLEEP="1", **pooled)
    logs = [tmp_path / f"scheduler-{i}.log" for i in range(2)]
    schedulers = [
        manage(
            "runscheduler", env=env, stdout=log.open("w"), stderr=subprocess.STDOUT, start_new_session=True
        )
        for log in logs
    ]
    try:
        wait_until(lambda: all("event=scheduler_started" in log.read_text() for log in logs))
        wait_until(lambda: all(len(slots_by_schedule().get(n, [])) >= 3 for n in names), timeout=20)
        schedulers[0].send_signal(signal.SIGKILL)
        fired = len(slots_by_schedule()[names[0]])
        wait_until(
            lambda: len(slots_by_schedule()[names[0]]) >= fired + 2, timeout=20, message="the survivor"
        )
        schedulers[1].send_signal(signal.SIGTERM)
        assert schedulers[1].wait(timeout=15) == 0
    finally:
        for proc in schedulers:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
    assert_one_job_per_slot_without_gaps(names)


def server_pids(pgbouncer: PgBouncer) -> set[int]:
    """Backend pids of PgBouncer's server connections to the test database."""
    rows = pgbouncer.admin("SHOW SERVERS")
    return {int(row["remote_pid"]) for row in rows if row["database"] == connection.settings_dict["NAME"]}


def listener_pids() -> list[int]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pid FROM pg_stat_activity"
            " WHERE datname = current_database() AND application_name = 'jobs-listener'"
        )
        return [row[0] for row in cursor.fetchall()]


def test_listen_goes_to_the_direct_connection(
    tmp_path: Path, pooled: dict[str, str], pgbouncer: PgBouncer
) -> None:
    from tests.tasks import basic

    direct = subprocess_env()["DATABASE_URL"]
    with running_worker(tmp_path, "--concurrency", "1", name="listening", JOBS_LISTEN_URL=direct, **pooled):
        pids = wait_until(listener_pids, message="a listener on the direct connection")
        assert not set(pids) & server_pids(pgbouncer)
        basic.record.enqueue("woken")
        wait_until(lambda: side_effect_counts().get("woken"))


def assert_no_session_state(url: str, pgbouncer: PgBouncer) -> None:
    """Every server connection of the pool is as fresh as a new session: no setting changed
    for the session, no prepared statement, no LISTEN, no temporary table, no open cursor,
    no advisory lock."""
    used = server_pids(pgbouncer)
    assert used
    seen: set[int] = set()
    # Round robin over the pool's few server connections: each is seen several times.
    with psycopg.connect(url, autocommit=True, prepare_threshold=None) as fresh:
        for _ in range(4 * len(used)):
            row = fresh.execute(
                "SELECT pg_backend_pid(), current_setting('statement_timeout'),"
                " current_setting('lock_timeout'), current_setting('idle_in_transaction_session_timeout'),"
                " current_setting('search_path'), (SELECT count(*) FROM pg_prepared_statements),"
                " (SELECT count(*) FROM pg_listening_channels()),"
                " (SELECT count(*) FROM pg_class WHERE relpersistence = 't'),"
                " (SELECT count(*) FROM pg_cursors)"
            ).fetchone()
            assert row is not None
            seen.add(row[0])
            assert row[1:] == ("0", "0", "0", '"$user", public', 0, 0, 0, 0), (
                f"session state on backend {row[0]}"
            )
    assert len(seen) > 1, "the checks ran on more than one server connection"
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'")
        assert cursor.fetchone()[0] == 0


UNPOOLED_ENQUEUE = """
from tests.tasks import basic
try:
    basic.record.enqueue("through-the-pooler")
except Exception as exc:
    print(type(exc).__name__, exc)
else:
    print("enqueued")
"""


def test_without_jobs_pooled_a_transaction_pooler_is_refused_at_once(pgbouncer: PgBouncer) -> None:
    from tests.tasks import basic

    # A deployment that put PgBouncer in front and forgot JOBS_POOLED: prepared statements
    # through it fail or, worse, run another client's statement of the same name.
    env = subprocess_env(DATABASE_URL=pgbouncer.url(connection.settings_dict["NAME"]))
    env.pop("JOBS_POOLED", None)
    waiting = basic.record.enqueue("waiting").id
    proc = manage("runworker", "--burst", env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        output, _ = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 78, output
    assert "pooler in transaction mode" in output and "set JOBS_POOLED=true" in output, output
    assert "worker_started" not in output and "claim_failed" not in output
    assert (job(waiting).state, job(waiting).attempt) == ("queued", 0)
    # The web side's enqueue says the same, and writes nothing.
    answer = django_shell(UNPOOLED_ENQUEUE, {k: v for k, v in env.items() if k != "JOBS_POOLED"})
    assert answer.startswith("TransactionPooler") and "set JOBS_POOLED=true" in answer, answer
    assert list(Job.objects.values_list("id", flat=True)) == [uuid.UUID(waiting)]
