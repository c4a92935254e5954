"""The registered email templates, the variables each declares, and their rendering.

A template lives in ``templates/email/<name>/``: ``subject.txt`` (one line), ``body.txt``
and ``body.html``. Every render gets ``site_name`` and ``site_url`` besides the declared
variables. Only templates marked ``api`` may be sent through POST /api/jobs/email, and only
with exactly their declared variables: the API sends our words, never a caller's message.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.template.loader import render_to_string

from ..exceptions import BadVariables, UnknownTemplate

# Longest value of one API variable, in characters.
MAX_VARIABLE_LENGTH = 200


@dataclass(frozen=True)
class EmailTemplate:
    name: str
    variables: frozenset[str]
    # Whether API callers may send it.
    api: bool = False


@dataclass(frozen=True)
class RenderedEmail:
    subject: str
    text: str
    html: str


TEMPLATES = {
    template.name: template
    for template in (
        EmailTemplate("verify_email", frozenset({"username", "link", "valid_for"})),
        EmailTemplate("existing_account", frozenset({"username", "login_link", "reset_link"})),
        EmailTemplate("password_reset", frozenset({"username", "link", "valid_for"})),
        EmailTemplate("welcome", frozenset({"name"}), api=True),
        EmailTemplate("order_receipt", frozenset({"name", "order_number", "total"}), api=True),
        # The video pipeline demo's last step (demos/).
        EmailTemplate("video_ready", frozenset({"name", "title", "cover"})),
        # reports.tasks.weekly_report, to each staff member.
        EmailTemplate("weekly_report", frozenset({"username", "link", "period", "rows"})),
    )
}


def get_template(name: str) -> EmailTemplate:
    try:
        return TEMPLATES[name]
    except KeyError:
        raise UnknownTemplate(f"no email template named {name!r}") from None


def api_template_names() -> list[str]:
    return sorted(name for name, template in TEMPLATES.items() if template.api)


def check_variables(template: EmailTemplate, variables: Mapping[str, Any]) -> None:
    """Raise BadVariables unless ``variables`` are exactly the template's, each a short
    string or number on one line."""
    errors = {name: "this template has no such variable" for name in set(variables) - template.variables}
    errors.update({name: "required" for name in template.variables - set(variables)})
    for name, value in variables.items():
        if name in errors:
            continue
        if isinstance(value, bool) or not isinstance(value, str | int | float):
            errors[name] = "must be a string or a number"
        elif len(str(value)) > MAX_VARIABLE_LENGTH:
            errors[name] = f"must be at most {MAX_VARIABLE_LENGTH} characters"
        elif any(ch in str(value) for ch in "\r\n\x00"):
            errors[name] = "must be on one line"
    if errors:
        raise BadVariables(errors)


def render(name: str, variables: Mapping[str, Any]) -> RenderedEmail:
    template = get_template(name)
    check_variables_present(template, variables)
    context = {**variables, "site_name": settings.SITE_NAME, "site_url": settings.SITE_URL}
    subject = render_to_string(f"email/{name}/subject.txt", context)
    return RenderedEmail(
        # Header lines cannot hold newlines; a template's trailing one is not meant.
        subject=" ".join(subject.split()),
        text=render_to_string(f"email/{name}/body.txt", context),
        html=render_to_string(f"email/{name}/body.html", context),
    )


def check_variables_present(template: EmailTemplate, variables: Mapping[str, Any]) -> None:
    missing = template.variables - set(variables)
    if missing:
        raise BadVariables({name: "required" for name in missing})
