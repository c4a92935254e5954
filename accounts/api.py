"""JSON signup for non-browser clients: POST /api/signup and POST /api/signup/resend.

Both answer 202 ``{"status": "queued"}`` whether or not the address has an account, 400
``{"error", "fields"}`` for invalid input, and 429 with Retry-After while a cooldown runs
(per client IP; the resend per address too). The email job's id is not given out: its
timing and retries would say whether it sent anything. They need no CSRF token: they are
anonymous, read no session and set no cookie, and take only ``application/json`` bodies,
which a cross-site HTML form cannot send (a script on another origin cannot either without
passing a CORS preflight, which this site does not grant).
"""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from web.clientip import client_ip
from web.jsonapi import BadBody, error, field_errors, read_json, too_many

from . import services
from .exceptions import CooldownActive
from .forms import ResendForm, SignupForm


@csrf_exempt
@require_POST
def signup(request: HttpRequest) -> JsonResponse:
    body = _body(request)
    if isinstance(body, JsonResponse):
        return body
    password = body.get("password")
    form = SignupForm(
        data={
            "email": body.get("email"),
            "username": body.get("username"),
            "password1": password,
            "password2": password,
        }
    )
    if not form.is_valid():
        return field_errors(_api_field_names(form.errors.get_json_data()))
    try:
        form.signup(client_ip=client_ip(request))
    except services.UsernameTaken:
        return field_errors(_api_field_names(form.errors.get_json_data()))
    except CooldownActive as exc:
        return too_many(exc.retry_after)
    return _queued()


@csrf_exempt
@require_POST
def resend(request: HttpRequest) -> JsonResponse:
    body = _body(request)
    if isinstance(body, JsonResponse):
        return body
    form = ResendForm(data={"email": body.get("email")})
    if not form.is_valid():
        return field_errors(_api_field_names(form.errors.get_json_data()))
    try:
        services.request_signup_email(email=form.cleaned_data["email"], client_ip=client_ip(request))
    except CooldownActive as exc:
        return too_many(exc.retry_after)
    return _queued()


def _body(request: HttpRequest) -> dict[str, Any] | JsonResponse:
    try:
        return read_json(request)
    except BadBody as exc:
        return error(400, str(exc))


def _queued() -> JsonResponse:
    return JsonResponse({"status": "queued"}, status=202)


def _api_field_names(errors: dict[str, list[dict[str, str]]]) -> dict[str, list[str]]:
    """Form errors under the API's field names (one ``password`` for the form's two)."""
    renamed: dict[str, list[str]] = {}
    for field, entries in errors.items():
        name = {"password1": "password", "password2": "password", "__all__": "non_field_errors"}.get(
            field, field
        )
        renamed.setdefault(name, []).extend(
            entry["message"] for entry in entries if entry["message"] not in renamed.get(name, [])
        )
    return renamed
