"""gunicorn settings the command line cannot give (scripts/run: ``-c python:config.gunicorn``).

* Prometheus: with ``PROMETHEUS_MULTIPROC_DIR`` set, each web process writes its request
  and enqueue counters there and /metrics sums them (jobs/metrics.py); a process that exits
  has its files marked dead, so its live gauges stop counting.
* gunicorn's own lines (start-up, access log) use the application's log format: key=value
  text, or JSON objects with ``LOG_FORMAT=json``.
"""

import os
from typing import Any


def child_exit(server: Any, worker: Any) -> None:
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(worker.pid)


# gunicorn's own lines (start-up, worker boots, the access log) in the application's format:
# the same formatters as settings.LOGGING, text (key=value) or, with LOG_FORMAT=json, JSON.
_json = os.environ.get("LOG_FORMAT") == "json"
logconfig_dict = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "app": {
            "()": "jobs.logs.JsonFormatter" if _json else "jobs.logs.KeyValueFormatter",
            "format": "%(asctime)s %(levelname)s %(name)s %(message)s"
            if _json
            else "ts=%(asctime)s level=%(levelname)s logger=%(name)s %(message)s",
            **({"rename_fields": {"asctime": "ts", "levelname": "level", "name": "logger"}} if _json else {}),
        },
    },
    "handlers": {
        "console": {"class": "logging.StreamHandler", "formatter": "app", "stream": "ext://sys.stdout"},
    },
    "loggers": {
        "gunicorn.error": {"handlers": ["console"], "level": "INFO", "propagate": False},
        "gunicorn.access": {"handlers": ["console"], "level": "INFO", "propagate": False},
    },
}
