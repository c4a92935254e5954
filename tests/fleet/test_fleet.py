"""The many-hosts drill, short: two simulated hosts (each a runworker in its own process
group with its own host name), one of them SIGKILLed as a whole part-way; every job's side
effect is there exactly once, and only jobs in flight on the killed host ran again."""

from __future__ import annotations

import json
import subprocess

import pytest

from tests.conftest import manage, subprocess_env

pytestmark = [pytest.mark.fleet, pytest.mark.django_db(transaction=True)]


def test_two_hosts_one_killed_keep_every_side_effect_once() -> None:
    proc = manage(
        "fleet", "--hosts", "2", "--executors", "1", "--jobs", "600", "--millis", "2", "--kill", "--force",
        env=subprocess_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, out + err
    (result,) = json.loads(out[: out.index("\n]") + 2])
    assert result["hosts"] == 2 and result["kills"] == 1
    assert result["succeeded"] == result["jobs"] == result["effect_rows"] == 600
    assert result["lost"] == 0
    assert result["extra_runs"] <= result["in_flight_at_kills"]
    # Each host registered under its own name; the killed one's replacement too.
    names = set(result["hostnames"])
    assert len(names) == 3 and {"fleet-host-0", "fleet-host-1"} <= names
    assert "killed host fleet-host-" in err


def test_bad_host_counts_are_refused() -> None:
    proc = manage(
        "fleet",
        "--hosts",
        "two",
        "--force",
        env=subprocess_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    _, err = proc.communicate(timeout=60)
    assert proc.returncode != 0
    assert "--hosts takes host counts such as 1,2,4,8" in err
