"""Pure parts of issue 16: progress records and percentages, and how an import's file is
cut into chunks (record boundaries outside quotes) and its rows checked."""

from __future__ import annotations

import io

import pytest

from jobs.progress import percent, progress_record, view
from reports.importing import Chunk, scan


def test_percent_rounds_down_so_100_means_finished() -> None:
    assert percent(999, 1000) == 99
    assert percent(1000, 1000) == 100
    assert percent(0, 0) == 100
    assert percent(5, None) is None


def test_a_record_keeps_what_readers_need() -> None:
    record = progress_record(3, 4, "three\x00 of four")
    assert record == {"done": 3, "total": 4, "message": "three of four"}
    assert view({**record, "updated_at": "t"}) == {
        "done": 3, "total": 4, "percent": 75, "message": "three of four", "updated_at": "t"
    }  # fmt: skip
    assert view(None) is None and view({"junk": 1}) is None
    with pytest.raises(ValueError, match="more than total"):
        progress_record(5, 4)


def _scan(data: bytes, rows: int) -> list[Chunk]:
    return scan(io.BytesIO(data), chunk_rows=rows)


def test_chunks_end_at_record_boundaries_outside_quotes() -> None:
    data = b'name,email\na,a@x.io\n"b\nstill b",b@x.io\nc,c@x.io\n\nd,d@x.io\ne,e@x.io\n'
    chunks = _scan(data, 2)
    assert [(c.first_line, c.rows) for c in chunks] == [(2, 2), (4, 2), (7, 1)]
    # The ranges cover every byte after the header, in order, without overlap.
    assert chunks[0].start == len(b"name,email\n")
    assert [c.start for c in chunks[1:]] == [c.end for c in chunks[:-1]]
    assert chunks[-1].end == len(data)
    assert data[chunks[0].start : chunks[0].end] == b'a,a@x.io\n"b\nstill b",b@x.io\n'


def test_an_unclosed_quote_makes_the_rest_one_record_and_a_file_without_rows_no_chunk() -> None:
    chunks = _scan(b'name,email\na,a@x.io\n"b,b@x.io\nc,c@x.io\n', 10)
    assert [(c.first_line, c.rows) for c in chunks] == [(2, 2)]
    assert _scan(b"name,email\n", 10) == []
    assert _scan(b"name,email\n\n\n", 10) == []
    # No newline after the last row.
    assert [(c.rows, c.end) for c in _scan(b"name,email\na,a@x.io", 10)] == [(1, 19)]
