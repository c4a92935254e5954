"""Start-up pauses the garbage collector while Django loads (config/startup.py)."""

from __future__ import annotations

import gc
import subprocess
import sys
from collections.abc import Iterator

import pytest

from config import startup
from tests.conftest import ROOT, subprocess_env


@pytest.fixture
def collector_restored() -> Iterator[None]:
    enabled = gc.isenabled()
    yield
    gc.unfreeze()
    (gc.enable if enabled else gc.disable)()


def test_the_pause_ends_with_the_collector_on_and_what_was_loaded_frozen(collector_restored: None) -> None:
    gc.enable()
    startup.pause_collector()
    assert not gc.isenabled()
    startup.resume_collector()
    assert gc.isenabled() and gc.get_freeze_count() > 0
    # A second resume (another django.setup() in the process) changes nothing.
    gc.unfreeze()
    startup.resume_collector()
    assert gc.isenabled() and gc.get_freeze_count() == 0


def test_a_collector_turned_off_by_the_user_stays_off(collector_restored: None) -> None:
    gc.disable()
    startup.pause_collector()
    startup.resume_collector()
    assert not gc.isenabled() and gc.get_freeze_count() == 0


PROBE = "import gc; print(gc.isenabled(), gc.get_freeze_count() > 0)"


@pytest.mark.parametrize(
    "command",
    [[str(ROOT / "manage.py"), "shell", "-c", PROBE], ["-c", f"import config.wsgi; {PROBE}"]],
    ids=["manage.py", "wsgi"],
)
def test_a_loaded_project_runs_with_the_collector_on(command: list[str]) -> None:
    result = subprocess.run(
        [sys.executable, *command], cwd=ROOT, env=subprocess_env(), capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split()[-2:] == ["True", "True"], result.stdout + result.stderr
