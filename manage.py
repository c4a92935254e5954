#!/bin/sh
# fmt: off
''''true
# `./manage.py ...` runs with the project's virtualenv from wherever it is called: the shell
# reads these lines and Python skips them (one string). `.venv/bin/python manage.py` is the same.
venv_python="$(dirname -- "$0")/.venv/bin/python"
if [ ! -x "$venv_python" ]; then
  echo "manage.py: no virtualenv at $venv_python yet; scripts/run or scripts/test makes it" >&2
  exit 1
fi
exec "$venv_python" "$0" "$@"
'''
# fmt: on

import os
import sys


def main() -> None:
    from config.startup import pause_collector

    pause_collector()
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()
