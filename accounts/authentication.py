"""Bearer API tokens: ``Authorization: Bearer <token>`` on /api/ requests.

The middleware runs after Django's session authentication and, when a request carries a
bearer token, replaces ``request.user`` with the token's user. Every view that reads
``request.user`` (the job status API's owner check among them) then sees the token holder.
A request authenticated by a token carries no cookie a third-party page could make a
browser send, so CSRF checks do not apply to it; a request with a bad token is anonymous
and marked (``request.api_token`` is None: web.authentication.bearer_token_state), so API
views answer 401 rather than fall back to a session.
"""

from __future__ import annotations

from collections.abc import Callable

from django.contrib.auth.models import AnonymousUser
from django.http import HttpRequest, HttpResponse

from web.authentication import API_PREFIX

from . import selectors, services


class BearerTokenMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        header = request.META.get("HTTP_AUTHORIZATION", "")
        if header and request.path.startswith(API_PREFIX):
            scheme, _, credentials = header.partition(" ")
            if scheme.lower() == "bearer":
                self._authenticate(request, credentials.strip())
        return self.get_response(request)

    def _authenticate(self, request: HttpRequest, credentials: str) -> None:
        token = selectors.active_api_token(token=credentials) if credentials else None
        request.api_token = token  # type: ignore[attr-defined]
        if token is None:
            request.user = AnonymousUser()
            return
        request.user = token.user
        # CsrfViewMiddleware honours this flag (its process_view runs after this).
        request._dont_enforce_csrf_checks = True  # type: ignore[attr-defined]
        services.touch_api_token(token=token)
