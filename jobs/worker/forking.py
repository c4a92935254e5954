"""How the supervisor forks its children: with its signals blocked until the child has its
own handlers, so that a signal never runs the supervisor's handler in a child (it would
signal the child's siblings) nor goes missing in the parent."""

from __future__ import annotations

import logging
import os
import signal
from collections.abc import Callable

from .. import otel

logger = logging.getLogger("jobs.worker")

HANDLED_SIGNALS = {signal.SIGTERM, signal.SIGINT, signal.SIGCHLD}


def fork_child(target: Callable[[], int]) -> int:
    """Fork a child that runs ``target`` and exits with its code; the child's pid."""
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, HANDLED_SIGNALS)
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            signal.set_wakeup_fd(-1)
            for signum in HANDLED_SIGNALS:
                signal.signal(signum, signal.SIG_DFL)
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
            code = target()
        except BaseException:
            logger.exception("event=child_crashed")
        finally:
            otel.flush()
            logging.shutdown()
            os._exit(code)
    signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
    return pid
