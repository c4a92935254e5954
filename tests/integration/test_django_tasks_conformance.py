"""Code written against django.tasks behaves on our backend as Django documents it: what
Django's own backends raise and record, we raise and record (our types subclass theirs)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from django.tasks import task_backends
from django.tasks.exceptions import InvalidTask
from django.utils import timezone

from jobs.exceptions import BadReturnValue, InvalidPayload
from jobs.models import Job
from tests.support import factories
from tests.tasks import basic

pytestmark = pytest.mark.django_db


def test_an_unknown_queue_is_refused_with_djangos_message() -> None:
    with pytest.raises(InvalidTask, match=r"^Queue 'nowhere' is not valid for backend\."):
        basic.add.using(queue_name="nowhere")


def test_enqueue_validates_a_task_made_for_another_backend() -> None:
    # Built without validation (as a task made under other settings would be): the backend
    # still refuses a queue it has no worker for, and stores nothing.
    task = basic.add
    stray = object.__new__(type(task))
    for name in task.__dataclass_fields__:
        object.__setattr__(stray, name, getattr(task, name))
    object.__setattr__(stray, "queue_name", "nowhere")
    with pytest.raises(InvalidTask, match="Queue 'nowhere' is not valid for backend"):
        task_backends["default"].enqueue(stray, (1, 2), {})
    assert not Job.objects.exists()


def test_arguments_that_are_not_json_raise_a_type_error() -> None:
    with pytest.raises(TypeError) as caught:
        basic.add.enqueue(object(), 2)
    assert isinstance(caught.value, InvalidPayload)
    assert not Job.objects.exists()


def test_a_return_value_that_is_not_json_is_a_type_error() -> None:
    assert issubclass(BadReturnValue, TypeError)


def test_a_result_keeps_its_task_through_get_result() -> None:
    result = basic.add.using(priority=5, queue_name="email").enqueue(1, 2)
    again = task_backends["default"].get_result(result.id)
    assert (again.task.priority, again.task.queue_name, again.task.func) == (5, "email", basic.add.func)
    factories.run_due(now=timezone.now(), queues=("email",))
    assert basic.add.get_result(result.id).return_value == 3


def test_using_with_no_change_is_equal_to_the_task() -> None:
    assert basic.add.using() == basic.add
    assert replace(basic.add) == basic.add
