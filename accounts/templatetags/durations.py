from datetime import timedelta

from django import template

from accounts.durations import in_words

register = template.Library()


@register.filter
def duration_in_words(value: float | timedelta) -> str:
    return in_words(value)
