# Shared by scripts/run and scripts/test: find Python 3.12+, make the virtualenv, make sure
# PostgreSQL answers and the project's database exists.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$ROOT/.venv"
export PYTHONPATH="$ROOT"

find_python() {
  local candidate
  for candidate in python3.13 python3.12; do
    if command -v "$candidate" >/dev/null 2>&1 && "$candidate" -c 'import sys' 2>/dev/null; then
      command -v "$candidate"; return 0
    fi
  done
  for candidate in "$HOME"/.pyenv/versions/3.13*/bin/python3 "$HOME"/.pyenv/versions/3.12*/bin/python3 \
                   /root/.pyenv/versions/3.13*/bin/python3 /usr/local/bin/python3.13; do
    if [ -x "$candidate" ]; then echo "$candidate"; return 0; fi
  done
  if command -v python3 >/dev/null 2>&1 && python3 -c 'import sys; sys.exit(sys.version_info < (3, 12))'; then
    command -v python3; return 0
  fi
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
}

# DATABASE_URL defaults to the local server; its database is created when missing.
ensure_database() {
  "$VENV/bin/python" - <<'PY'
import os, subprocess, sys, time
from pathlib import Path
import environ
import psycopg

env = environ.Env()
environ.Env.read_env(Path(os.environ["PYTHONPATH"]) / ".env", overwrite=False)
db = env.db_url("DATABASE_URL", default="postgres://postgres@127.0.0.1:5432/jobqueue")
params = dict(user=db["USER"] or None, password=db["PASSWORD"] or None,
              host=db["HOST"] or None, port=db["PORT"] or None, connect_timeout=3)
local = db["HOST"] in ("", "127.0.0.1", "localhost")

def connect(name):
    return psycopg.connect(dbname=name, autocommit=True, **params)

for attempt in range(30):
    try:
        admin = connect("postgres")
        break
    except psycopg.OperationalError as exc:
        if attempt == 0 and local:
            print("==> PostgreSQL is not answering; starting the local cluster")
            versions = sorted(os.listdir("/etc/postgresql")) if os.path.isdir("/etc/postgresql") else []
            if versions:
                subprocess.run(["pg_ctlcluster", "--skip-systemctl-redirect", versions[-1], "main", "start"])
        if attempt == 29:
            sys.exit(f"PostgreSQL at {db['HOST']}:{db['PORT']} is not reachable: {exc}")
        time.sleep(1)
with admin:
    if not admin.execute("SELECT 1 FROM pg_database WHERE datname = %s", [db["NAME"]]).fetchone():
        print(f"==> creating database {db['NAME']}")
        admin.execute(f'CREATE DATABASE "{db["NAME"]}"')
PY
}

# The browser tests drive Debian's Chromium (Playwright cannot download its own here).
ensure_chromium() {
  if command -v chromium >/dev/null 2>&1; then return 0; fi
  echo "==> installing chromium (for the browser tests)"
  local sudo=""
  if [ "$(id -u)" != 0 ]; then sudo="sudo"; fi
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq chromium >/dev/null
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
