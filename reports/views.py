"""The reports and imports pages: server-rendered, with a little script that starts the
work through the API and polls the status until the file is ready."""

from __future__ import annotations

import uuid

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.csrf import ensure_csrf_cookie

from . import countries, reporting, selectors, uploads
from .models import ImportStatus


@login_required
@ensure_csrf_cookie
def reports_page(request: HttpRequest) -> HttpResponse:
    try:
        focus = str(uuid.UUID(request.GET.get("job", "")))
    except ValueError:
        focus = ""
    return render(
        request,
        "reports/reports.html",
        {
            "kinds": reporting.kinds_for(request.user),
            # Offered as the country field's suggestions; any name or code of them is taken.
            "countries": countries.choices(),
            "recent": selectors.recent_reports(user=request.user),
            # A link from the weekly email: that job is shown (and polled) first.
            "focus_job": focus,
        },
    )


@login_required
@ensure_csrf_cookie
def imports_page(request: HttpRequest) -> HttpResponse:
    recent = selectors.recent_imports(user=request.user)
    return render(
        request,
        "reports/imports.html",
        {
            "recent": recent,
            # Each one gets its progress panel, polled on: reopening the page mid-import
            # shows where it stands instead of a bare "running" row.
            "unfinished": [item for item in recent if item["status"] != ImportStatus.FINISHED],
            "max_bytes": uploads.max_bytes(),
            "columns": uploads.COLUMNS,
        },
    )
