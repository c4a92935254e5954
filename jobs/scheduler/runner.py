"""The ``runscheduler`` process: turns due slots into jobs, then sleeps until the next one.

Each pass (``tick``) reads the enabled schedules, fires every due slot (fire.py) as its
catch-up policy says (plan.py), moves the schedule's next fire time on, and returns the
earliest next fire time of all. The process then sleeps until that time, at most
``max_sleep`` seconds (so edits made behind the model's back are seen), and is woken early
by the notification a schedule's save sends.

Any number of schedulers may run: the unique fire record per (schedule, slot) decides who
fires a slot, so there is no leader and nothing to fail over. Time is the database's clock;
``tick(now=...)`` lets tests move it. SIGTERM or SIGINT ends the process after the slot in
hand (exit 0); a second signal exits at once, and the open transaction rolls back. A lost
database is logged and retried with backoff; the schedules that came due meanwhile follow
their catch-up policy.
"""

from __future__ import annotations

import json
import logging
import os
import select
import signal
import socket
import time
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db import InterfaceError, OperationalError, connection

from .. import selectors
from ..conf import JobsSettings, jobs_settings
from ..db import CONNECTION_ERRORS, Connection, listen_libpq
from ..models import FireOutcome, Schedule
from ..retry import backoff
from ..store.schedules import SCHEDULES_CHANNEL
from .declared import sync_declared
from .fire import advance, fire_slot, start_schedule
from .plan import plan
from .validation import Checked, InvalidSchedule, check

logger = logging.getLogger("jobs.scheduler")

DB_ERRORS = (OperationalError, InterfaceError)
# With --once, give up after this many failed tries to reach the database.
ONCE_ATTEMPTS = 5


@dataclass(frozen=True)
class SchedulerConfig:
    max_sleep: float
    misfire_grace: timedelta
    catchup_limit: int
    listen: bool = True
    database: str = "default"

    @classmethod
    def from_settings(
        cls, conf: JobsSettings, *, max_sleep: float | None = None, listen: bool | None = None
    ) -> SchedulerConfig:
        return cls(
            max_sleep=conf.SCHEDULER_MAX_SLEEP if max_sleep is None else max_sleep,
            misfire_grace=timedelta(seconds=conf.SCHEDULER_MISFIRE_GRACE),
            catchup_limit=conf.SCHEDULER_CATCHUP_LIMIT,
            listen=conf.LISTEN if listen is None else listen,
        )


class Scheduler:
    def __init__(self, config: SchedulerConfig) -> None:
        self.config = config
        self.name = f"{jobs_settings().HOSTNAME or socket.gethostname()}:{os.getpid()}"
        self.stopping = False
        self.signals_received = 0
        # Per schedule id: the fields last checked and the outcome, so that a bad schedule is
        # reported once per edit rather than on every pass.
        self._checked: dict[int, tuple[tuple[Any, ...], Checked | None]] = {}
        self.listener: Connection | None = None
        self._listen_retry_at = 0.0
        if config.listen:
            self.listener = Connection(
                config.database,
                name="jobs-scheduler",
                on_connect=_listen,
                should_stop=lambda: self.stopping,
                libpq=listen_libpq(),
            )

    # --- one pass -------------------------------------------------------------------

    def start(self) -> None:
        """Sync code-declared schedules and report every invalid enabled schedule."""
        try:
            sync_declared()
        except DB_ERRORS:
            raise
        except Exception:
            # The database's own schedules can still run.
            logger.exception("event=declared_sync_failed scheduler=%s", self.name)
        schedules = list(Schedule.objects.filter(enabled=True))
        valid = sum(1 for schedule in schedules if self._check(schedule) is not None)
        logger.info(
            "event=scheduler_started scheduler=%s schedules=%d invalid=%d",
            self.name,
            len(schedules),
            len(schedules) - valid,
        )

    def tick(self, now: datetime | None = None) -> datetime | None:
        """Fire everything due at ``now`` (default: the database's clock); return the
        earliest next fire time of the valid enabled schedules."""
        if now is None:
            now = self.database_now()
        wake: datetime | None = None
        for schedule in Schedule.objects.filter(enabled=True).order_by("next_fire_at", "id"):
            if self.stopping:
                break
            checked = self._check(schedule)
            if checked is None:
                continue
            try:
                next_fire_at = self._handle(schedule, checked, now)
            except DB_ERRORS:
                raise
            except Exception:
                # One schedule's failure (a task that raises at enqueue, say) must not stop
                # the others.
                logger.exception("event=schedule_failed scheduler=%s schedule=%s", self.name, schedule.name)
                continue
            if next_fire_at is not None and (wake is None or next_fire_at < wake):
                wake = next_fire_at
        return wake

    def database_now(self) -> datetime:
        return selectors.database_now()

    def _handle(self, schedule: Schedule, checked: Checked, now: datetime) -> datetime | None:
        if schedule.next_fire_at is None:
            return start_schedule(schedule, checked.timing.next_after(now))
        if schedule.next_fire_at > now:
            return schedule.next_fire_at
        decided = plan(
            checked.timing,
            due_from=schedule.next_fire_at,
            now=now,
            catchup=schedule.catchup,
            window=timedelta(seconds=schedule.catchup_window),
            grace=self.config.misfire_grace,
            limit=self.config.catchup_limit,
        )
        if decided.dropped is not None:
            first, last = decided.dropped
            logger.warning(
                "event=slots_missed scheduler=%s schedule=%s policy=%s first=%s last=%s",
                self.name,
                schedule.name,
                schedule.catchup,
                first,
                last,
            )
        fired = []
        for slot in decided.fire:
            if self.stopping:
                # Leave the rest (and next_fire_at) to the next scheduler pass.
                return None
            result = fire_slot(schedule, checked.task, slot, now=now)
            level = logging.DEBUG if result.outcome == "taken" else logging.INFO
            logger.log(
                level,
                "event=slot_%s scheduler=%s schedule=%s task=%s slot=%s job=%s",
                result.outcome,
                self.name,
                schedule.name,
                schedule.task_path,
                slot,
                result.job_id or "-",
            )
            if result.outcome != FireOutcome.SKIPPED_OVERLAP:
                fired.append(slot)
        advance(schedule, next_fire_at=decided.next_fire_at, last_fired_at=max(fired).at if fired else None)
        return decided.next_fire_at

    def _check(self, schedule: Schedule) -> Checked | None:
        key = (
            schedule.task_path,
            schedule.cron,
            schedule.interval_seconds,
            schedule.time_zone,
            schedule.queue_name,
            schedule.priority,
            schedule.catchup,
            schedule.catchup_window,
            json.dumps(schedule.args, sort_keys=True, default=str),
            json.dumps(schedule.kwargs, sort_keys=True, default=str),
        )
        cached = self._checked.get(schedule.pk)
        if cached is not None and cached[0] == key:
            return cached[1]
        try:
            checked: Checked | None = check(schedule)
        except InvalidSchedule as exc:
            checked = None
            logger.error(
                "event=schedule_invalid scheduler=%s schedule=%s errors=%r action=skipped",
                self.name,
                schedule.name,
                str(exc),
            )
        self._checked[schedule.pk] = (key, checked)
        return checked

    # --- the process ------------------------------------------------------------------

    def run(self, *, once: bool = False) -> int:
        """The process loop. Returns the exit code: 0, or 1 when ``once`` could not reach
        the database in ONCE_ATTEMPTS tries (a cron job should fail, not hang)."""
        wake_r, wake_w = os.pipe()
        os.set_blocking(wake_w, False)
        signal.set_wakeup_fd(wake_w)
        signal.signal(signal.SIGTERM, self._on_signal)
        signal.signal(signal.SIGINT, self._on_signal)
        try:
            return self._loop(wake_r, once=once)
        finally:
            if self.listener is not None:
                self.listener.drop()
            signal.set_wakeup_fd(-1)
            os.close(wake_r)
            os.close(wake_w)
            logger.info("event=scheduler_stopped scheduler=%s", self.name)

    def _loop(self, wake_r: int, *, once: bool) -> int:
        failures = 0
        started = False
        while not self.stopping:
            try:
                if not started:
                    self.start()
                    started = True
                began = time.monotonic()
                now = self.database_now()
                wake = self.tick(now)
                failures = 0
            except DB_ERRORS as exc:
                failures += 1
                delay = backoff(failures + 1, base=0.1, cap=5.0)
                logger.warning(
                    "event=db_unavailable scheduler=%s attempt=%d retry_in=%.2fs error=%r",
                    self.name,
                    failures,
                    delay,
                    str(exc).strip(),
                )
                _close_quietly()
                if once and failures >= ONCE_ATTEMPTS:
                    return 1
                self._sleep(delay, wake_r, listen=False)
                continue
            if once:
                break
            delay = self.config.max_sleep
            if wake is not None:
                delay = min(delay, (wake - now).total_seconds() - (time.monotonic() - began))
            self._sleep(delay, wake_r, listen=True)
        return 0

    def _on_signal(self, signum: int, frame: object) -> None:
        self.signals_received += 1
        if self.signals_received == 1:
            logger.info(
                "event=shutdown_requested scheduler=%s signal=%s", self.name, signal.Signals(signum).name
            )
            self.stopping = True
        else:
            logger.warning(
                "event=shutdown_forced scheduler=%s signal=%s", self.name, signal.Signals(signum).name
            )
            os._exit(1)

    def _sleep(self, seconds: float, wake_r: int, *, listen: bool) -> None:
        """Wait ``seconds``, or less if a signal or a schedule change comes first."""
        if seconds <= 0 or self.stopping:
            return
        fds = [wake_r]
        sock = self._listener_socket() if listen else None
        if sock is not None:
            fds.append(sock)
        readable, _, _ = select.select(fds, [], [], seconds)
        if wake_r in readable:
            os.read(wake_r, 4096)
        if sock is not None and sock in readable:
            self._drain_notifications()

    def _drain_notifications(self) -> None:
        # Which schedule changed does not matter: the next pass reads them all.
        assert self.listener is not None
        if self.listener.conn is None:
            return
        pgconn = self.listener.conn.pgconn
        try:
            pgconn.consume_input()
            while pgconn.notifies() is not None:
                pass
        except CONNECTION_ERRORS as exc:
            logger.warning("event=listen_lost scheduler=%s error=%r", self.name, str(exc).strip())
            self.listener.drop()

    def _listener_socket(self) -> int | None:
        """The LISTEN connection's socket; None (poll only) while it cannot connect. A lost
        notification only delays an edit until the next poll (invariant 9)."""
        if self.listener is None or time.monotonic() < self._listen_retry_at:
            return None
        try:
            self.listener.ensure(wait=False)
        except CONNECTION_ERRORS:
            self._listen_retry_at = time.monotonic() + min(self.config.max_sleep, 30.0)
            return None
        return self.listener.fileno()


def _listen(conn: Any) -> None:
    conn.execute(f"LISTEN {SCHEDULES_CHANNEL}")


def _close_quietly() -> None:
    try:
        connection.close()
    except DB_ERRORS:
        logger.debug("event=db_close_failed")
