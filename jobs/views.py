"""Job status over HTTP. The payload is never shown: it may carry personal data."""

import uuid

from django.http import Http404, HttpRequest, JsonResponse
from django.views.decorators.http import require_GET

from . import selectors


@require_GET
def job_status(request: HttpRequest, job_id: uuid.UUID) -> JsonResponse:
    # Jobs the viewer may not see are as absent as unknown ones: an id reveals nothing.
    status = selectors.job_status(job_id=job_id, viewer=request.user)
    if status is None:
        raise Http404("no such job")
    return JsonResponse(status)
