"""gunicorn settings the command line cannot give (scripts/run: ``-c python:config.gunicorn``).

* Prometheus: with ``PROMETHEUS_MULTIPROC_DIR`` set, each web process writes its request
  and enqueue counters there and /metrics sums them (jobs/metrics.py); a process that exits
  has its files marked dead, so its live gauges stop counting.
* ``LOG_FORMAT=json``: gunicorn's own lines (start-up, access log) are JSON objects too.
"""

import os
from typing import Any


def child_exit(server: Any, worker: Any) -> None:
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(worker.pid)


if os.environ.get("LOG_FORMAT") == "json":
    logconfig_dict = {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {
            "json": {
                "()": "pythonjsonlogger.json.JsonFormatter",
                "format": "%(asctime)s %(levelname)s %(name)s %(message)s",
                "rename_fields": {"asctime": "ts", "levelname": "level", "name": "logger"},
            },
        },
        "handlers": {
            "console": {"class": "logging.StreamHandler", "formatter": "json", "stream": "ext://sys.stdout"},
        },
        "loggers": {
            "gunicorn.error": {"handlers": ["console"], "level": "INFO", "propagate": False},
            "gunicorn.access": {"handlers": ["console"], "level": "INFO", "propagate": False},
        },
    }
