"""The stages of an import: split the stored file into chunks, upsert each chunk, summarize.

* ``split`` (one job) scans the file once for record boundaries (a newline outside quotes)
  and, in one transaction with the import's move to ``running``, enqueues one job per chunk
  of ``REPORTS_IMPORT_CHUNK_ROWS`` rows with its byte range: a retried split finds the
  import running and enqueues nothing again.
* ``run_chunk`` reads its byte range, checks each row (a bad row is rejected with its
  reason, never fatal) and, in one transaction, records the chunk (unique per import and
  index), upserts the good rows (``INSERT ... ON CONFLICT (owner, lower(email)) DO
  UPDATE`` only where something differs), stores the rejections and adds its counts to
  the import. A chunk retried after it committed finds its record and does nothing; one
  killed before it committed left nothing. The chunk that completes the set enqueues the
  summary, in the same transaction (the engine's dedupe key makes it one job).
* ``summarize`` writes the rejected rows as a CSV result file of its own job, marks the
  import finished and deletes the uploaded file. Every row the scan counted is then stored
  or rejected with its reason; should any not have been read, the import says how many
  (``Import.unread``) and its total is never lowered to hide them.
"""

from __future__ import annotations

import csv
import io
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO, Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.files import File
from django.core.files.storage import default_storage
from django.core.validators import validate_email
from django.db import connection, transaction
from django.template.defaultfilters import pluralize
from django.utils import timezone
from django.utils.translation import ngettext

from jobs.csvfiles import csv_result_writer
from jobs.ownership import owner_key
from jobs.progress import JobContext

from .countries import HOW_TO_WRITE, country_code
from .exceptions import UnknownCountry
from .models import Import, ImportChunk, ImportRejection, ImportStatus

PHONE_CHARACTERS = frozenset("0123456789+-(). ")
# Characters of a line that cannot be read kept with its rejection (the file has the rest).
UNREADABLE_KEPT = 1000
# The rejected-rows file's last column: a line that does not fit the header, as written.
UNFIT_COLUMN = "text of a line that does not fit"


@dataclass(frozen=True)
class Chunk:
    start: int
    end: int
    # Record number of the chunk's first record (the header is 1).
    first_line: int
    rows: int


def _spans(handle: IO[bytes]) -> Iterator[tuple[int, int, bool]]:
    """Each record's byte range and whether it is a row. A record ends at a line break (LF,
    CR or CRLF, as the csv module reads them) outside quotes: the count of quote characters
    so far in the record is even (RFC 4180 doubles quotes inside quoted fields). A blank
    line is not a row. A quote never closed makes the rest of the file one record, a row
    (which its chunk rejects). The split and every chunk use this, so they agree."""
    offset = start = quotes = 0
    # File's lines end at CR as well as LF (a plain binary file's end only at LF).
    for text in File(handle):
        quotes += text.count(b'"')
        offset += len(text)
        if quotes % 2:
            continue  # a newline inside a quoted field: the record goes on
        yield start, offset, bool(text.strip(b"\r\n")) or offset - start != len(text)
        start, quotes = offset, 0
    if offset > start:
        yield start, offset, True


def scan(
    handle: IO[bytes], *, chunk_rows: int, context: JobContext | None = None, size: int = 0
) -> list[Chunk]:
    """Chunk boundaries of a CSV file, at record boundaries (``_spans``). The header is skipped."""
    chunks: list[Chunk] = []
    line = end = 0
    start: int | None = None
    first = rows = 0
    for began, end, is_row in _spans(handle):
        line += 1
        if line == 1:
            continue  # the header
        if start is None:
            start, first = began, line
        rows += is_row
        if rows >= chunk_rows:
            chunks.append(Chunk(start, end, first, rows))
            start, rows = None, 0
        if context is not None and line % 20_000 == 0:
            context.set_progress(end, max(size, end), "reading the file")
    if start is not None and rows:
        chunks.append(Chunk(start, end, first, rows))
    return chunks


def split(import_id: str, *, context: JobContext) -> dict[str, Any]:
    from .tasks import import_chunk

    record = Import.objects.select_related("owner").get(id=import_id)
    if record.status != ImportStatus.QUEUED:
        return {"import": import_id, "chunks": record.chunk_count, "already": True}
    with default_storage.open(record.stored_name, "rb") as handle:
        chunks = scan(
            handle, chunk_rows=settings.REPORTS_IMPORT_CHUNK_ROWS, context=context, size=record.size
        )
    total = sum(chunk.rows for chunk in chunks)
    owner = owner_key(record.owner)
    with transaction.atomic():
        changed = Import.objects.filter(id=import_id, status=ImportStatus.QUEUED).update(
            status=ImportStatus.RUNNING, total_rows=total, chunk_count=len(chunks)
        )
        if not changed:
            return {"import": import_id, "chunks": record.chunk_count, "already": True}
        if chunks:
            import_chunk.using(owner=owner).enqueue_many(
                [((import_id, n, c.start, c.end, c.first_line), {}) for n, c in enumerate(chunks)]
            )
        else:
            _enqueue_summary(import_id, owner)
    context.set_progress(
        record.size,
        record.size,
        ngettext("%(count)d chunk queued", "%(count)d chunks queued", len(chunks)) % {"count": len(chunks)},
    )
    return {"import": import_id, "chunks": len(chunks), "rows": total}


@dataclass
class Checked:
    good: list[tuple[str, str, str, str]]
    # (line, reason, values)
    rejected: list[tuple[int, str, list[str]]]
    rows: int


def check_rows(records: Iterator[tuple[int, list[str], str]], columns: list[str]) -> Checked:
    """Split a chunk's records (line, values, why they could not be read or "") into good
    rows (name, email, phone, country) and rejections."""
    checked = Checked(good=[], rejected=[], rows=0)
    seen: dict[str, int] = {}
    for line, values, unreadable in records:
        checked.rows += 1
        row, reason = (None, unreadable) if unreadable else _check_row(values, columns)
        if row is not None:
            earlier = seen.get(row[1].lower())
            if earlier is not None:
                reason, row = f"the same email is on line {earlier}", None
            else:
                seen[row[1].lower()] = line
        if row is None:
            checked.rejected.append((line, reason, values))
        else:
            checked.good.append(row)
    return checked


def _check_row(values: list[str], columns: list[str]) -> tuple[tuple[str, str, str, str] | None, str]:
    if len(values) != len(columns):
        return None, (
            f"the line has {len(values)} field{pluralize(len(values))} but the header has "
            f"{len(columns)} ({', '.join(columns)})"
        )
    fields = {column: value.strip() for column, value in zip(columns, values, strict=True)}
    name, email = fields.get("name", ""), fields.get("email", "")
    phone = fields.get("phone", "")
    if not name:
        return None, "name is missing"
    if len(name) > 200:
        return None, "name is longer than 200 characters"
    if not email:
        return None, "email is missing"
    try:
        validate_email(email)
    except ValidationError:
        return None, f"email {email[:100]!r} is not a valid address"
    if len(email) > 254:
        return None, "email is longer than 254 characters"
    if len(phone) > 40 or not set(phone) <= PHONE_CHARACTERS:
        return None, "phone may hold only digits, spaces and + - ( ) . (at most 40)"
    try:
        country = country_code(fields.get("country", ""))
    except UnknownCountry as exc:
        return None, f"{exc} Enter {HOW_TO_WRITE}, or leave it empty."
    return (name, email, phone, country), ""


def _records(data: bytes, first_line: int) -> Iterator[tuple[int, list[str], str]]:
    """A chunk's rows as (line, values, why unreadable or ""), one per row ``scan`` counted.
    Each record is parsed on its own, so one that cannot be read (malformed, a field past the
    csv module's size limit) is rejected alone and the rows after it are still read."""
    line = first_line
    for start, end, is_row in _spans(io.BytesIO(data)):
        if is_row:
            yield line, *_parse(data[start:end])
        line += 1


def _parse(record: bytes) -> tuple[list[str], str]:
    """One record's fields, or its text (shortened) and why it cannot be read."""
    try:
        text = record.decode("utf-8")
    except UnicodeDecodeError:
        return [record.decode("utf-8", "replace")[:UNREADABLE_KEPT]], "the line is not UTF-8 text"
    try:
        rows = list(csv.reader([text]))
    except csv.Error as exc:
        if "field limit" in str(exc):
            reason = f"a field is longer than {csv.field_size_limit():,} characters"
        elif "new-line" in str(exc):
            reason = "a quote is not closed, so this line runs on into the next ones"
        else:
            reason = f"not readable as CSV: {exc}"
        return [text[:UNREADABLE_KEPT]], reason
    if len(rows) > 1:
        return [text[:UNREADABLE_KEPT]], "a quote is not closed, so this line runs on into the next ones"
    return (rows[0] if rows else []), ""


UPSERT = """
    WITH incoming AS (
        SELECT * FROM unnest(%(names)s::text[], %(emails)s::text[], %(phones)s::text[], %(countries)s::text[])
            AS t(name, email, phone, country)
    )
    INSERT INTO reports_customer AS c (owner_id, name, email, phone, country, created_at, updated_at)
    SELECT %(owner)s, name, email, phone, country, statement_timestamp(), statement_timestamp() FROM incoming
    ON CONFLICT (owner_id, lower(email)) DO UPDATE
    SET name = EXCLUDED.name, email = EXCLUDED.email, phone = EXCLUDED.phone, country = EXCLUDED.country,
        updated_at = EXCLUDED.updated_at
    WHERE (c.name, c.email, c.phone, c.country)
          IS DISTINCT FROM (EXCLUDED.name, EXCLUDED.email, EXCLUDED.phone, EXCLUDED.country)
    RETURNING (xmax = 0)
"""


def run_chunk(
    import_id: str, index: int, start: int, end: int, first_line: int, *, context: JobContext
) -> dict[str, Any]:
    record = Import.objects.select_related("owner").get(id=import_id)
    if ImportChunk.objects.filter(job_import_id=record.id, index=index).exists():
        return {"chunk": index, "already": True}
    with default_storage.open(record.stored_name, "rb") as handle:
        handle.seek(start)
        data = handle.read(end - start)
    checked = check_rows(_records(data, first_line), record.columns)
    context.set_progress(
        checked.rows, checked.rows, f"chunk {index}: {checked.rows} row{pluralize(checked.rows)} checked"
    )
    with transaction.atomic(), connection.cursor() as cursor:
        # First, so a concurrent attempt at the same chunk waits here and then finds it done.
        cursor.execute(
            """
            INSERT INTO reports_import_chunk
                (job_import_id, index, rows, inserted, updated, unchanged, rejected, done_at)
            VALUES (%s, %s, %s, 0, 0, 0, %s, statement_timestamp())
            ON CONFLICT DO NOTHING RETURNING id
            """,
            [import_id, index, checked.rows, len(checked.rejected)],
        )
        claimed = cursor.fetchone()
        if claimed is None:
            return {"chunk": index, "already": True}
        inserted = updated = 0
        if checked.good:
            names, emails, phones, countries = (list(column) for column in zip(*checked.good, strict=True))
            cursor.execute(
                UPSERT,
                {
                    "owner": record.owner_id,
                    "names": names,
                    "emails": emails,
                    "phones": phones,
                    "countries": countries,
                },
            )
            flags = [row[0] for row in cursor.fetchall()]
            inserted = sum(flags)
            updated = len(flags) - inserted
        unchanged = len(checked.good) - inserted - updated
        ImportRejection.objects.bulk_create(
            ImportRejection(job_import_id=record.id, line=line, reason=reason, values=values)
            for line, reason, values in checked.rejected
        )
        cursor.execute(
            "UPDATE reports_import_chunk SET inserted = %s, updated = %s, unchanged = %s WHERE id = %s",
            [inserted, updated, unchanged, claimed[0]],
        )
        # Last: the import's row lock is held only until this commit.
        cursor.execute(
            """
            UPDATE reports_import
            SET chunks_done = chunks_done + 1, rows_done = rows_done + %s, inserted = inserted + %s,
                updated = updated + %s, unchanged = unchanged + %s, rejected = rejected + %s
            WHERE id = %s
            RETURNING chunks_done, chunk_count
            """,
            [checked.rows, inserted, updated, unchanged, len(checked.rejected), import_id],
        )
        done, count = cursor.fetchone()
        if done == count:
            _enqueue_summary(import_id, owner_key(record.owner))
    return {
        "chunk": index,
        "rows": checked.rows,
        "inserted": inserted,
        "updated": updated,
        "unchanged": unchanged,
        "rejected": len(checked.rejected),
    }


def _enqueue_summary(import_id: str, owner: str) -> None:
    from .tasks import summarize_import

    result = summarize_import.using(owner=owner, dedupe_key=f"import-summary:{import_id}").enqueue(import_id)
    Import.objects.filter(id=import_id).update(summary_job_id=uuid.UUID(result.id))


def rejected_row(line: int, reason: str, values: list[str], columns: list[str]) -> list[Any]:
    """A rejected row of the rejected-rows file: its values under the header's columns, or,
    for a line that does not fit them (too few or too many fields, or not readable as CSV),
    empty columns and the line's text in the last one, so no value sits under a column
    that is not its own."""
    if len(values) == len(columns):
        return [line, reason, *values, ""]
    return [line, reason, *([""] * len(columns)), _line_text(values)]


def _line_text(values: list[str]) -> str:
    """The text of a line kept as its fields (a line that could not be read is kept as one
    value, its text)."""
    if len(values) == 1:
        return values[0]
    out = io.StringIO()
    csv.writer(out, lineterminator="").writerow(values)
    return out.getvalue()


def summarize(import_id: str, *, job_id: str, context: JobContext) -> dict[str, Any]:
    record = Import.objects.get(id=import_id)
    rejections = (
        ImportRejection.objects.filter(job_import_id=record.id)
        .order_by("line")
        .values_list("line", "reason", "values")
    )
    with csv_result_writer(job_id, "rejected-rows.csv") as (writer, out):
        writer.writerow(["line", "reason", *record.columns, UNFIT_COLUMN])
        for n, (line, reason, values) in enumerate(rejections.iterator(chunk_size=2000)):
            writer.writerow(rejected_row(line, reason, values, record.columns))
            if n % 1000 == 0:
                context.set_progress(n, record.rejected, "writing the rejected rows")
    # total_rows stays what the scan counted: were fewer rows read, the import says so
    # (``unread``) rather than shrinking its total to match.
    Import.objects.filter(id=import_id).update(
        status=ImportStatus.FINISHED, summary_job_id=uuid.UUID(job_id), finished_at=timezone.now()
    )
    context.set_progress(record.rejected, record.rejected, "finished")
    if record.stored_name:
        default_storage.delete(record.stored_name)
    return {
        "file": out.entry,
        "import": import_id,
        "rows": record.rows_done,
        "inserted": record.inserted,
        "updated": record.updated,
        "unchanged": record.unchanged,
        "rejected": record.rejected,
        "unread": record.unread,
    }
