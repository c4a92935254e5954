"""Durations in words for pages and emails ("3 days", "1 hour", "15 minutes")."""

from __future__ import annotations

from datetime import timedelta


def in_words(seconds: float | timedelta) -> str:
    if isinstance(seconds, timedelta):
        seconds = seconds.total_seconds()
    whole = int(seconds)
    for unit, size in (("day", 86400), ("hour", 3600)):
        if whole >= size and whole % size == 0:
            count = whole // size
            return f"{count} {unit}{'s' if count != 1 else ''}"
    minutes = max(1, round(whole / 60))
    return f"{minutes} minute{'s' if minutes != 1 else ''}"
