"""The job detail page's history: every run of the job in order, numbered across replays,
and each failed run's traceback split so that what the reader needs comes first.

Runs come from the row alone: ``errors`` holds one entry per failed attempt, ``edits`` one
per replay with the number of errors before it (jobs/store/operator.py), and the current
run, which has no entry until it fails (a success never has one), is read from the row's
attempt, state and times at display time, so the worker's outcome path writes nothing more.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime
from functools import cache
from pathlib import Path
from typing import Any

from ..models import FINISHED_STATES, Job
from . import changelist

# A frame's first line, as the traceback module writes it.
_FRAME = re.compile(r'^  File "(?P<path>[^"]+)", line \d+, in ')
# Library frames folded away with the engine's: the framework the handler is called through.
_FOLDED_LIBRARIES = ("django", "asgiref")


@dataclass(frozen=True)
class Traceback:
    """One failed attempt's traceback as the page shows it: the frames of the application's
    own code open, the rest (the engine's, Django's) folded into the full text."""

    app_frames: str
    folded: int
    full: str


@dataclass
class Run:
    number: int
    replay: int  # 0 before the first replay
    attempt: Any
    worker: str
    started: str
    ended: str
    took: str
    outcome: str  # "failed", or the job's state for its current run
    exception: str = ""
    message: str = ""
    traceback: Traceback | None = None


@dataclass
class Replay:
    number: int
    at: str
    by: str
    was: str
    edited: bool


@dataclass
class History:
    entries: list[Run | Replay] = field(default_factory=list)
    runs: int = 0
    replays: int = 0


def history(job: Job, *, worker_name: Any) -> History:
    """Every run of ``job`` (failed ones from ``errors``, then the current one) with the
    replays between them. ``worker_name`` turns a claim token into a name."""
    found = History()
    marks = [e for e in job.edits if isinstance(e.get("errors"), int)]
    current: set[Any] = set()  # attempts failed since the last replay

    def replays_before(index: int) -> None:
        while marks and marks[0]["errors"] <= index:
            mark = marks.pop(0)
            found.replays += 1
            found.entries.append(
                Replay(found.replays, iso_moment(mark.get("at")), mark.get("by") or "?",
                       str(mark.get("was", "")), "args" in mark or "kwargs" in mark)
            )  # fmt: skip
            current.clear()

    for index, error in enumerate(job.errors):
        replays_before(index)
        started = error.get("started_at")
        found.runs += 1
        current.add(error.get("attempt"))
        found.entries.append(
            Run(
                number=found.runs,
                replay=found.replays,
                attempt=error.get("attempt", "?"),
                worker=worker_name(error.get("worker")),
                started=iso_moment(started),
                ended=iso_moment(error.get("at")),
                took=iso_duration(started, error.get("at")),
                outcome="failed",
                exception=exception_name(error.get("exception", "")),
                message=error.get("message", ""),
                traceback=split_traceback(error.get("traceback", "")),
            )
        )
    replays_before(len(job.errors))
    if job.attempt and job.attempt not in current and job.last_attempted_at is not None:
        end = job.finished_at if job.state in FINISHED_STATES else None
        found.runs += 1
        found.entries.append(
            Run(
                number=found.runs,
                replay=found.replays,
                attempt=job.attempt,
                worker=worker_name(str(job.worker_ids[-1]) if job.worker_ids else None),
                started=changelist.moment(job.last_attempted_at),
                ended=changelist.moment(end),
                took=changelist.seconds(end - job.last_attempted_at) if end else "-",
                outcome=str(job.state),
            )
        )
    return found


def split_traceback(text: str) -> Traceback | None:
    """The application's frames of the exception that ended the attempt (the last one of a
    chain), and how many frames of the engine and framework the full text holds besides."""
    if not text.strip():
        return None
    lines = text.rstrip("\n").splitlines()
    # The last exception of a chain: its traceback starts at the last header.
    start = max((i for i, line in enumerate(lines) if line.startswith("Traceback (most recent call last)")),
                default=0)  # fmt: skip
    app: list[str] = []
    folded = 0
    keep = False
    for line in lines[start:]:
        frame = _FRAME.match(line)
        if frame:
            keep = not is_engine_file(frame["path"])
            folded += not keep
        elif not line.startswith("    "):
            keep = False  # the exception after the last frame: shown on its own
        if keep:
            app.append(line)
    earlier = (_FRAME.match(line) for line in lines[:start])
    folded += sum(1 for frame in earlier if frame and is_engine_file(frame["path"]))
    return Traceback(app_frames="\n".join(app), folded=folded, full=text.rstrip("\n"))


def is_engine_file(path: str) -> bool:
    """A file of this package (by its path inside it, wherever the worker had it installed)
    or of the framework that calls handlers."""
    path = path.replace("\\", "/")
    if any(f"/{name}/" in path for name in ("site-packages", "dist-packages")):
        library = path.split("-packages/", 1)[1].split("/", 1)[0]
        if library in _FOLDED_LIBRARIES:
            return True
    return any(path.endswith(own) for own in _own_files())


@cache
def _own_files() -> frozenset[str]:
    """The engine's modules (jobs/) as "/jobs/worker/attempt.py": a traceback from a worker
    installed elsewhere names them under another prefix."""
    root = Path(__file__).resolve().parent.parent
    return frozenset(f"/{root.name}/{path.relative_to(root).as_posix()}" for path in root.rglob("*.py"))


def exception_name(path: str) -> str:
    """The class as a traceback's last line names it: dotted, but a builtin bare."""
    return path.removeprefix("builtins.")


def iso_moment(value: Any) -> str:
    if not value:
        return "-"
    try:
        return changelist.moment(datetime.fromisoformat(str(value)))
    except ValueError:
        return str(value)


def iso_duration(start: Any, end: Any) -> str:
    if not start or not end:
        return "-"
    try:
        return changelist.seconds(datetime.fromisoformat(str(end)) - datetime.fromisoformat(str(start)))
    except ValueError:
        return "-"


def run_label(job: Job, found: History) -> str:
    """Where the job's current attempt stands, for its state line."""
    attempt = f"attempt {job.attempt} of {job.max_attempts}"
    if not found.replays:
        return attempt
    return f"{attempt} after replay {found.replays} (run {found.runs} in all)"
