"""The JSON API's common shape: request bodies, error answers, and who is calling.

Bodies are ``application/json`` objects; anything else is a 400 that says what was wrong.
The endpoints are exempt from Django's CSRF middleware because they keep no session of
their own: the signup endpoints are anonymous, and an API caller authenticates with a
bearer token (which no third-party page can make a browser send). A caller that uses a
staff session instead is checked for CSRF here, exactly as a form would be (send the
``csrftoken`` cookie's value in an ``X-CSRFToken`` header).

Every answer of 400 or more under ``/api/`` is JSON with an ``error`` field, whatever made
it (ApiErrorsMiddleware): an unknown URL or malformed id, a wrong method, a view that
raises, in DEBUG as in production.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from http import HTTPStatus
from typing import Any

from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.middleware.csrf import CsrfViewMiddleware

from jobs.observe import current_trace

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


API_PREFIX = "/api/"
_NOT_FOUND_MESSAGE = "_api_not_found_message"


class ApiErrorsMiddleware:
    """Turns the HTML error pages Django makes (its 404 and 500 pages, debug or not; a bare
    405 or 400) into JSON for API URLs. Answers that are JSON already pass unchanged. It sits
    near the top of MIDDLEWARE, so it sees what every layer below it answered, after Django
    has logged the error."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        if response.status_code < 400 or not request.path.startswith(API_PREFIX):
            return response
        if response.get("Content-Type", "").startswith("application/json"):
            return response
        return _json_error(request, response)

    def process_exception(self, request: HttpRequest, exception: Exception) -> None:
        # A view's "no such job" says more than the generic 404; Django's own handling of the
        # exception (logging, the status) goes on as usual.
        if isinstance(exception, Http404) and request.path.startswith(API_PREFIX) and exception.args:
            setattr(request, _NOT_FOUND_MESSAGE, str(exception.args[0]))


def _json_error(request: HttpRequest, response: HttpResponse) -> JsonResponse:
    status = response.status_code
    extra: dict[str, Any] = {}
    if status == 404:
        message = getattr(request, _NOT_FOUND_MESSAGE, None) or (
            f"nothing at {request.path}: check the URL (ids in API URLs are UUIDs, "
            "as given by the API that created them)"
        )
    elif status == 405:
        allowed = [method.strip() for method in response.get("Allow", "").split(",") if method.strip()]
        message = f"{request.method} is not allowed here; use {' or '.join(allowed) or 'another method'}"
        extra["allowed"] = allowed
    elif status == 500:
        message = "the server failed to answer; the error is logged, try again later"
        if trace_id := current_trace.get():
            message += f" or report request id {trace_id}"
            extra["request_id"] = trace_id
    elif status == 400:
        message = "the request could not be read (malformed, too big or not allowed)"
    elif status == 403:
        message = "permission denied"
    elif status == 401:
        message = "authentication required: send an API token: Authorization: Bearer <token>"
    else:
        try:
            message = HTTPStatus(status).phrase.lower()
        except ValueError:
            message = "error"
    answer = error(status, message, **extra)
    for header in ("Allow", "WWW-Authenticate", "Retry-After", "X-Request-ID"):
        if header in response:
            answer[header] = response[header]
    return answer
