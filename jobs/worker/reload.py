"""``runworker --reload``: restart the worker when the project's Python files change.

The process started with ``--reload`` runs no jobs. It watches files with Django's own
autoreloader, as ``runserver`` does (the modules it has loaded, whatever receivers of
``autoreload_started`` add, such as template folders, and here also every ``.py`` file in
the project's folders, since the worker imports task modules this process never loads, and
folders made while it runs), and runs the real worker as a child: the same command line,
with RELOADED_CHILD set. A file that appears while it runs restarts the worker as a change
does: the worker may have imported it already (a job of a task module written a moment
ago can run before this process next looks, a second at most), and an edit made before
that look would otherwise never be seen as one.

On a change it sends the child SIGTERM, so the worker stops as on any shutdown (running
jobs finish within the shutdown timeout, the rest go back to the queue without using an
attempt), waits for it and starts a new one, which imports the changed code. SIGINT or
SIGTERM stops the child the same way and the parent exits with the child's status; a second
signal is passed on too, and the worker takes it as "stop at once".

The child has a process group of its own: a Ctrl-C on the terminal reaches the parent
alone, which passes one SIGTERM on (were the terminal's SIGINT to reach the child as well,
it would count two signals). Linux sends the child SIGTERM if the parent dies.
"""

from __future__ import annotations

import ctypes
import logging
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from django.utils import autoreload

logger = logging.getLogger("jobs.worker")

RELOADED_CHILD = "JOBS_RELOADED_CHILD"


def is_reloaded_child() -> bool:
    """Whether this process is the worker a reloader started (which must not reload again)."""
    return os.environ.get(RELOADED_CHILD) == "true"


def project_folders(root: Path) -> list[Path]:
    """The folders of ``root`` whose Python files are the project's own: not hidden (.venv,
    .data, .git) and not a virtualenv of another name."""
    return sorted(
        path
        for path in root.iterdir()
        if path.is_dir()
        and not path.name.startswith((".", "__"))
        and path.name != "node_modules"
        and not (path / "pyvenv.cfg").exists()
    )


class Reloader:
    def __init__(self, *, root: Path, argv: list[str]) -> None:
        self.root = root
        self.argv = argv
        self.child: subprocess.Popen[bytes] | None = None
        self.child_stopping = False
        self.signals = 0
        self.last_code = 0
        self.changed: list[Path] = []
        self.pid = os.getpid()
        self._prctl = _load_prctl()

    def run(self) -> int:
        # Stat polling, as runserver does without watchman: it takes folders added while it
        # runs (watch_dir before each tick), such as the app a newcomer creates next.
        watcher = _StatWatcher()
        watcher.watch_dir(self.root, "*.py")
        # Our receiver answers every change, so the autoreloader never exits this process.
        autoreload.file_changed.connect(self._on_change, dispatch_uid="jobs.worker.reload")
        autoreload.autoreload_started.send(sender=watcher)
        signal.signal(signal.SIGTERM, self._on_signal)
        signal.signal(signal.SIGINT, self._on_signal)
        logger.info(
            "event=reloader_started pid=%d watcher=%s root=%s", os.getpid(), type(watcher).__name__, self.root
        )
        self._start()
        ticks = watcher.tick()
        while not self.signals:
            for folder in project_folders(self.root):
                watcher.watch_dir(folder, "**/*.py")
            next(ticks)  # about a second; changes arrive through _on_change
            if self.signals:
                break
            if self.changed:
                logger.info("event=reload changed=%s", _relative(self.changed[0], self.root))
                self.changed.clear()
                self._stop_child()
                if not self.signals:
                    self._start()
            elif self.child is not None and self.child.poll() is not None:
                logger.warning(
                    "event=worker_exited code=%d next='restart on a file change'", self.child.returncode
                )
                self._wait_child()
        code = self._wait_child()
        logger.info("event=reloader_stopped code=%d", code)
        return code

    def _start(self) -> None:
        self.child_stopping = False
        self.child = subprocess.Popen(
            self.argv,
            env={**os.environ, RELOADED_CHILD: "true"},
            process_group=0,
            # preexec_fn is unsafe only with threads, and this process starts none.
            preexec_fn=self._die_with_parent,
        )

    def _die_with_parent(self) -> None:
        # Runs in the child between fork and exec; self.pid is still the parent's.
        if self._prctl is not None:
            self._prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
        if os.getppid() != self.pid:
            os._exit(1)  # the parent died before the prctl: nobody would tell us

    def _stop_child(self) -> int:
        if self.child is not None and not self.child_stopping:
            self.child_stopping = True
            self.child.send_signal(signal.SIGTERM)
        return self._wait_child()

    def _wait_child(self) -> int:
        """The child's exit status once it has ended (the last child's, if none runs)."""
        if self.child is not None:
            # A signal meanwhile runs _on_signal and the wait goes on (PEP 475).
            code = self.child.wait()
            if self.child_stopping and code == -signal.SIGTERM:
                # Told to stop while it was still starting (a stop just after a restart),
                # before its handler was set: the signal ended it, as it was asked to end.
                code = 0
            self.last_code = code
            self.child = None
        return self.last_code

    def _on_signal(self, signum: int, frame: object) -> None:
        self.signals += 1
        # The first stops the child gracefully, unless a restart has already asked it to;
        # a second is passed on, for the worker to stop at once.
        if self.child is not None and (self.signals > 1 or not self.child_stopping):
            self.child_stopping = True
            self.child.send_signal(signal.SIGTERM)

    def _on_change(self, sender: object, file_path: Path, **kwargs: Any) -> bool:
        self.changed.append(Path(file_path))
        return True


class _StatWatcher(autoreload.StatReloader):
    """Django's stat polling, except that a file first seen after the first look is a
    change (Django's takes it as the first mtime to compare with)."""

    def tick(self) -> Iterator[None]:
        mtimes: dict[Path, float] = {}
        first_look = True
        while True:
            for path, mtime in self.snapshot_files():
                before = mtimes.get(path)
                mtimes[path] = mtime
                if before is None and first_look:
                    continue
                if before is None or mtime > before:
                    self.notify_file_changed(path)
            first_look = False
            time.sleep(self.SLEEP_TIME)
            yield


def run_with_reload(*, root: Path) -> int:
    """Run this command line's worker as a child, restarted on every change under ``root``."""
    return Reloader(root=root, argv=[str(a) for a in autoreload.get_child_arguments()]).run()


def _relative(path: Path, root: Path) -> str:
    try:
        return str(path.relative_to(root))
    except ValueError:
        return str(path)


def _load_prctl() -> Any:
    try:
        return ctypes.CDLL("libc.so.6", use_errno=True).prctl
    except OSError:
        return None
