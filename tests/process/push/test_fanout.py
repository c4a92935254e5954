"""Fan-out through real ``runworker`` processes: 1,000 devices, one bulk insert, every push
delivered to the fake APNs over one HTTP/2 connection per executor process."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from jobs.models import Job
from jobs.states import State
from notifications.push import services
from notifications.push.models import DeliveryStatus, Device, PushDelivery
from tests.support.workers import running_worker, wait_until

pytestmark = [pytest.mark.process, pytest.mark.django_db(transaction=True)]

DEVICES = 1000
EXECUTORS = 2


def test_1000_devices_are_delivered_by_runworker_over_one_connection_per_executor(
    push_servers: Any, django_user_model: Any, tmp_path: Path
) -> None:
    push_servers.reset()
    people = django_user_model.objects.bulk_create(
        django_user_model(username=f"fan{n}", email=f"fan{n}@example.com") for n in range(DEVICES // 4)
    )
    Device.objects.bulk_create(
        Device(user=person, platform="ios", token=f"{n:064x}") for n, person in enumerate(people * 4)
    )
    deliveries = services.notify_users(users=django_user_model.objects.all(), title="Sale", body="Today")
    assert len(deliveries) == DEVICES

    def all_delivered() -> bool:
        # And their jobs' outcomes written: the feeder writes them in batches, a moment after
        # the handler's own delivery row, and the worker is killed when this holds.
        return (
            PushDelivery.objects.filter(status=DeliveryStatus.DELIVERED).count() == DEVICES
            and Job.objects.filter(state=State.SUCCEEDED).count() == DEVICES
        )

    with running_worker(
        tmp_path, "--queues=push", f"--concurrency={EXECUTORS}", **push_servers.env()
    ) as worker:
        wait_until(all_delivered, timeout=120, interval=0.2, message="1,000 deliveries")
        executors = len(worker.executor_pids())
    apns = push_servers.apns
    assert apns.violations == []
    assert len(apns.delivered()) == DEVICES
    assert {seen.token for seen in apns.requests} == {f"{n:064x}" for n in range(DEVICES)}
    assert Job.objects.filter(state=State.SUCCEEDED).count() == DEVICES
    assert all(seen.http_version == "2" for seen in apns.requests)
    # Each executor process minted one provider token and opened one connection.
    senders = {seen.jwt for seen in apns.requests}
    assert 1 <= len(senders) <= executors == EXECUTORS
    assert len(apns.connections()) == len(senders)
