"""Every answer of 400 or more under /api/ is JSON with an ``error`` field, in DEBUG and in
production: unknown and malformed ids on every API route, a wrong method, a view that
raises."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator

import pytest
from django.contrib.auth import get_user_model
from django.core.exceptions import PermissionDenied, SuspiciousOperation
from django.http import HttpRequest, HttpResponse
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver, path

from config.urls import urlpatterns as site_urlpatterns

pytestmark = pytest.mark.django_db

# A placeholder for each converter: an id nothing has, and one that is not an id at all.
UNKNOWN = {"uuid": lambda: str(uuid.uuid4()), "int": lambda: "987654321", "str": lambda: "nope"}
MALFORMED = {"uuid": "not-a-uuid", "int": "abc", "str": "nope"}
PARAMETER = re.compile(r"<(?:(\w+):)?\w+>")


def api_routes() -> list[str]:
    """The route of every URL pattern under api/, with its <converter:name> parameters."""

    def walk(patterns: list[URLPattern | URLResolver], prefix: str) -> Iterator[str]:
        for pattern in patterns:
            route = prefix + str(pattern.pattern)
            if isinstance(pattern, URLResolver):
                yield from walk(pattern.url_patterns, route)
            elif route.startswith("api/"):
                yield route

    return sorted(set(walk(get_resolver().url_patterns, "")))


def filled(route: str, values: dict) -> str:
    def value(match: re.Match[str]) -> str:
        chosen = values[match.group(1) or "str"]
        return chosen() if callable(chosen) else chosen

    return "/" + PARAMETER.sub(value, route)


def assert_json_error(response: HttpResponse, url: str) -> None:
    assert response["Content-Type"].startswith("application/json"), (url, response.status_code)
    body = response.json()
    assert isinstance(body.get("error"), str) and body["error"], (url, body)


def test_the_walk_finds_the_api_routes() -> None:
    routes = api_routes()
    assert "api/jobs/<uuid:job_id>" in routes and "api/imports/<uuid:import_id>" in routes
    assert "api/devices/<int:device_id>" in routes and "api/signup" in routes


@pytest.mark.parametrize("debug", [True, False], ids=["debug", "production"])
def test_unknown_and_malformed_ids_on_every_api_route_answer_json(settings, debug: bool) -> None:
    settings.DEBUG = debug
    staff = Client()
    staff.force_login(get_user_model().objects.create_user("ops", "ops@example.com", "pw", is_staff=True))
    for route in api_routes():
        urls = {filled(route, UNKNOWN)}
        if PARAMETER.search(route):
            urls.add(filled(route, MALFORMED))
        for url in urls:
            for client in (Client(), staff):
                for method in ("get", "post", "delete"):
                    response = getattr(client, method)(url)
                    if PARAMETER.search(route):
                        assert response.status_code >= 400, (method, url)
                    if response.status_code >= 400:
                        assert_json_error(response, f"{method} {url}")


@pytest.mark.parametrize("debug", [True, False], ids=["debug", "production"])
def test_the_readmes_unknown_job_and_an_unknown_api_url_say_what_is_missing(settings, debug: bool) -> None:
    settings.DEBUG = debug
    staff = Client()
    staff.force_login(get_user_model().objects.create_user("ops", "ops@example.com", "pw", is_staff=True))
    unknown_job = staff.get(f"/api/jobs/{uuid.uuid4()}")
    assert unknown_job.status_code == 404 and unknown_job.json() == {"error": "no such job"}
    malformed = staff.get("/api/jobs/42")
    assert malformed.status_code == 404 and "UUID" in malformed.json()["error"]
    assert len(malformed.content) < 300
    nowhere = Client().get("/api/no-such-endpoint")
    assert nowhere.status_code == 404 and "/api/no-such-endpoint" in nowhere.json()["error"]


@pytest.mark.parametrize("debug", [True, False], ids=["debug", "production"])
def test_a_wrong_method_answers_json_with_the_allowed_ones(settings, debug: bool) -> None:
    settings.DEBUG = debug
    response = Client().get("/api/signup")
    assert response.status_code == 405 and response["Allow"] == "POST"
    assert response.json() == {"error": "GET is not allowed here; use POST", "allowed": ["POST"]}


@pytest.mark.parametrize("debug", [True, False], ids=["debug", "production"])
def test_unauthenticated_api_calls_answer_json(settings, debug: bool) -> None:
    settings.DEBUG = debug
    response = Client().post("/api/reports", {}, content_type="application/json")
    assert response.status_code == 401 and response["WWW-Authenticate"]
    assert_json_error(response, "/api/reports")


def _boom(request: HttpRequest) -> HttpResponse:
    raise RuntimeError("the view failed")


def _suspicious(request: HttpRequest) -> HttpResponse:
    raise SuspiciousOperation("a forged header")


def _denied(request: HttpRequest) -> HttpResponse:
    raise PermissionDenied


urlpatterns = [
    path("api/test-boom", _boom),
    path("api/test-suspicious", _suspicious),
    path("api/test-denied", _denied),
    path("test-boom", _boom),
    *site_urlpatterns,
]


@pytest.mark.parametrize("debug", [True, False], ids=["debug", "production"])
def test_a_view_that_raises_answers_json_under_api(settings, debug: bool) -> None:
    settings.DEBUG = debug
    settings.ROOT_URLCONF = __name__
    client = Client(raise_request_exception=False)
    failed = client.get("/api/test-boom", HTTP_X_REQUEST_ID="req-1234")
    assert failed.status_code == 500
    body = failed.json()
    assert body["request_id"] == "req-1234" and "req-1234" in body["error"]
    # The exception's text stays in the log, not in the answer.
    assert "the view failed" not in failed.content.decode()
    suspicious = client.get("/api/test-suspicious")
    assert suspicious.status_code == 400
    assert_json_error(suspicious, "/api/test-suspicious")
    denied = client.get("/api/test-denied")
    assert denied.status_code == 403 and denied.json() == {"error": "permission denied"}
    # Outside /api/ the site's pages stay HTML.
    page = client.get("/test-boom")
    assert page.status_code == 500 and page["Content-Type"].startswith("text/html")
