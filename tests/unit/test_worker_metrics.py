"""A worker's counts in shared memory: tallies, their regions, and the exposition."""

from __future__ import annotations

import os
import signal
import threading
import time
from multiprocessing.sharedctypes import RawValue

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from jobs.worker import metrics
from jobs.worker.metrics import _META, MetricsTable, Publisher, Tally, WorkerCollector
from jobs.worker.seqlock import WORD
from jobs.worker.slots import SlotTable


def exposition(table: MetricsTable) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    registry = CollectorRegistry(auto_describe=False)
    words = {"executors_alive": RawValue("i", 2), "last_beat": RawValue("d", 1700000000.0)}
    registry.register(WorkerCollector(table, SlotTable(2), **words))
    text = generate_latest(registry).decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def finished(found: dict[tuple[str, tuple[tuple[str, str], ...]], float], outcome: str) -> float:
    return found[("jobs_finished_total", (("outcome", outcome), ("queue", "email"), ("task", "app.send")))]


def test_regions_are_summed_and_histograms_are_cumulative() -> None:
    table = MetricsTable(3)
    first, second = Publisher(table, 0), Publisher(table, 1)
    first.tally.attempt("app.send", "email", "succeeded", 0.003, 0.02)
    first.tally.attempt("app.send", "email", "retried", 0.2, 7.0)
    second.tally.attempt("app.send", "email", "succeeded", 20.0, 0.0)
    second.tally.count("app.send", "email", "time_limit")
    second.tally.count_enqueued("app.child", 3)
    first.publish()
    second.publish()
    found = exposition(table)
    assert (
        found[("jobs_finished_total", (("outcome", "succeeded"), ("queue", "email"), ("task", "app.send")))]
        == 2
    )
    assert (
        found[("jobs_finished_total", (("outcome", "time_limit"), ("queue", "email"), ("task", "app.send")))]
        == 1
    )
    assert found[("jobs_enqueued_total", (("task", "app.child"),))] == 3
    buckets = {
        dict(labels)["le"]: value
        for (name, labels), value in found.items()
        if name == "jobs_run_duration_seconds_bucket"
    }
    assert (buckets["0.001"], buckets["0.005"], buckets["0.5"], buckets["10.0"], buckets["30.0"]) == (
        0,
        1,
        2,
        2,
        3,
    )
    assert buckets["+Inf"] == found[("jobs_run_duration_seconds_count", (("task", "app.send"),))] == 3
    assert found[("jobs_run_duration_seconds_sum", (("task", "app.send"),))] == pytest.approx(20.203)
    assert found[("jobs_queue_wait_seconds_count", (("queue", "email"),))] == 3
    assert found[("jobs_worker_executors_alive", ())] == 2
    assert found[("jobs_worker_jobs_in_hand", ())] == 0


def test_a_new_process_in_a_region_goes_on_from_its_counts() -> None:
    table = MetricsTable(1)
    dead = Publisher(table, 0)
    dead.tally.attempt("app.send", "email", "succeeded", 0.01, 0.0)
    dead.publish()
    replacement = Publisher(table, 0)
    replacement.tally.attempt("app.send", "email", "succeeded", 0.01, 0.0)
    replacement.publish()
    found = exposition(table)
    assert (
        found[("jobs_finished_total", (("outcome", "succeeded"), ("queue", "email"), ("task", "app.send")))]
        == 2
    )


def test_a_publish_cut_short_leaves_the_previous_snapshot() -> None:
    table = MetricsTable(1)
    publisher = Publisher(table, 0)
    publisher.tally.count("app.send", "email", "dead")
    publisher.publish()
    publisher.tally.count("app.send", "email", "dead")
    publisher.publish()
    # The newest half as a process killed mid-write leaves it: its sequence odd.
    newest = max((0, 1), key=lambda half: _META.unpack_from(table.buf, table._offset(0, half) + WORD)[0])
    table.seq.begin(table._offset(0, newest))
    assert table.read(0)["finished"] == [["app.send", "email", "dead", 1]]


def test_reads_during_constant_publishes_never_go_back() -> None:
    # A scrape that came back empty, or older than the one before, would read to
    # Prometheus as a counter reset.
    table = MetricsTable(1)
    publisher = Publisher(table, 0)
    pid = os.fork()
    if pid == 0:
        try:
            while True:
                publisher.tally.count("app.send", "email", "dead")
                publisher.publish()
        finally:
            os._exit(0)
    try:
        counts = []
        deadline = time.monotonic() + 0.5
        while time.monotonic() < deadline:
            snapshot = table.read(0)
            if snapshot or counts:
                counts.append(snapshot["finished"][0][3])
        assert counts, "the writer never got to publish"
        assert counts == sorted(counts)
    finally:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)


def test_threads_counting_at_once_lose_nothing() -> None:
    tally = Tally()

    def count() -> None:
        for _ in range(5000):
            tally.attempt("app.send", "email", "succeeded", 0.001, 0.0)
            tally.count_enqueued("app.child", 1)

    threads = [threading.Thread(target=count) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert tally.finished[("app.send", "email", "succeeded")] == 20000
    assert tally.enqueued["app.child"] == 20000
    assert tally.durations["app.send"][-2] + sum(tally.durations["app.send"][:-2]) == 20000


def test_label_sets_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(metrics, "MAX_SERIES", 3)
    tally = Tally()
    for n in range(10):
        tally.attempt(f"app.task{n}", "default", "succeeded", 0.001, 0.0)
        tally.count_enqueued(f"app.task{n}", 1)
    assert len(tally.finished) == 4 and tally.finished[("other", "default", "succeeded")] == 7
    assert len(tally.durations) == 4 and len(tally.enqueued) == 4
    # Keys counted before the bound keep counting under their own name.
    tally.count("app.task0", "default", "succeeded")
    assert tally.finished[("app.task0", "default", "succeeded")] == 2


def test_a_read_that_finds_no_whole_half_gives_what_this_process_read_last() -> None:
    # A reader starved of the CPU may find both halves mid-write in every pass while a
    # writer publishes without pause: an empty read would be a counter reset to Prometheus.
    table = MetricsTable(1)
    publisher = Publisher(table, 0)
    publisher.tally.count("app.send", "email", "dead")
    publisher.publish()
    publisher.publish()
    assert table.read(0)["finished"] == [["app.send", "email", "dead", 1]]
    for half in (0, 1):
        table.seq.begin(table._offset(0, half))
    assert table.read(0)["finished"] == [["app.send", "email", "dead", 1]]
    # A region never written is still empty.
    assert MetricsTable(1).read(0) == {}
