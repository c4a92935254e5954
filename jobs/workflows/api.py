"""``POST /api/workflows/<id>/signals/<name>``: send a workflow a signal over HTTP.

Staff sessions (with the CSRF token) or ``Authorization: Bearer <JOBS_WORKFLOW_SIGNAL_TOKEN>``.
The body is the payload, as JSON (empty: null). 202 with the outcome: "delivered", "kept" for a
wait not reached yet, or "ignored" (recorded; the workflow is no longer running); 404 for an
unknown workflow; 400 for a body that is not JSON.
"""

from __future__ import annotations

import hmac
import json
import uuid

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.middleware.csrf import CsrfViewMiddleware
from django.views.decorators.csrf import csrf_exempt

from ..conf import jobs_settings
from ..exceptions import JobsError
from .runs import WorkflowNotFound, send_signal

MAX_BODY = 64 * 1024


def _error(status: int, message: str) -> JsonResponse:
    return JsonResponse({"error": message}, status=status)


def _token_ok(request: HttpRequest) -> bool | None:
    """True/False for a bearer token that is/isn't the configured one; None: no token sent."""
    header = request.META.get("HTTP_AUTHORIZATION", "")
    if not header:
        return None
    expected = jobs_settings().WORKFLOW_SIGNAL_TOKEN
    scheme, _, token = header.partition(" ")
    return bool(expected) and scheme.lower() == "bearer" and hmac.compare_digest(token.strip(), expected)


@csrf_exempt
def signal(request: HttpRequest, workflow_id: uuid.UUID, name: str) -> HttpResponse:
    if request.method != "POST":
        response = _error(405, f"method {request.method} not allowed")
        response["Allow"] = "POST"
        return response
    by_token = _token_ok(request)
    if by_token is False:
        return _error(403, "the bearer token is not the workflow signal token")
    if by_token is None:
        if not (request.user.is_authenticated and request.user.is_staff):
            response = _error(401, "staff login or Authorization: Bearer <token> required")
            response["WWW-Authenticate"] = 'Bearer realm="workflows"'
            return response
        check = CsrfViewMiddleware(lambda request: HttpResponse())
        if check.process_view(request, lambda request: HttpResponse(), (), {}) is not None:
            return _error(403, "CSRF check failed: send the X-CSRFToken header with the csrftoken cookie")
    if len(request.body) > MAX_BODY:
        return _error(413, f"a signal payload is at most {MAX_BODY} bytes")
    try:
        payload = json.loads(request.body) if request.body.strip() else None
    except (ValueError, UnicodeDecodeError) as exc:
        return _error(400, f"the body is not JSON: {exc}")
    try:
        outcome = send_signal(workflow_id, name, payload)
    except WorkflowNotFound:
        return _error(404, f"no workflow with id {workflow_id}")
    except JobsError as exc:
        return _error(400, str(exc))
    return JsonResponse({"workflow": str(workflow_id), "signal": name, "outcome": outcome}, status=202)
