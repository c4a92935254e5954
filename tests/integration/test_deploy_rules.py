"""deploy/: Prometheus's config and alert rules pass promtool (check config, check rules, and
the rules' unit tests, each alert firing and not firing), and they and the Grafana
dashboard name only metrics the web app and the worker expose."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from multiprocessing.sharedctypes import RawValue
from pathlib import Path

import pytest

from jobs import metrics
from jobs.worker.metrics import MetricsTable, WorkerCollector
from jobs.worker.slots import SlotTable
from tests.conftest import ROOT

DEPLOY = ROOT / "deploy"
PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(
    PROMTOOL is None,
    reason="promtool (Debian's prometheus package) is not installed; scripts/test installs it",
)


def promtool(*args: str, cwd: Path) -> str:
    assert PROMTOOL is not None
    result = subprocess.run([PROMTOOL, *args], cwd=cwd, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout + result.stderr


@needs_promtool
def test_prometheus_config_is_valid(tmp_path: Path) -> None:
    for name in ("prometheus.yml", "alert_rules.yml"):
        shutil.copy(DEPLOY / name, tmp_path / name)
    # The bearer token file the config names; a deploy writes METRICS_TOKEN there.
    (tmp_path / "metrics-token").write_text("token\n")
    output = promtool("check", "config", "prometheus.yml", cwd=tmp_path)
    assert "1 rule files found" in output


@needs_promtool
def test_alert_rules_are_valid_and_their_unit_tests_pass() -> None:
    output = promtool("check", "rules", "alert_rules.yml", cwd=DEPLOY)
    assert "7 rules found" in output
    promtool("test", "rules", "alert_rules_test.yml", cwd=DEPLOY)


def test_every_alert_is_tested_firing_and_not_firing() -> None:
    rules = (DEPLOY / "alert_rules.yml").read_text()
    tests = (DEPLOY / "alert_rules_test.yml").read_text()
    alerts = set(re.findall(r"- alert: (\w+)", rules))
    assert len(alerts) == 7
    for alert in alerts:
        case = rf"alertname: {alert}\n\s+exp_alerts:(.*?)(?=\n\s+- eval_time|\n\n|\Z)"
        cases = re.findall(case, tests, re.S)
        assert any(case.strip() == "[]" for case in cases), f"{alert} is never tested quiet"
        assert any("exp_labels" in case for case in cases), f"{alert} is never tested firing"


@pytest.mark.django_db
def test_rules_and_dashboard_name_only_exposed_metrics() -> None:
    exposed = _names(metrics.QueueCollector().collect()) | _names(metrics.REGISTRY.collect())
    words = {"executors_alive": RawValue("i", 1), "last_beat": RawValue("d", 0)}
    worker = WorkerCollector(MetricsTable(2), SlotTable(1), **words)
    exposed |= _names(worker.collect())
    used = set(re.findall(r"\bjobs_\w+", (DEPLOY / "alert_rules.yml").read_text()))
    dashboard = json.loads((DEPLOY / "grafana" / "jobs.json").read_text())
    used |= set(re.findall(r"\bjobs_\w+", json.dumps(dashboard)))
    assert used and used <= exposed, used - exposed


def _names(families) -> set[str]:  # type: ignore[no-untyped-def]
    names = set()
    for family in families:
        if family.type == "counter":
            names.add(f"{family.name}_total")
        elif family.type == "histogram":
            names |= {f"{family.name}_bucket", f"{family.name}_sum", f"{family.name}_count"}
        else:
            names.add(family.name)
    return names
