"""URL names of the engine's admin pages, built from a model's options like Django's own
(``admin:<app_label>_<model>_<page>``), so they follow the label the engine is installed under:
a project that already has an app called ``jobs`` installs the engine relabelled."""

from __future__ import annotations

from typing import Any


def admin_url_name(opts: Any, page: str) -> str:
    """The admin's URL name of ``page`` of the model ``opts`` describes (its ``_meta``)."""
    return f"admin:{opts.app_label}_{opts.model_name}_{page}"
