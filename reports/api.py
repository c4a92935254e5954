"""The reports and imports API.

* ``POST /api/reports`` ``{"kind", "params"}``: 202 ``{"job_id", "status": "queued"}``;
  409 ``{"error", "job_id"}`` while the same report (same caller, kind, params) is being
  made; 400 ``{"error", "fields"}``; 403 for a staff-only kind. Poll
  ``GET /api/jobs/<job_id>`` for ``progress`` and, once done, the ``file`` to download.
* ``POST /api/imports`` (multipart, the CSV in ``file``): 202 with the import; 400
  ``{"error"}`` saying what is wrong with the file (nothing is kept).
* ``GET /api/imports/<id>``: the import's status, progress (rows done of rows, summed over
  its chunks), counts, and the rejected rows' download once finished.

Callers: a bearer token, or a logged-in session (any user: these are their own data) with
its CSRF token in ``X-CSRFToken``.
"""

from __future__ import annotations

import uuid
from typing import Any

from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.middleware.csrf import CsrfViewMiddleware
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_GET, require_POST

from web.authentication import bearer_token_state
from web.jsonapi import BadBody, error, field_errors, read_json

from . import reporting, selectors, uploads
from .exceptions import BadReportRequest, BadUpload, ReportNotAllowed

# Multipart framing around the file, allowed on top of the file size limit.
UPLOAD_SLACK_BYTES = 64 * 1024


def caller(request: HttpRequest) -> tuple[Any, HttpResponse | None]:
    """The user behind the request, or 401/403 as an answer."""
    state = bearer_token_state(request)
    if state == "invalid":
        return None, _unauthorized("the API token is unknown or revoked")
    if state == "valid":
        return request.user, None
    if not request.user.is_authenticated:
        return None, _unauthorized("log in, or send an API token: Authorization: Bearer <token>")
    reason = CsrfViewMiddleware(lambda _: HttpResponse()).process_view(
        request, lambda _: HttpResponse(), (), {}
    )
    if reason is not None:
        return None, error(403, "CSRF check failed: send the csrftoken cookie's value as X-CSRFToken")
    return request.user, None


@csrf_exempt  # checked in caller() for sessions; tokens need none
@require_POST
def create_report(request: HttpRequest) -> JsonResponse:
    user, refusal = caller(request)
    if refusal is not None:
        return refusal  # type: ignore[return-value]
    try:
        body = read_json(request)
    except BadBody as exc:
        return error(400, str(exc))
    unknown = sorted(set(body) - {"kind", "params"})
    if unknown:
        return field_errors({name: ["unknown field"] for name in unknown})
    try:
        requested = reporting.request_report(user=user, kind=body.get("kind"), params=body.get("params"))
    except BadReportRequest as exc:
        return field_errors(exc.errors)
    except ReportNotAllowed as exc:
        return error(403, str(exc))
    if requested.duplicate:
        return error(409, "this report is already being made", job_id=requested.job_id)
    return JsonResponse({"job_id": requested.job_id, "status": "queued"}, status=202)


@csrf_exempt  # checked in caller()
@require_POST
def create_import(request: HttpRequest) -> JsonResponse:
    # Refused before the body is read when it says it is too big.
    declared = int(request.META.get("CONTENT_LENGTH") or 0)
    if declared > uploads.max_bytes() + UPLOAD_SLACK_BYTES:
        return error(400, f"the upload is too big; the limit is {uploads.max_bytes():,} bytes")
    user, refusal = caller(request)
    if refusal is not None:
        return refusal  # type: ignore[return-value]
    upload = request.FILES.get("file")
    if upload is None:
        return error(400, "send the CSV file as multipart/form-data in a field named 'file'")
    try:
        record = uploads.accept(upload=upload, owner=user)
    except BadUpload as exc:
        return error(400, str(exc))
    return JsonResponse(selectors.import_status(import_id=record.id, viewer=user), status=202)


@require_GET
def import_status(request: HttpRequest, import_id: uuid.UUID) -> JsonResponse:
    status = selectors.import_status(import_id=import_id, viewer=request.user)
    if status is None:
        raise Http404("no such import")
    return JsonResponse(status)


def _unauthorized(message: str) -> JsonResponse:
    response = error(401, message)
    response["WWW-Authenticate"] = 'Bearer realm="api"'
    return response
