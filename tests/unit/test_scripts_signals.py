"""scripts/run and scripts/test started from a background job (SIGINT inherited as ignored)
still stop on Ctrl-C: lib.sh's default_signals starts the script again with SIGINT at its
default, since bash can neither trap nor reset a signal ignored on entry."""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path

from tests.conftest import ROOT

PROBE = """
source "{lib}"
default_signals "$@"
trap 'echo stopped by INT; exit 0' INT
echo "args: $*"
kill -INT $$
sleep 5
echo "the signal was lost"
"""


def _ignore_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def test_a_script_started_with_sigint_ignored_can_trap_it(tmp_path: Path) -> None:
    probe = tmp_path / "probe.sh"
    probe.write_text(PROBE.format(lib=ROOT / "scripts" / "lib.sh"))
    done = subprocess.run(
        ["bash", str(probe), "one", "two words"],
        preexec_fn=_ignore_sigint,  # what `scripts/run &` gives the script
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.stdout.splitlines() == ["args: one two words", "stopped by INT"], done.stderr
    assert done.returncode == 0


def test_both_entry_points_reset_the_signals_first() -> None:
    for script in ("run", "test"):
        lines = (ROOT / "scripts" / script).read_text().splitlines()
        source = lines.index('source "$(dirname "$0")/lib.sh"')
        assert lines[source + 1] == 'default_signals "$@"', script
