"""One attempt of one job, whatever runs it, as a pipeline (as Oban's executor reads):

* ``begin``: the task resolved, the payload decoded and checked against the handler
  (``Attempts.begin``); a row that cannot run has its outcome here;
* ``call``: the handler called the lane's way (inline, on a thread, on the event loop,
  under its time limits: lanes.py), in the job's trace;
* ``classify``: its value or its error becomes the ``Outcome`` (``Attempts.succeeded``,
  ``Attempts.failed``: the retry policy decides), and the line and metrics are written
  (joblog.py);
* ``record``: the lane hands the outcome to the feeder, whose outbox writes it, fenced,
  with others (outbox.py). Nothing here touches the job table.

``perform`` is call then classify, ``run`` the whole of it in this thread. Shared by
every lane of an executor and by the tests' in-process runner.

The rules that keep a job from looping or losing its outcome live here:

* the executor writes the job's slot entry before ``begin``, so even an import that calls
  ``sys.exit()`` or crashes the process counts as the attempt it is;
* anything a handler raises is the job's outcome; anything that fails while the failure is
  being recorded (an exception whose ``__str__`` raises) is recorded too, never re-raised;
* ``task_started``/``task_finished`` receivers are called robustly: their errors are
  logged, never taken for the job's.
"""

from __future__ import annotations

import inspect
import logging
import random
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from django.tasks import Task, TaskResult, TaskResultStatus

from .. import otel, signals
from ..conf import backend_alias
from ..exceptions import BadPayload, JobsError, UnknownTask
from ..observe import current_trace
from ..options import JobOptions, retry_key
from ..payloads import ArgumentCheck, check_result, error_record, load_payload
from ..progress import Sink, Tracker
from ..registry import on_backend, resolve_task
from ..retry import RetryPolicy, decide
from ..store import Claimed
from .config import WorkerConfig
from .joblog import JobLog, short
from .metrics import Tally
from .outcome import Outcome, dead

logger = logging.getLogger("jobs.worker")


@dataclass(slots=True)
class TaskInfo:
    """A task as this process runs it, with what does not change from job to job."""

    task: Task
    is_async: bool
    takes_context: bool
    arguments: ArgumentCheck

    @classmethod
    def of(cls, task: Task) -> TaskInfo:
        return cls(
            task=task,
            is_async=inspect.iscoroutinefunction(task.func),
            takes_context=task.takes_context,
            arguments=ArgumentCheck(task.func, takes_context=task.takes_context),
        )

    def check(self, args: list[Any], kwargs: dict[str, Any]) -> None:
        """BadPayload unless the arguments fit the handler's signature."""
        if problem := self.arguments.problem(args, kwargs):
            raise BadPayload(problem)


@dataclass(slots=True)
class Begun:
    """An attempt whose task and payload are known good, ready to call."""

    row: Claimed
    info: TaskInfo
    args: list[Any]
    kwargs: dict[str, Any]
    policy: RetryPolicy
    started: float
    # The TaskResult handed to the handler's context and to signal receivers, if any.
    running: TaskResult | None = None
    # The attempt's progress reports (tasks that take a context).
    progress: Tracker | None = None


class Attempts:
    """Runs attempts for one executor process (claim token ``token``)."""

    def __init__(
        self, config: WorkerConfig, *, token: Any, tally: Tally | None = None, log: JobLog | None = None
    ) -> None:
        self.config = config
        self.token = token
        # Each finished attempt's line and metrics (``log``: the executor's, shared with
        # its outbox; else one counting into ``tally``).
        self.log = log if log is not None else JobLog(tally)
        self.tasks: dict[str, TaskInfo] = {}
        self.policies: dict[tuple[Any, ...], RetryPolicy] = {}
        # Where running attempts' progress reports go (the executor's feeder); None keeps
        # only the last one, which goes with the outcome.
        self.progress_sink: Sink | None = None

    # --- before the handler -----------------------------------------------------------

    def resolve(self, task_path: str) -> TaskInfo:
        """The task a job names, imported once per process (UnknownTask if it cannot be)."""
        info = self.tasks.get(task_path)
        if info is None:
            info = self.tasks[task_path] = TaskInfo.of(on_backend(resolve_task(task_path), backend_alias()))
        return info

    def begin(self, row: Claimed, started: float) -> Begun:
        """Resolve, decode and check; raises JobsError when the row cannot run at all."""
        info = self.resolve(row.task_path)
        args, kwargs = _decode(row.args, row.kwargs)
        info.check(args, kwargs)
        begun = Begun(row, info, args, kwargs, self.policy(row, info), started)
        announce = signals.wanted(signals.task_started, signals.STARTED)
        if info.takes_context or announce:
            begun.running = _task_result(info.task, row, args, kwargs, self.token)
            if info.takes_context:
                begun.progress = Tracker((row.id, row.attempt), self.progress_sink)
            if announce:
                _send_robust(signals.task_started, info.task, begun.running)
        return begun

    def policy(self, row: Claimed, info: TaskInfo | None) -> RetryPolicy:
        """The job's retry policy (cached per distinct set of options)."""
        key = retry_key(row)
        policy = self.policies.get(key)
        if policy is None:
            policy = policy_from_row(self.config, task_path=row.task_path, options=row.options)
            if len(self.policies) < 256:
                self.policies[key] = policy
        return policy

    # --- after the handler ------------------------------------------------------------

    def succeeded(self, begun: Begun, value: Any) -> Outcome:
        row = begun.row
        try:
            result = check_result(value)
        except JobsError as exc:
            return self.failed(row, exc, begun.started, begun=begun)
        outcome: Outcome = {
            "id": row.id, "attempt": row.attempt, "in_workflow": row.in_workflow, "state": "succeeded",
            "result": result,
        }  # fmt: skip
        if begun.progress is not None and begun.progress.latest is not None:
            outcome["progress"] = begun.progress.latest
        self.log.finished(row, begun.started, "succeeded")
        if signals.wanted(signals.task_finished, signals.SUCCEEDED):
            self._send_finished(begun, value=value)
        return outcome

    def failed(
        self, row: Claimed, error: BaseException, started: float, *, begun: Begun | None = None
    ) -> Outcome:
        """The outcome of an attempt that raised ``error``; never raises itself."""
        try:
            return self._failed(row, error, started, begun)
        except BaseException as failure:
            logger.exception("event=outcome_error job=%s", row.id)
            return dead(row.id, row.attempt, error_record(failure), in_workflow=row.in_workflow)

    def _failed(self, row: Claimed, error: BaseException, started: float, begun: Begun | None) -> Outcome:
        outcome: Outcome = {
            "id": row.id, "attempt": row.attempt, "in_workflow": row.in_workflow, "state": "dead",
        }  # fmt: skip
        if begun is not None and begun.progress is not None and begun.progress.latest is not None:
            outcome["progress"] = begun.progress.latest
        if isinstance(error, UnknownTask):
            return self._unknown_task(row, error, started, outcome)
        if begun is None and isinstance(error, JobsError):
            # The row cannot run at all (a bad payload, bad options): retrying would fail
            # the same way.
            outcome["error"] = error_record(error)
            self.log.finished(row, started, "dead", error)
            return outcome
        policy = begun.policy if begun is not None else self.policy(row, None)
        decision = decide(error, attempt=row.attempt, policy=policy)
        outcome["state"] = decision.state
        outcome["delay"] = decision.delay
        if decision.refund:
            outcome["refund"] = 1
        else:
            outcome["error"] = error_record(error)
        label = "snoozed" if decision.refund else ("retry" if decision.state == "queued" else "dead")
        self.log.finished(row, started, label, error, decision.reason)
        if (
            decision.state == "dead"
            and begun is not None
            and signals.wanted(signals.task_finished, signals.FAILED)
        ):
            self._send_finished(begun, error=error)
        return outcome

    def _send_finished(self, begun: Begun, *, value: Any = None, error: BaseException | None = None) -> None:
        """task_finished for the job of ``begun``, with the TaskResult its start had (made
        now if nothing needed it then). Receivers' errors are logged, never the job's."""
        row = begun.row
        try:
            running = begun.running
            if running is None:
                running = _task_result(begun.info.task, row, begun.args, begun.kwargs, self.token)
            sender = type(begun.info.task.get_backend())
            for receiver, response in signals.send_finished_robust(sender, running, value=value, error=error):
                if isinstance(response, BaseException):
                    logger.error(
                        "event=signal_receiver_failed signal=task_finished job=%s receiver=%r error=%r",
                        row.id,
                        receiver,
                        short(response),
                    )
        except Exception:
            logger.exception("event=signal_failed signal=task_finished job=%s", row.id)

    def _unknown_task(self, row: Claimed, error: UnknownTask, started: float, outcome: Outcome) -> Outcome:
        # A deploy may be rolling out: a worker still on the old code meets a task only the
        # new code has. Wait for it with backoff (no attempt used) for a while, then dead.
        waited = max((datetime.now(UTC) - row.created_at).total_seconds(), 0.0)
        if waited < self.config.unknown_task_grace:
            # Half the time waited so far (1 s to 60 s, jittered): quick retries while a
            # deploy is likely under way, rarer ones as it gets less likely.
            delay = min(60.0, max(1.0, waited / 2)) * random.uniform(0.75, 1.0)
            outcome.update({"state": "queued", "delay": delay, "refund": 1, "error": error_record(error)})
            self.log.finished(row, started, "waiting", error, "task not importable here yet")
            return outcome
        outcome["error"] = error_record(error)
        self.log.finished(row, started, "dead", error, f"task not importable for {waited:.0f}s")
        return outcome


# --- the pipeline: begin -> call -> classify; the lane then records the outcome -------------


def begin(attempts: Attempts, row: Claimed, started: float) -> Begun | Outcome:
    """Resolve and check ``row``: the Begun attempt, or its outcome if it cannot run.
    Never raises: whatever the import or the payload check raise (SystemExit included) is
    the attempt's outcome."""
    try:
        return attempts.begin(row, started)
    except BaseException as exc:  # noqa: BLE001 - the attempt's outcome, whatever it is
        return attempts.failed(row, exc, started)


def perform(attempts: Attempts, begun: Begun, call: Callable[[Begun], Any]) -> Outcome:
    """Call the handler with ``call`` (the lane's way: inline, in a thread, under its
    limits), then classify: its value or its error is the outcome. The handler runs in the
    job's trace: the jobs it enqueues join it (jobs/observe.py)."""
    trace = current_trace.set(begun.row.trace_id)
    try:
        if otel.enabled():
            with otel.attempt_span(begun.row):
                value = call(begun)
        else:
            value = call(begun)
    except BaseException as exc:  # noqa: BLE001 - the attempt's outcome, whatever it is
        return attempts.failed(begun.row, exc, begun.started, begun=begun)
    finally:
        current_trace.reset(trace)
    return attempts.succeeded(begun, value)


def run(attempts: Attempts, row: Claimed, started: float, call: Callable[[Begun], Any]) -> Outcome:
    """One whole attempt: begin, then call and classify."""
    begun = begin(attempts, row, started)
    if isinstance(begun, dict):
        return begun
    return perform(attempts, begun, call)


def policy_from_row(config: WorkerConfig, *, task_path: str, options: JobOptions) -> RetryPolicy:
    """A job's retry policy from the options kept on its row (the task's own and those of
    .using() alike), else the worker's settings: the same on every path that decides an
    outcome (executor, supervisor's settlements, reaper). BadTaskOptions if a
    non_retryable path does not import."""
    return options.retry_policy(
        task_path=task_path, backoff_base=config.backoff_base, backoff_cap=config.backoff_cap
    )


def _decode(args: Any, kwargs: Any) -> tuple[list[Any], dict[str, Any]]:
    """The stored payload (JSON text as the claim returns it, or decoded jsonb)."""
    try:
        if isinstance(args, str):
            args = load_payload(args)
        if isinstance(kwargs, str):
            kwargs = load_payload(kwargs)
    except ValueError as exc:
        raise BadPayload(f"payload is not JSON: {exc}") from exc
    if not isinstance(args, list) or not isinstance(kwargs, dict):
        raise BadPayload(
            f"payload must be a list of args and a dict of kwargs, got "
            f"{type(args).__name__} and {type(kwargs).__name__}"
        )
    return args, kwargs


def _task_result(task: Task, row: Claimed, args: list[Any], kwargs: dict[str, Any], token: Any) -> TaskResult:
    """The job as it runs, with the times the claim wrote on its row (the database's)."""
    attempted_at = row.attempted_at()
    return TaskResult(
        task=task,
        id=str(row.id),
        status=TaskResultStatus.RUNNING,
        enqueued_at=row.created_at,
        started_at=row.first_started_at or attempted_at,
        finished_at=None,
        last_attempted_at=attempted_at,
        args=args,
        kwargs=kwargs,
        backend=task.backend,
        errors=[],
        # One entry per attempt, so that context.attempt is right; the earlier attempts'
        # workers are not on the claimed row, and reading them would slow every claim.
        worker_ids=[""] * (row.attempt - 1) + [str(token)],
    )


def _send_robust(signal: Any, task: Task, running: TaskResult) -> None:
    for receiver, response in signal.send_robust(sender=type(task.get_backend()), task_result=running):
        if isinstance(response, BaseException):
            logger.error(
                "event=signal_receiver_failed signal=task_started receiver=%r error=%r",
                receiver,
                short(response),
            )
