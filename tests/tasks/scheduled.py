"""Tasks the scheduler tests point schedules at."""

from django.tasks import task


@task
def beat(label: str = "") -> str:
    return label


@task
def for_user(user_id: int, *, reason: str = "") -> int:
    return user_id


@task(takes_context=True)
def with_context(context, n: int) -> int:
    return n


def not_a_task() -> None:
    return None
