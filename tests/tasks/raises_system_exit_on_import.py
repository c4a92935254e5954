"""Its import calls sys.exit(), as a module that checks its configuration at import might.
Only workers import it, by the dotted path of a job row: tests never do."""

import sys

sys.exit(3)


def boom() -> None:
    """Never reached."""
