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

import re
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
