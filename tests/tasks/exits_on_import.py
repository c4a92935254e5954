"""Its import ends the process that imports it, as a segfault in an extension module would.
Only workers import it, by the dotted path of a job row: tests never do."""

import os

os._exit(7)


def boom() -> None:
    """Never reached."""
