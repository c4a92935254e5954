"""Settings for the test run: the project's own, signed with a key made for this run.

With DEBUG off the project refuses the built-in development key, as a public site must.
The key goes into the environment before the settings are read, so the manage.py
subprocesses the tests start (runworker, check --deploy, mypy's Django plugin) inherit the
same one, and a link signed by a worker verifies in the test's live server.
"""

import atexit
import os
import secrets
import shutil
import tempfile

os.environ.setdefault("SECRET_KEY", f"test-run-{secrets.token_urlsafe(48)}")
# Uploads and result files of this run, shared with the workers it starts (which inherit
# the variable), removed when the process that made the folder exits.
if "MEDIA_ROOT" not in os.environ:
    os.environ["MEDIA_ROOT"] = tempfile.mkdtemp(prefix="jobqueue-test-media-")
    atexit.register(shutil.rmtree, os.environ["MEDIA_ROOT"], ignore_errors=True)

# The development outbox of this run (worker subprocesses inherit it), never the checkout's.
if "EMAIL_OUTBOX_DIR" not in os.environ:
    os.environ["EMAIL_OUTBOX_DIR"] = tempfile.mkdtemp(prefix="jobqueue-test-outbox-")
    atexit.register(shutil.rmtree, os.environ["EMAIL_OUTBOX_DIR"], ignore_errors=True)

# The lab's commands (benchmark, chaos, fleet, bench_*) are tested too; the manage.py
# subprocesses the tests start inherit this.
os.environ.setdefault("JOBS_LAB", "true")

from config.settings import *  # noqa: F403
