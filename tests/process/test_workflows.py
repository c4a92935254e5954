"""Workflows with real worker processes: a worker SIGKILLed in the middle of a chain, and
the workflow still completes on the other one, each step's side effect recorded once per
attempt that succeeded."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from jobs.models import Job
from jobs.models import Worker as WorkerRow
from jobs.workflows import Workflow, chain, group, step
from tests.conftest import side_effect_counts
from tests.support.workers import running_worker, start_marked, wait_until
from tests.tasks import workflows as t

pytestmark = [pytest.mark.process, pytest.mark.usefixtures("side_effects")]


def test_a_worker_killed_mid_chain_and_the_workflow_completes_exactly_once(tmp_path: Path) -> None:
    with (
        running_worker(tmp_path, "--concurrency", "2", name="a") as a,
        running_worker(tmp_path, "--concurrency", "2", name="b") as b,
    ):
        flow = chain(
            step(t.add, 0, 1),  # 1
            step(t.hang_first, "h"),  # 2, killed in its first attempt
            group(step(t.stage, "g1"), step(t.stage, "g2"), step(t.stage, "g3")),  # [3, 3, 3]
            step(t.total, "t"),  # 9
            step(t.stage, "s5"),  # 10
        )
        workflow = flow.enqueue(name="pipeline")
        wait_until(lambda: side_effect_counts().get("h:start"), message="the hanging step to start")
        hanging = Job.objects.get(task_path__endswith=".hang_first")
        wait_until(lambda: start_marked(hanging.id), message="the hanging step's start mark")
        holder = WorkerRow.objects.get(slot_tokens__contains=[hanging.worker_id])
        doomed, survivor = (a, b) if holder.pid == a.pid else (b, a)
        os.killpg(doomed.pid, signal.SIGKILL)
        doomed.wait()
        wait_until(lambda: Workflow(workflow.id).finished, timeout=30, message="the workflow to finish")
        assert "event=reaped" in survivor.log()

    workflow.refresh()
    assert (workflow.status, workflow.result) == ("succeeded", 10)
    assert side_effect_counts() == {"h:start": 2, "h:end": 1, "g1": 1, "g2": 1, "g3": 1, "t": 1, "s5": 1}
    killed = Job.objects.get(id=hanging.id)
    assert killed.attempt == 2
    assert [e["exception"] for e in killed.errors] == ["jobs.exceptions.WorkerLost"]
    assert all(n.attempt == 1 for n in workflow.steps() if n.job_id != hanging.id)


def test_a_real_workers_housekeeping_times_out_a_wait_and_the_payment_is_refunded(tmp_path: Path) -> None:
    from demos.workflows import start_payment_approval

    with running_worker(tmp_path, "--concurrency", "1", name="worker"):
        run = start_payment_approval(order_id=11, amount_cents=300, timeout=1.0)
        wait_until(lambda: Workflow(run.id).finished, timeout=20, message="the wait to time out")
    run.refresh()
    assert run.status == "failed"
    assert run.error == "timeout: no 'approval' signal within 1 s"
    [refund] = run.compensations()
    assert refund.state == "succeeded"
    assert Job.objects.get(id=refund.job_id).result["refunded"] is True
