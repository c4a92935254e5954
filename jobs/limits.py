"""Rate and concurrency limits, across every worker, applied in the claim.

A job under a limit is claimed like any other; the claim (jobs/sql/claim.sql) decides, under
the lock of its key's state row, whether it may start now, and otherwise leaves it waiting in
the database as 'scheduled' (a rate keeps a start time for it; a concurrency limit wakes it
when a running job of its key finishes), using no attempt. So no worker holds limited work
in memory, no worker spins on it, and jobs of other keys and queues go on at full speed.

Where limits come from:

* a task's own: ``@task(rate_limit="100/s", burst=10, concurrency_limit=5)``, a limit named
  ``task:<dotted path>``;
* named and shared: ``@task(limit="email")`` with the values in ``JOBS["LIMITS"]``
  (``{"email": {"rate": "100/s", "burst": 10, "concurrency": None, "per_key": False}}``)
  or created in the console;
* per key: ``.using(limit_key=f"user:{user.id}")`` on a limit with ``per_key`` gives each
  key its own budget ("each user at most 2 reports at once").

Values set in the console win over code and settings (``source`` "console") until an
operator resets them; workers follow a change at their next claim.

When to use which: a limit keeps your own workers under a provider's published rate, so
its 429s are rare; ``raise Retry(after=...)`` is still the answer to the 429 a provider
sends anyway (its Retry-After), and uses an attempt.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .conf import jobs_settings
from .exceptions import JobsError

_RATE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*/\s*(s|sec|second|m|min|minute|h|hour)\s*$")
_PER = {
    "s": 1.0,
    "sec": 1.0,
    "second": 1.0,
    "m": 60.0,
    "min": 60.0,
    "minute": 60.0,
    "h": 3600.0,
    "hour": 3600.0,
}
# Console edits are kept; code and settings only (re)write what they own.
CONSOLE = "console"


class InvalidLimit(JobsError, ValueError):
    """A limit that cannot be applied: a malformed rate, a negative burst, an unknown name."""


def parse_rate(text: str | float | int | None) -> float | None:
    """``"100/s"``, ``"30/m"``, ``"500/h"`` (or a number of jobs per second) -> jobs/s."""
    if text is None or text == "":
        return None
    if isinstance(text, bool):
        raise InvalidLimit(f"a rate is 'N/s', 'N/m' or 'N/h', not {text!r}")
    if isinstance(text, int | float):
        rate = float(text)
    else:
        match = _RATE.match(str(text))
        if match is None:
            raise InvalidLimit(f"a rate is 'N/s', 'N/m' or 'N/h' (e.g. '100/s'), not {text!r}")
        rate = float(match.group(1)) / _PER[match.group(2)]
    if not rate > 0:
        raise InvalidLimit(f"a rate must be more than zero, not {text!r}")
    return rate


@dataclass(frozen=True, slots=True)
class LimitSpec:
    name: str
    rate: float | None = None
    burst: int = 0
    concurrency: int | None = None
    per_key: bool = False

    @classmethod
    def build(
        cls,
        name: str,
        *,
        rate: str | float | None = None,
        burst: int | None = None,
        concurrency: int | None = None,
        per_key: bool = False,
    ) -> LimitSpec:
        if not isinstance(name, str) or not name or len(name) > 200:
            raise InvalidLimit(f"a limit's name is a non-empty string, not {name!r}")
        if burst is not None and (isinstance(burst, bool) or not isinstance(burst, int) or burst < 0):
            raise InvalidLimit(f"burst of limit {name!r} must be a whole number of 0 or more, not {burst!r}")
        if concurrency is not None and (
            isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1
        ):
            raise InvalidLimit(f"concurrency of limit {name!r} must be a whole number of 1 or more")
        spec = cls(name, parse_rate(rate), burst or 0, concurrency, bool(per_key))
        if spec.rate is None and spec.concurrency is None:
            raise InvalidLimit(f"limit {name!r} sets neither a rate nor a concurrency")
        return spec


def settings_limits() -> dict[str, LimitSpec]:
    """The named limits of ``JOBS["LIMITS"]``, checked."""
    configured: Mapping[str, Mapping[str, Any]] = jobs_settings().LIMITS
    limits = {}
    for name, values in configured.items():
        unknown = set(values) - {"rate", "burst", "concurrency", "per_key"}
        if unknown:
            raise InvalidLimit(f"JOBS['LIMITS'][{name!r}] has unknown keys: {', '.join(sorted(unknown))}")
        limits[name] = LimitSpec.build(name, **values)
    return limits


def task_limit_name(task_path: str) -> str:
    return f"task:{task_path}"


_REGISTER = """
INSERT INTO jobs_limit (name, rate, burst, concurrency, per_key, source, updated_at)
VALUES (%(name)s, %(rate)s, %(burst)s, %(concurrency)s, %(per_key)s, %(source)s, statement_timestamp())
ON CONFLICT (name) DO UPDATE
SET rate = EXCLUDED.rate, burst = EXCLUDED.burst, concurrency = EXCLUDED.concurrency,
    per_key = EXCLUDED.per_key, source = EXCLUDED.source, updated_at = EXCLUDED.updated_at
WHERE jobs_limit.source <> 'console'
  AND (jobs_limit.rate, jobs_limit.burst, jobs_limit.concurrency, jobs_limit.per_key,
       jobs_limit.source)
      IS DISTINCT FROM (EXCLUDED.rate, EXCLUDED.burst, EXCLUDED.concurrency, EXCLUDED.per_key,
                        EXCLUDED.source)
"""


def register(cursor: Any, spec: LimitSpec, *, source: str) -> None:
    """Write a limit code or settings declare, unless the console has set its values.
    Writes nothing when it is already as declared."""
    cursor.execute(
        _REGISTER,
        {
            "name": spec.name,
            "rate": spec.rate,
            "burst": spec.burst,
            "concurrency": spec.concurrency,
            "per_key": spec.per_key,
            "source": source,
        },
    )


class Registry:
    """Which limits this process has made sure exist in the database. Limits are
    registered on a connection of their own and committed at once, so a caller whose
    transaction rolls back does not leave this process believing in a limit that is not
    there."""

    def __init__(self) -> None:
        self.done: set[tuple[str, LimitSpec]] = set()
        self.lock = threading.Lock()

    def ensure(self, database: str, spec: LimitSpec, *, source: str) -> None:
        key = (database, spec)
        with self.lock:
            if key in self.done:
                return
        from .db import connect

        with connect(database, application_name="jobs-limits") as conn:
            register(conn.cursor(), spec, source=source)
        with self.lock:
            self.done.add(key)

    def forget(self) -> None:
        with self.lock:
            self.done.clear()


registry = Registry()
