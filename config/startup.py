"""Start-up with the cyclic garbage collector paused.

Loading the project builds about 120,000 objects (modules, classes, models) that live as long
as the process. The collector, left on, walks them again and again while they are created
and finds nothing to free: about a tenth of a process's start-up (a worker's, from spawn to
its first job). ``manage.py`` and ``config/wsgi.py`` pause it before Django loads; the first
app's ``ready()`` (``config.apps.AdminConfig``, after every app's models are imported)
resumes it, with what was loaded moved out of the collector's sight (``gc.freeze``): it is
never garbage, and the executors a worker forks then do not copy those pages to touch
the collector's bookkeeping in them.
"""

from __future__ import annotations

import gc

_paused = False


def pause_collector() -> None:
    """Turn the collector off until ``resume_collector``, unless it is off already."""
    global _paused
    if gc.isenabled():
        gc.disable()
        _paused = True


def resume_collector() -> None:
    """Turn the collector back on if ``pause_collector`` turned it off; else do nothing."""
    global _paused
    if _paused:
        _paused = False
        gc.freeze()
        gc.enable()
