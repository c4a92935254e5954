"""``{{ value|moment }}`` and ``{{ value|deadline }}``: dates in templates as the console
writes them everywhere (jobs/console/moments.py)."""

from datetime import datetime

from django import template
from django.utils.safestring import SafeString

from ..console import moments

register = template.Library()


@register.filter
def moment(value: datetime | None) -> SafeString:
    return moments.moment_html(value)


@register.filter
def deadline(value: datetime | None) -> SafeString:
    return moments.moment_html(value, relative=True)
