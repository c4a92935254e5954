"""Reads: a user's devices, and what became of a notification's deliveries.

A delivery's own status says what the delivery code saw; while it is pending, its job's
state says the rest (waiting, retrying, expired by the engine, dead after its last attempt,
cancelled by an operator), so both are read together.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING

from django.db.models import Count, OuterRef, QuerySet, Subquery

from jobs.models import Job
from jobs.states import State

from .models import DeliveryStatus, Device, PushDelivery, PushNotification

if TYPE_CHECKING:
    from django.contrib.auth.models import User

# The outcomes shown for deliveries, in the order a progress view lists them.
OUTCOMES = ("queued", "retrying", "sending", "delivered", "failed", "expired", "skipped", "cancelled")
UNFINISHED_OUTCOMES = frozenset({"queued", "retrying", "sending"})


def device_list(*, user: User) -> QuerySet[Device]:
    return Device.objects.filter(user=user, active=True).order_by("-last_seen_at")


def job_state() -> Subquery:
    """The state of a delivery's job (None once the job is pruned), to annotate with."""
    return Subquery(Job.objects.filter(id=OuterRef("job_id")).values("state")[:1])


def with_job_state(deliveries: QuerySet[PushDelivery]) -> QuerySet[PushDelivery]:
    """Annotate ``job_state`` on each delivery."""
    return deliveries.annotate(job_state=job_state())


def outcome(*, status: str, job_state: str | None, attempts: int) -> str:
    """One word for where a delivery stands, from its status and its job's state."""
    if status != DeliveryStatus.PENDING:
        return status
    if job_state == State.EXPIRED:
        return "expired"
    if job_state == State.DEAD:
        return "failed"
    if job_state == State.CANCELLED:
        return "cancelled"
    if job_state == State.RUNNING:
        return "sending"
    return "retrying" if attempts else "queued"


@dataclass(frozen=True, slots=True)
class Progress:
    total: int
    counts: dict[str, int]

    @property
    def finished(self) -> int:
        return self.total - sum(self.counts.get(name, 0) for name in UNFINISHED_OUTCOMES)

    @property
    def done(self) -> bool:
        return self.finished == self.total

    def rows(self) -> list[tuple[str, int]]:
        return [(name, self.counts.get(name, 0)) for name in OUTCOMES]


def notification_progress(*, notification: PushNotification) -> Progress:
    """Counts of a notification's deliveries per outcome, in one query."""
    grouped = (
        PushDelivery.objects.filter(notification=notification)
        .annotate(job_state=job_state())
        .values("status", "job_state", "attempts")
        .order_by()
        .annotate(n=Count("id"))
    )
    counts: Counter[str] = Counter()
    for row in grouped:
        counts[outcome(status=row["status"], job_state=row["job_state"], attempts=row["attempts"])] += row[
            "n"
        ]
    return Progress(total=sum(counts.values()), counts=dict(counts))
