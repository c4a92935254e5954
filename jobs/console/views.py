"""Job status over HTTP. The payload is never shown: it may carry personal data."""

import uuid

from django.http import FileResponse, Http404, HttpRequest, JsonResponse
from django.views.decorators.http import require_GET

from .. import files, selectors


@require_GET
def job_status(request: HttpRequest, job_id: uuid.UUID) -> JsonResponse:
    # Jobs the viewer may not see are as absent as unknown ones: an id reveals nothing.
    status = selectors.job_status(job_id=job_id, viewer=request.user)
    if status is None:
        raise Http404("no such job")
    return JsonResponse(status)


@require_GET
def job_file(request: HttpRequest, job_id: uuid.UUID) -> FileResponse | JsonResponse:
    """Download a job's result file: a link from its status (signed, expiring), used by the
    job's owner or staff. Anyone else finds nothing here, as with the status."""
    entry = selectors.job_file(job_id=job_id, viewer=request.user)
    if entry is None:
        raise Http404("no such file")
    try:
        files.check_signature(job_id, request.GET.get("s", ""), entry)
    except files.BadDownload as exc:
        return JsonResponse({"error": str(exc), "expired": exc.expired}, status=403)
    handle = files.result_storage().open(entry["name"], "rb")
    return FileResponse(handle, as_attachment=True, filename=entry.get("filename") or "result")
