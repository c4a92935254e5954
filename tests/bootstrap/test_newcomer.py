"""The newcomer's path, from a fresh copy of the project (what a clone holds, plus work not yet
committed; no .venv, no .data): ``scripts/run`` with DATABASE_URL on a port where nothing
answers makes its own virtualenv and PostgreSQL cluster and serves the web app; a task
written as the README's "Five-minute tour" says, while it runs, runs; one added to that
module later runs too (the worker restarts), and a Ctrl-C stops everything with each
process's own shutdown lines and exit 0.

Nothing here uses the test database: the copy has a database of its own.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.support.workers import wait_until

pytestmark = pytest.mark.bootstrap

# Creating the virtualenv and installing the requirements dominate the start.
START_TIMEOUT = 600.0

ADDED_TASK = """

@task
def shout(name: str) -> str:
    return f"HELLO, {name.upper()}"
"""


def copy_of_checkout(dest: Path) -> None:
    """The files a clone of this checkout would have, plus uncommitted and untracked work
    that git does not ignore, with their modes (scripts/run must stay executable)."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout
    for name in filter(None, listed.split(b"\0")):
        source = ROOT / os.fsdecode(name)
        if source.is_file():  # a tracked file deleted in the work tree is not listed as gone
            target = dest / os.fsdecode(name)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)


def readme_task_module() -> str:
    """The demo/tasks.py of the README's "Five-minute tour", as the README shows it."""
    readme = (ROOT / "README.md").read_text()
    section = readme.partition("## Five-minute tour")[2].partition("\n## ")[0]
    for block in re.findall(r"```python\n(.*?)```", section, flags=re.S):
        lines = block.splitlines()
        indent = len(lines[0]) - len(lines[0].lstrip())
        code = "\n".join(line[indent:] for line in lines) + "\n"
        if code.startswith("# demo/tasks.py"):
            return code
    raise AssertionError('the README\'s "Five-minute tour" has no "# demo/tasks.py" block')


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def listening(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


def get(url: str) -> tuple[int, bytes]:
    try:
        # Only ever http://127.0.0.1:<port> of the copy's own web server.
        with urllib.request.urlopen(url, timeout=5) as response:  # noqa: S310
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()
    except OSError:
        return 0, b""


def processes_in(folder: Path) -> list[int]:
    """Processes whose working folder or command line is in ``folder``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        with contextlib.suppress(OSError):
            cwd = os.readlink(entry / "cwd")
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            if cwd.startswith(str(folder)) or str(folder) in cmdline:
                found.append(int(entry.name))
    return found


class Run:
    """``scripts/run`` of the copy, in the background, its output in a file."""

    def __init__(self, checkout: Path, env: dict[str, str]) -> None:
        self.checkout = checkout
        self.env = env
        self.log_path = checkout.parent / "run.log"
        self._log = self.log_path.open("w")
        self.proc = subprocess.Popen(
            [str(checkout / "scripts" / "run")],
            cwd=checkout,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )

    def log(self) -> str:
        return self.log_path.read_text()

    def wait_for_log(self, pattern: str, *, count: int = 1, timeout: float = 60.0) -> None:
        def seen() -> bool:
            if self.proc.poll() is not None:
                raise AssertionError(f"scripts/run exited with {self.proc.returncode}:\n{self.log()}")
            return len(re.findall(pattern, self.log(), flags=re.M)) >= count

        wait_until(seen, timeout=timeout, interval=0.2, message=f"{pattern!r} x{count}\n{self.log()}")

    def manage(self, *args: str) -> str:
        """``./manage.py ARGS`` in the copy, as the README says to call it."""
        done = subprocess.run(
            [str(self.checkout / "manage.py"), *args],
            cwd=self.checkout,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout

    def close(self) -> None:
        """Whatever happened, leave nothing of the copy running."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=60)
        for pid in processes_in(self.checkout):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        self._log.close()


@pytest.fixture
def newcomer() -> Iterator[tuple[Run, int, int]]:
    # Not under pytest's tmp_path: as root the cluster runs as the postgres user, who must
    # reach it, and every pytest that starts makes /tmp/pytest-of-<user> 0700 again.
    checkout = Path(tempfile.mkdtemp(prefix="jobqueue-newcomer-")) / "jobqueue"
    copy_of_checkout(checkout)
    db_port, web_port = free_port(), free_port()
    assert not listening(db_port)
    env = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith(("DJANGO_", "JOBS_", "POSTGRES_", "PYTEST_", "VIRTUAL_ENV"))
        and name not in ("DATABASE_URL", "PYTHONPATH", "PORT", "DEBUG")
    }
    env.update(
        DATABASE_URL=f"postgres://postgres@127.0.0.1:{db_port}/jobqueue",
        PORT=str(web_port),
        DEBUG="true",
        ADMIN_PASSWORD="change-me",
    )
    run = Run(checkout, env)
    try:
        yield run, db_port, web_port
    finally:
        run.close()
        print(f"--- scripts/run ---\n{run.log()}")
        shutil.rmtree(checkout.parent)


def enqueue(run: Run, call: str) -> str:
    """Enqueue from ``manage.py shell`` as a public job, so that the API shows its status."""
    out = run.manage("shell", "-v", "0", "-c", f"from demo import tasks; print(tasks.{call}.id)")
    return out.strip().splitlines()[-1]


def wait_for_success(web: str, job_id: str) -> None:
    def status() -> bool:
        code, body = get(f"{web}/api/jobs/{job_id}")
        assert code in (0, 200), (code, body)
        return code == 200 and json.loads(body)["status"] in ("succeeded", "dead")

    wait_until(status, timeout=60, interval=0.2, message=f"job {job_id} to finish")
    _, body = get(f"{web}/api/jobs/{job_id}")
    assert json.loads(body)["status"] == "succeeded", body


def test_scripts_run_from_nothing_to_ctrl_c(newcomer: tuple[Run, int, int]) -> None:
    run, db_port, web_port = newcomer
    web = f"http://127.0.0.1:{web_port}"

    run.wait_for_log("^==> web on ", timeout=START_TIMEOUT)
    wait_until(lambda: get(f"{web}/admin/login/")[0] == 200, timeout=60, interval=0.2, message="web app")
    run.wait_for_log(r"^worker +\| .*event=worker_started")

    log = run.log()
    assert "==> creating virtualenv in .venv" in log
    assert f"==> nothing answers on 127.0.0.1:{db_port}: making a private PostgreSQL" in log
    assert "==> DEBUG is on: the worker and the web server restart when Python files change" in log

    # As the README goes: the task is written once everything runs, in a folder new to the
    # reloader, which must watch it from then on.
    (run.checkout / "demo").mkdir()
    (run.checkout / "demo" / "__init__.py").write_text("")
    (run.checkout / "demo" / "tasks.py").write_text(readme_task_module())
    wait_for_success(web, enqueue(run, 'greet.using(public=True).enqueue("world")'))

    # A task added while the worker runs: without the restart it would be unknown to it.
    # The new folder's files restart the worker too (it may have imported them before the
    # watcher's next look); what counts is a restart seen after this edit.
    with (run.checkout / "demo" / "tasks.py").open("a") as module:
        module.write(ADDED_TASK)
    reload, started = r"^worker +\| .*event=reload changed=demo/", r"^worker +\| .*event=worker_started"
    reloads = len(re.findall(reload, run.log(), flags=re.M))
    run.wait_for_log(reload, count=reloads + 1)
    run.wait_for_log(started, count=len(re.findall(reload, run.log(), flags=re.M)) + 1)
    wait_for_success(web, enqueue(run, 'shout.using(public=True).enqueue("world")'))

    run.proc.send_signal(signal.SIGINT)  # what Ctrl-C on the terminal sends scripts/run
    assert run.proc.wait(timeout=90) == 0, run.log()

    log = run.log()
    for line in (
        r"^==> stopping \(Ctrl-C again to stop at once\)$",
        r"^worker +\| .*event=shutdown_requested signal=SIGTERM",
        r"^worker +\| .*event=worker_stopped",
        r"^worker +\| .*event=reloader_stopped code=0",
        r"^scheduler +\| .*event=scheduler_stopped",
        r"^web +\| .*Shutting down: Master",
        r"^==> web, worker and scheduler stopped$",
        r"^==> stopping the private PostgreSQL \(\.data/postgres-\d+-\d+\)$",
    ):
        assert re.search(line, log, flags=re.M), line
    assert "shutdown_forced" not in log
    assert not listening(web_port) and not listening(db_port)
    assert processes_in(run.checkout) == []
