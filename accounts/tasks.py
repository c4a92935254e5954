"""The accounts app's jobs. Payloads carry user ids only: links and tokens are made when
the job runs (accounts.emails)."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.tasks import TaskContext, task

from notifications.email.tasks import EMAIL_TASK_OPTIONS

from . import cooldowns, emails, services


@task(takes_context=True, **EMAIL_TASK_OPTIONS)
def send_signup_email(context: TaskContext, user_id: int | None) -> dict[str, Any]:
    """The one task behind every signup and "new link" request, for new and existing
    addresses alike (``user_id`` is None for an address with no account: nothing to send).
    Its jobs are private: how long one runs, or whether it waits for a retry, says whether
    it sent anything, so no anonymous caller is given its id."""
    user = get_user_model().objects.filter(pk=user_id).first() if user_id is not None else None
    if user is None or not user.email:
        return {"status": "no account"}
    return emails.send_signup_email(user, job_id=context.task_result.id)


@task(takes_context=True, **EMAIL_TASK_OPTIONS)
def send_password_reset_email(context: TaskContext, user_id: int | None) -> dict[str, Any]:
    """Every reset request enqueues it (``user_id`` is None for an unknown address)."""
    users = get_user_model().objects.filter(is_active=True)
    user = users.filter(pk=user_id).first() if user_id is not None else None
    if user is None or not user.email or not user.has_usable_password():
        return {"status": "no account"}
    return emails.send_password_reset_email(user, job_id=context.task_result.id)


@task(priority=-50)
def delete_unverified_signups() -> int:
    """Delete signups never verified within ACCOUNTS_VERIFICATION_MAX_AGE of their newest
    link, freeing their addresses (run by the accounts.delete_unverified_signups schedule)."""
    return services.delete_unverified_signups()


@task(priority=-50)
def prune_cooldowns() -> int:
    """Delete cooldowns that have run out (the accounts.prune_cooldowns schedule)."""
    return cooldowns.prune()
