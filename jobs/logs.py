"""``LOG_FORMAT=json``: one JSON object per line (python-json-logger), from the web app, the
worker and the scheduler alike (settings.LOGGING).

The project's log lines are ``event=... key=value`` text; lines that pass their facts as
fields (the per-job line: jobs/worker/attempt.py) keep them, and for the others the
formatter lifts the well-known keys out of the text (``event``, ``job``, ``task``, ``queue``,
``attempt``, ``outcome``, ``trace_id``...), so every line can be filtered by them. The
trace of the code that logs (a request, a job's handler: jobs.observe) is added when the
line names none.
"""

from __future__ import annotations

import logging
import re
import time
from typing import Any

from pythonjsonlogger.json import JsonFormatter as _JsonFormatter

from .observe import current_trace, trace_id_of

_PAIR = re.compile(r"(\w+)=('[^']*'|\"[^\"]*\"|\S+)")
# Keys of the text lines lifted into fields, and the field names they get.
_LIFTED = {
    "event": "event",
    "job": "job_id",
    "task": "task",
    "queue": "queue",
    "attempt": "attempt",
    "outcome": "outcome",
    "trace_id": "trace_id",
    "duration_ms": "duration_ms",
    "reason": "reason",
    "worker": "worker_id",
}


class KeyValueFormatter(logging.Formatter):
    """The text lines' formatter (``ts=... level=... logger=... event=...``). The time is
    formatted once a second, not once a line: a worker writes a line per job."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._second = -1
        self._stamp = ""

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        if datefmt is not None:
            return super().formatTime(record, datefmt)
        second = int(record.created)
        if second != self._second:
            self._stamp = time.strftime(self.default_time_format, self.converter(record.created))
            self._second = second
        return f"{self._stamp},{int(record.msecs):03d}"


class JsonFormatter(_JsonFormatter):
    def add_fields(self, log_record: dict[str, Any], record: Any, message_dict: dict[str, Any]) -> None:
        super().add_fields(log_record, record, message_dict)
        message = log_record.get("message")
        if isinstance(message, str) and "=" in message:
            for key, value in _PAIR.findall(message):
                field = _LIFTED.get(key)
                if field is not None and field not in log_record:
                    log_record[field] = value.strip("'\"")
        if "trace_id" not in log_record:
            trace = current_trace.get()
            if trace:
                log_record["trace_id"] = trace_id_of(trace)
