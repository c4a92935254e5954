"""CSV result files that a spreadsheet opens as data, never as formulas.

Every CSV the project writes goes through ``csv_result_writer``. A cell that starts with
``=``, ``+``, ``-``, ``@``, a tab or a carriage return is one Excel, LibreOffice and Google
Sheets may run as a formula (OWASP "CSV Injection": ``=HYPERLINK(...)`` leaks data, DDE runs
programs), so such a text cell is written with a leading apostrophe, which spreadsheets
show as text and do not display. Numbers are left alone: a negative number is not text.
"""

from __future__ import annotations

import contextlib
import csv
import io
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from .files import ResultFile, result_file_writer

FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def spreadsheet_safe(value: Any) -> Any:
    """``value`` as a cell no spreadsheet runs: text starting like a formula gets a ``'``."""
    if isinstance(value, str) and value.startswith(FORMULA_STARTS):
        return "'" + value
    return value


@dataclass
class SafeCsvWriter:
    """A csv.writer whose every cell goes through ``spreadsheet_safe``."""

    writer: Any

    def writerow(self, row: Iterable[Any]) -> None:
        self.writer.writerow([spreadsheet_safe(value) for value in row])


@contextlib.contextmanager
def csv_result_writer(job_id: uuid.UUID | str, filename: str) -> Iterator[tuple[SafeCsvWriter, ResultFile]]:
    """A job's CSV result file (jobs/files.py), UTF-8, written row by row through a
    SafeCsvWriter; return ``{"file": out.entry, ...}`` from the handler after the block."""
    with result_file_writer(job_id, filename) as out:
        assert out.file is not None
        text = io.TextIOWrapper(out.file, encoding="utf-8", newline="")
        yield SafeCsvWriter(csv.writer(text)), out
        text.flush()
        text.detach()
