"""The scheduler: cron and interval schedules turned into jobs, once per slot.

``cron`` is the time math (and the DST policy), ``plan`` the catch-up policies, ``fire``
the transaction that writes a fire record and its job, ``runner`` the process loop,
``declared`` the schedules declared in code, ``saving`` what a save of a schedule means
to the scheduler (its next fire time, a wake-up), ``validation`` the checks shared by the
console and the scheduler, ``admin`` the console pages. Names are loaded when first used,
so an app that declares a schedule in ``ready()`` does not load the scheduler's process.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .cron import InvalidTiming, Timing
    from .declared import ScheduleSpec, declare
    from .runner import Scheduler, SchedulerConfig
    from .validation import InvalidSchedule

_EXPORTS = {
    "InvalidSchedule": ".validation",
    "InvalidTiming": ".cron",
    "ScheduleSpec": ".declared",
    "Scheduler": ".runner",
    "SchedulerConfig": ".runner",
    "Timing": ".cron",
    "declare": ".declared",
}


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(name)
    return getattr(import_module(module, __name__), name)


__all__ = [
    "InvalidSchedule", "InvalidTiming", "ScheduleSpec", "Scheduler", "SchedulerConfig", "Timing", "declare",
]  # fmt: skip
