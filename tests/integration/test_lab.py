"""The lab (benchmarks, the chaos drill, the fleet simulator) is not part of the product:
production settings do not install it, JOBS_LAB=true does, and no product app imports it."""

from __future__ import annotations

import ast
import subprocess

import pytest

from tests.conftest import ROOT, manage, subprocess_env

LAB_COMMANDS = {
    "benchmark", "chaos", "fleet", "bench_console", "bench_limits", "bench_metrics", "bench_push",
    "bench_reports", "bench_scale", "bench_workflows", "bench_layout",
}  # fmt: skip
PRODUCT = ["config", "jobs", "accounts", "notifications", "reports", "demos"]


def commands(**env: str) -> set[str]:
    """The command names ``manage.py help --commands`` lists with the project's own settings."""
    environment = subprocess_env(DJANGO_SETTINGS_MODULE="config.settings", DEBUG="true")
    environment.pop("JOBS_LAB", None)
    environment.update(env)
    process = manage("help", "--commands", env=environment, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, err = process.communicate(timeout=120)
    assert process.returncode == 0, err
    return set(out.split())


@pytest.mark.django_db
def test_production_settings_do_not_install_the_lab() -> None:
    names = commands()
    assert {"runworker", "runscheduler", "jobs"} <= names
    assert not names & LAB_COMMANDS
    assert not any(name.startswith("bench") for name in names)


@pytest.mark.django_db
def test_jobs_lab_true_installs_the_lab_commands() -> None:
    assert commands(JOBS_LAB="true") >= LAB_COMMANDS


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        # The memory check samples the executor after 1,000 jobs: fewer once waited two
        # minutes, then failed.
        (["benchmark", "--memory", "10"], "--memory takes at least 1000 jobs, or 0 to skip the memory check"),
        (["bench_layout", "--payload", "-1"], "--payload must be 0 or more bytes"),
    ],
    ids=["benchmark-memory", "layout-payload"],
)
def test_the_benchmarks_refuse_a_bad_size_at_once(arguments: list[str], message: str) -> None:
    # Refused before any database is looked at: nothing is emptied.
    env = subprocess_env(JOBS_LAB="true", DEBUG="true")
    process = manage(*arguments, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    _, err = process.communicate(timeout=120)
    assert process.returncode == 1
    assert message in err


def test_no_product_module_imports_the_lab() -> None:
    offenders = []
    for package in PRODUCT:
        for path in (ROOT / package).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names = [node.module]
                elif isinstance(node, ast.Import):
                    names = [alias.name for alias in node.names]
                else:
                    continue
                if any(name == "lab" or name.startswith("lab.") for name in names):
                    offenders.append(str(path.relative_to(ROOT)))
    assert offenders == []


@pytest.mark.django_db
def test_the_layout_prototype_counts_the_index_entries_each_layout_writes() -> None:
    # Today's layout writes 6 index entries per no-op job (enqueue: primary key, claimable;
    # claim: primary key, holder; outcome: primary key, console_state), and so does layout
    # B, whose running rows are indexed by lease expiry; but B's heartbeat writes two index
    # entries more, where A's is a HOT update. Counted from the WAL: exact, not timed.
    env = subprocess_env(JOBS_LAB="true", DEBUG="true")
    process = manage(
        "bench_layout", "--jobs", "20", "--heartbeats", "5", "--layouts", "A,B,P70",
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    out, err = process.communicate(timeout=300)
    assert process.returncode == 0, err
    rows = {line.split()[0]: line.split() for line in out.splitlines()[1:]}
    # (A first page split or a new root adds a fraction on so few jobs.)
    assert round(float(rows["A"][6])) == 6 and round(float(rows["B"][6])) == 6, out
    # (WAL bytes per heartbeat: the column after heap records per job.)
    assert float(rows["A"][8]) < float(rows["B"][8]), out
    # The table before migration 0021 (its reverse, another column order) is built too.
    assert round(float(rows["P70"][6])) == 6, out
