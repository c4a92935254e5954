"""Countries as people write them: an ISO 3166 name or code, read as its two-letter code.

The list is pycountry's (ISO 3166-1, kept up to date by its maintainers), so a code that
merely looks like one ("XX") is refused. Names are matched whole and in any case, never by
their first letters: "Germany" is DE, and "Ge" is Georgia's code, not a short "Germany".
"""

from __future__ import annotations

import functools

import pycountry

from .exceptions import UnknownCountry

# What a person is told to type instead, after the error says what is wrong.
HOW_TO_WRITE = "a country's name (such as Germany) or its two-letter code (such as DE)"


@functools.cache
def _codes() -> dict[str, str]:
    """Every code (two and three letters) and name of every country, folded, to its alpha-2
    code. Built once: an import checks a country on every row."""
    codes: dict[str, str] = {}
    for country in pycountry.countries:
        for spelling in ("alpha_2", "alpha_3", "name", "common_name", "official_name"):
            value = getattr(country, spelling, None)
            if value:
                codes[value.casefold()] = country.alpha_2
    return codes


def country_code(text: object) -> str:
    """The ISO 3166 alpha-2 code of ``text`` (a code or a name, in any case); "" for nothing.
    UnknownCountry saying what is wrong otherwise (callers add what to do: HOW_TO_WRITE)."""
    if text is None:
        return ""
    if not isinstance(text, str):
        raise UnknownCountry(f"The country must be text, not {type(text).__name__}.")
    typed = text.strip()
    if not typed:
        return ""
    code = _codes().get(typed.casefold())
    if code is None:
        shown = typed if len(typed) <= 40 else typed[:40] + "…"
        raise UnknownCountry(f"“{shown}” is not a country we know.")
    return code


def choices() -> list[tuple[str, str]]:
    """(name, code) of every country, by name: what a form may offer."""
    return sorted(
        ((getattr(c, "common_name", None) or c.name, c.alpha_2) for c in pycountry.countries),
        key=lambda pair: pair[0],
    )
