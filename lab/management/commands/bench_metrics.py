import resource
import socket
import statistics
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from lab import benchmark
from lab.management.bench import add_force_option, require_bench_database


class Command(BaseCommand):
    help = (
        "Drain rate of no-op jobs with a worker's metrics off and on (--metrics-port), median of "
        "--runs, alternating (this database is emptied)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--runs", type=int, default=3)
        parser.add_argument("--drain", type=int, default=20_000, help="jobs drained per measurement")
        parser.add_argument("--concurrency", type=int, default=2, help="executor processes")
        add_force_option(parser)

    def handle(self, *args: Any, **options: Any) -> None:
        require_bench_database(options, empties="the job table", suite="metrics")
        if options["runs"] < 1 or options["drain"] < 1 or options["concurrency"] < 1:
            raise CommandError("--runs, --drain and --concurrency must be at least 1")
        rates: dict[str, list[float]] = {"off": [], "on": []}
        # CPU time of the worker's processes per job: steadier than rates on a busy machine.
        cpu: dict[str, list[float]] = {"off": [], "on": []}
        for run in range(1, options["runs"] + 1):
            self.stderr.write(f"run {run}/{options['runs']}")
            # Alternating which goes first, so that neither always meets a warmer table.
            for mode in ("off", "on") if run % 2 else ("on", "off"):
                env = {"JOBS_METRICS_PORT": str(_free_port()) if mode == "on" else "0"}
                before = _children_cpu()
                rate, _ = benchmark.measure_drain(options["drain"], options["concurrency"], env=env)
                cpu[mode].append((_children_cpu() - before) / options["drain"] * 1e6)
                rates[mode].append(rate)
        off, on = statistics.median(rates["off"]), statistics.median(rates["on"])
        self.stdout.write(
            f"drain of {options['drain']:,} no-op jobs, {options['concurrency']} executors, "
            f"median of {options['runs']}"
        )
        for mode, median in (("metrics off", off), ("metrics on", on)):
            runs = ", ".join(f"{rate:,.0f}" for rate in rates[mode.split()[1]])
            self.stdout.write(f"{mode:<14}{median:>12,.0f} jobs/s   runs: {runs}")
        self.stdout.write(f"{'cost':<14}{(off - on) / off * 100:>11.1f} %   (budget: 5 %)")
        cpu_off, cpu_on = statistics.median(cpu["off"]), statistics.median(cpu["on"])
        self.stdout.write(
            f"worker CPU per job: {cpu_off:.1f} µs off, {cpu_on:.1f} µs on "
            f"({(cpu_on - cpu_off) / cpu_off * 100:+.1f} %; start-up included)"
        )


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])
