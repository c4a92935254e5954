"""The devices API: ``POST /api/devices``, ``GET /api/devices``, ``DELETE /api/devices/<id>``.

Whoever ``request.user`` is decides: a session login, or a valid ``Authorization: Bearer``
token (accounts.authentication, web.authentication). Only a valid bearer token skips the CSRF check: any other
Authorization header (HTTP basic, a bad token) leaves the session user in place, and a
browser resends basic credentials on cross-site requests as it does cookies. Bodies must be
``application/json``, which no cross-site HTML form can send.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from functools import wraps
from typing import TYPE_CHECKING, Any, cast

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.middleware.csrf import CsrfViewMiddleware
from django.views.decorators.csrf import csrf_exempt

from web.authentication import bearer_token_state

from . import selectors, services
from .exceptions import InvalidDevice
from .models import Device

if TYPE_CHECKING:
    from django.contrib.auth.models import User

View = Callable[..., HttpResponse]


def _user(request: HttpRequest) -> User:
    # api_view has turned anonymous requests away.
    return cast("User", request.user)


def _error(status: int, message: str, **extra: Any) -> JsonResponse:
    return JsonResponse({"error": message, **extra}, status=status)


def _csrf_failure(request: HttpRequest) -> HttpResponse | None:
    check = CsrfViewMiddleware(lambda request: HttpResponse())
    # The middleware's own checks (origin, referer, token), on a view it was told to skip.
    return check.process_view(request, lambda request: HttpResponse(), (), {})


def api_view(methods: tuple[str, ...]) -> Callable[[View], View]:
    def decorate(view: View) -> View:
        @csrf_exempt
        @wraps(view)
        def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
            if request.method not in methods:
                response = _error(405, f"method {request.method} not allowed")
                response["Allow"] = ", ".join(methods)
                return response
            if not request.user.is_authenticated:
                response = _error(
                    401, "authentication required: log in, or send Authorization: Bearer <token>"
                )
                response["WWW-Authenticate"] = 'Bearer realm="api"'
                return response
            if bearer_token_state(request) != "valid" and request.method not in ("GET", "HEAD"):
                refused = _csrf_failure(request)
                if refused is not None:
                    return _error(
                        403, "CSRF check failed: send the X-CSRFToken header with the csrftoken cookie"
                    )
            return view(request, *args, **kwargs)

        return wrapper

    return decorate


def _device_json(device: Device) -> dict[str, Any]:
    return {
        "id": device.id,
        "platform": device.platform,
        "token": device.token,
        "app_id": device.app_id,
        "locale": device.locale,
        "active": device.active,
        "created_at": device.created_at.isoformat(),
        "last_seen_at": device.last_seen_at.isoformat(),
    }


@api_view(("GET", "POST"))
def devices(request: HttpRequest) -> HttpResponse:
    if request.method == "GET":
        return JsonResponse(
            {"devices": [_device_json(d) for d in selectors.device_list(user=_user(request))]}
        )
    if request.content_type != "application/json":
        got = request.content_type or "none"
        return _error(400, f"send a JSON object with Content-Type: application/json (got {got})")
    try:
        body = json.loads(request.body or b"null")
    except (ValueError, UnicodeDecodeError):
        return _error(400, "the body must be a JSON object")
    if not isinstance(body, dict):
        return _error(400, "the body must be a JSON object")
    unknown = sorted(set(body) - {"platform", "token", "app_id", "locale"})
    if unknown:
        return _error(400, "unknown fields", errors={name: ["is not a device field."] for name in unknown})
    try:
        device, created = services.device_register(
            user=_user(request),
            platform=body.get("platform"),
            token=body.get("token"),
            app_id=body.get("app_id", ""),
            locale=body.get("locale", ""),
        )
    except InvalidDevice as exc:
        return _error(400, "invalid device", errors=exc.errors)
    return JsonResponse(_device_json(device), status=201 if created else 200)


@api_view(("DELETE",))
def device_detail(request: HttpRequest, device_id: int) -> HttpResponse:
    # Another user's device is as absent as an unknown one.
    if not services.device_delete(user=_user(request), device_id=device_id):
        return _error(404, "no such device")
    return HttpResponse(status=204)
