"""The JSON API's common shape: request bodies, error answers, and who is calling.

Bodies are ``application/json`` objects; anything else is a 400 that says what was wrong.
The endpoints are exempt from Django's CSRF middleware because they keep no session of
their own: the signup endpoints are anonymous, and an API caller authenticates with a
bearer token (which no third-party page can make a browser send). A caller that uses a
staff session instead is checked for CSRF here, exactly as a form would be (send the
``csrftoken`` cookie's value in an ``X-CSRFToken`` header).
"""

from __future__ import annotations

import json
from typing import Any

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.middleware.csrf import CsrfViewMiddleware

from .authentication import bearer_token_state


class BadBody(Exception):
    """The request body is not a JSON object."""


def read_json(request: HttpRequest) -> dict[str, Any]:
    content_type = request.content_type or ""
    if content_type != "application/json":
        raise BadBody(
            f"send a JSON object with Content-Type: application/json (got {content_type or 'none'})"
        )
    try:
        body = json.loads(request.body or b"")
    except (ValueError, UnicodeDecodeError) as exc:
        raise BadBody(f"the body is not valid JSON: {exc}") from exc
    if not isinstance(body, dict):
        raise BadBody("the body must be a JSON object")
    return body


def error(status: int, message: str, **extra: Any) -> JsonResponse:
    return JsonResponse({"error": message, **extra}, status=status)


def field_errors(errors: dict[str, list[str]]) -> JsonResponse:
    return JsonResponse({"error": "invalid request", "fields": errors}, status=400)


def too_many(retry_after: int) -> JsonResponse:
    response = error(429, f"asked too recently; try again in {retry_after} seconds", retry_after=retry_after)
    response["Retry-After"] = str(retry_after)
    return response


def api_caller(request: HttpRequest) -> tuple[Any, HttpResponse | None]:
    """The user behind an API request (a bearer token, or a staff session with its CSRF
    token), or an error answer: 401 without valid credentials, 403 for a session that is
    not staff's or fails the CSRF check."""
    state = bearer_token_state(request)
    if state == "invalid":
        return None, _unauthorized("the API token is unknown or revoked")
    if state == "valid":
        return request.user, None
    user = request.user
    if not user.is_authenticated:
        return None, _unauthorized("send an API token: Authorization: Bearer <token>")
    if not (user.is_staff and user.is_active):
        return None, error(403, "only API tokens and staff sessions may use this endpoint")
    reason = CsrfViewMiddleware(lambda _: HttpResponse()).process_view(
        request, lambda _: HttpResponse(), (), {}
    )
    if reason is not None:
        return None, error(403, "CSRF check failed: send the csrftoken cookie's value as X-CSRFToken")
    return user, None


def _unauthorized(message: str) -> JsonResponse:
    response = error(401, message)
    response["WWW-Authenticate"] = 'Bearer realm="api"'
    return response
