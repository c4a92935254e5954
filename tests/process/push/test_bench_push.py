"""manage.py bench_push: a small real run (runworker processes, the loopback APNs), and its
refusal to empty a database that is not a benchmark's."""

from __future__ import annotations

import io

import pytest
from django.core.management import CommandError, call_command

pytestmark = [pytest.mark.process, pytest.mark.django_db(transaction=True)]


def test_bench_push_prints_pushes_per_second_for_1_and_2_executors() -> None:
    out = io.StringIO()
    call_command("bench_push", runs=1, count=40, force=True, stdout=out, stderr=io.StringIO())
    lines = {line.split()[0]: line.split()[1] for line in out.getvalue().splitlines()[1:]}
    assert set(lines) == {
        "push_1_proc_per_s",
        "push_1_proc_wall_per_s",
        "push_2_proc_per_s",
        "push_2_proc_wall_per_s",
    }
    assert all(float(value.replace(",", "")) > 0 for value in lines.values())


def test_bench_push_refuses_a_database_that_is_not_for_benchmarks() -> None:
    with pytest.raises(CommandError, match="does not look like a benchmark database"):
        call_command("bench_push", runs=1, count=10)
