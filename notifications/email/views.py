"""The development outbox page: the messages the outbox backend kept, newest first."""

from __future__ import annotations

from django.contrib import admin
from django.http import Http404, HttpRequest, HttpResponse
from django.template.response import TemplateResponse

from . import outbox


def outbox_page(request: HttpRequest) -> HttpResponse:
    """Staff only (the URLconf wraps it in the admin's login); there is no outbox unless
    mail goes to it."""
    if not outbox.in_use():
        raise Http404("email is sent by a mail server here, not kept in a development outbox")
    context = {
        **admin.site.each_context(request),
        "title": "Development outbox",
        "emails": outbox.sent_messages(),
        "folder": outbox.outbox_dir(),
    }
    return TemplateResponse(request, "admin/notifications/outbox.html", context)
