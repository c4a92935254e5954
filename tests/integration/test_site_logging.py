"""What the web process prints: each request warning once, gunicorn's lines in the
application's format, and no 404 for the icon every browser asks for."""

from __future__ import annotations

import importlib
import io
import logging
import logging.config

import pytest
from django.test import Client


def test_django_request_warnings_go_to_the_root_handler_alone() -> None:
    # Django's default "django" logger has a console handler of its own (DEBUG only) and
    # propagates to root as well: every "Not Found: ..." was printed twice.
    assert logging.getLogger("django").handlers == []
    assert logging.getLogger("django").propagate


@pytest.mark.parametrize(("log_format", "starts"), [("text", "ts="), ("json", "{")])
def test_gunicorns_lines_use_the_applications_format(
    monkeypatch: pytest.MonkeyPatch, log_format: str, starts: str
) -> None:
    monkeypatch.setenv("LOG_FORMAT", log_format)
    import config.gunicorn

    settings = importlib.reload(config.gunicorn).logconfig_dict
    stream = io.StringIO()
    settings["handlers"]["console"]["stream"] = stream
    logging.config.dictConfig(settings)
    try:
        logging.getLogger("gunicorn.access").info("client=127.0.0.1 method=GET path=/ status=200")
    finally:
        for name in ("gunicorn.access", "gunicorn.error"):
            logging.getLogger(name).handlers.clear()
    line = stream.getvalue().strip()
    assert line.startswith(starts), line
    assert "gunicorn.access" in line and "status=200" in line


@pytest.mark.django_db
def test_the_favicon_is_found() -> None:
    response = Client().get("/favicon.ico")
    assert response.status_code == 301
    assert response["Location"].endswith("favicon.svg")
