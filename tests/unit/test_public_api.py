"""``jobs`` states the engine's public API, and importing it loads nothing heavy."""

from __future__ import annotations

import subprocess
import sys
from importlib import import_module

import jobs
from tests.conftest import ROOT


def test_every_public_name_is_the_object_of_its_home_module() -> None:
    assert sorted(jobs.__all__) == sorted(jobs._EXPORTS)
    for name in jobs.__all__:
        home = import_module(jobs._EXPORTS[name], "jobs")
        assert getattr(jobs, name) is getattr(home, name), name


def test_the_handler_controls_and_the_context_are_public() -> None:
    from jobs import Discard, JobContext, Retry, Snooze

    assert issubclass(Retry, Exception) and issubclass(Snooze, Exception) and issubclass(Discard, Exception)
    assert JobContext.__name__ == "JobContext"
    assert "max_attempts" in jobs.JOB_OPTIONS and "concurrency_limit" in jobs.JOB_OPTIONS


def test_importing_jobs_loads_no_model_and_no_worker() -> None:
    probe = "import sys, jobs; print(sorted(m for m in sys.modules if m.startswith('jobs.')))"
    out = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout
