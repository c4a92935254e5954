"""POST /api/jobs/email: the transactional email API.

Body: ``{"to": address, "template": name, "variables": {...}, "message_key": optional}``.
Answers 202 ``{"job_id", "status": "queued", "trace_id"}``; 400 with ``fields`` errors;
401/403 without valid credentials (see web.jsonapi); 409 ``{"error", "job_id"}`` when
the caller used the same message_key within the dedupe window. The job belongs to the
caller: ``GET /api/jobs/<job_id>`` with the same token shows its status and result.
"""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError
from django.core.validators import validate_email
from django.http import HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from web.jsonapi import BadBody, api_caller, error, field_errors, read_json

from ..exceptions import BadVariables
from . import catalog
from .services import queue_api_email

MAX_MESSAGE_KEY_LENGTH = 200


@csrf_exempt  # checked in api_caller for session callers; tokens need none
@require_POST
def send_email(request: HttpRequest) -> JsonResponse:
    caller, refusal = api_caller(request)
    if refusal is not None:
        return refusal  # type: ignore[return-value]
    try:
        body = read_json(request)
    except BadBody as exc:
        return error(400, str(exc))
    fields, errors = _clean(body)
    if errors:
        return field_errors(errors)
    try:
        queued = queue_api_email(owner=caller, **fields)
    except BadVariables as exc:
        return field_errors({f"variables.{name}": [problem] for name, problem in exc.errors.items()})
    if queued.duplicate:
        return error(409, "this message_key was used within the dedupe window", job_id=queued.job_id)
    return JsonResponse(
        {"job_id": queued.job_id, "status": "queued", "trace_id": queued.trace_id}, status=202
    )


def _clean(body: dict[str, Any]) -> tuple[dict[str, Any], dict[str, list[str]]]:
    errors: dict[str, list[str]] = {}
    unknown = set(body) - {"to", "template", "variables", "message_key"}
    for name in sorted(unknown):
        errors[name] = ["unknown field"]
    to = body.get("to")
    if not isinstance(to, str) or not to:
        errors["to"] = ["required: one email address"]
    else:
        try:
            validate_email(to)
        except ValidationError:
            errors["to"] = ["not a valid email address"]
    template = body.get("template")
    if template not in catalog.api_template_names():
        errors["template"] = [f"must be one of: {', '.join(catalog.api_template_names())}"]
    variables = body.get("variables", {})
    if not isinstance(variables, dict):
        errors["variables"] = ["must be an object of the template's variables"]
    message_key = body.get("message_key")
    if message_key is not None and not (
        isinstance(message_key, str)
        and 0 < len(message_key) <= MAX_MESSAGE_KEY_LENGTH
        and message_key.isprintable()
    ):
        errors["message_key"] = [f"must be a printable string of 1 to {MAX_MESSAGE_KEY_LENGTH} characters"]
    fields = {"to": to, "template": template, "variables": variables, "message_key": message_key}
    return fields, errors
