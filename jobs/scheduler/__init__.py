"""The scheduler: cron and interval schedules turned into jobs, once per slot.

``cron`` is the time math (and the DST policy), ``plan`` the catch-up policies, ``fire``
the transaction that writes a fire record and its job, ``runner`` the process loop,
``declared`` the schedules declared in code, ``validation`` the checks shared by the
console and the scheduler, ``admin`` the console pages.
"""

from .cron import InvalidTiming, Timing
from .declared import ScheduleSpec, declare
from .runner import Scheduler, SchedulerConfig
from .validation import InvalidSchedule

__all__ = [
    "InvalidSchedule",
    "InvalidTiming",
    "ScheduleSpec",
    "Scheduler",
    "SchedulerConfig",
    "Timing",
    "declare",
]
