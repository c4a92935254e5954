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
  import finished and deletes the uploaded file.
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
from django.core.files.storage import default_storage
from django.core.validators import validate_email
from django.db import connection, transaction
from django.utils import timezone

from jobs.files import result_file_writer
from jobs.ownership import owner_key
from jobs.progress import JobContext

from .models import Import, ImportChunk, ImportRejection, ImportStatus

PHONE_CHARACTERS = frozenset("0123456789+-(). ")


@dataclass(frozen=True)
class Chunk:
    start: int
    end: int
    # Record number of the chunk's first record (the header is 1).
    first_line: int
    rows: int


def scan(
    handle: IO[bytes], *, chunk_rows: int, context: JobContext | None = None, size: int = 0
) -> list[Chunk]:
    """Chunk boundaries of a CSV file: records end at a newline outside quotes (the count
    of quote characters so far in the record is even: RFC 4180 doubles quotes inside
    quoted fields). Blank lines are not rows. The header is skipped."""
    chunks: list[Chunk] = []
    offset = record_start = quotes = 0
    line = 0
    header_done = False
    start: int | None = None
    first = rows = 0
    for text in handle:
        quotes += text.count(b'"')
        offset += len(text)
        if quotes % 2:
            continue  # a newline inside a quoted field: the record goes on
        began, record_start, quotes = record_start, offset, 0
        line += 1
        if not header_done:
            header_done = True
            continue
        if start is None:
            start, first = began, line
        if text.strip(b"\r\n") or offset - began != len(text):
            rows += 1
        if rows >= chunk_rows:
            chunks.append(Chunk(start, offset, first, rows))
            start, rows = None, 0
        if context is not None and line % 20_000 == 0:
            context.set_progress(offset, max(size, offset), "reading the file")
    if quotes % 2 and header_done:
        # A quote never closed: the rest of the file is one record, which the chunk rejects.
        if start is None:
            start, first = record_start, line + 1
        rows += 1
    if start is not None and rows:
        chunks.append(Chunk(start, offset, first, rows))
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
    context.set_progress(record.size, record.size, f"{len(chunks)} chunk(s) queued")
    return {"import": import_id, "chunks": len(chunks), "rows": total}


@dataclass
class Checked:
    good: list[tuple[str, str, str, str]]
    # (line, reason, values)
    rejected: list[tuple[int, str, list[str]]]
    rows: int


def check_rows(records: Iterator[tuple[int, list[str]]], columns: list[str]) -> Checked:
    """Split a chunk's records into good rows (name, email, phone, country) and rejections."""
    checked = Checked(good=[], rejected=[], rows=0)
    seen: dict[str, int] = {}
    for line, values in records:
        checked.rows += 1
        row, reason = _check_row(values, columns)
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
        return None, f"expected {len(columns)} fields, found {len(values)}"
    fields = {column: value.strip() for column, value in zip(columns, values, strict=True)}
    name, email = fields.get("name", ""), fields.get("email", "")
    phone, country = fields.get("phone", ""), fields.get("country", "").upper()
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
    if country and not (len(country) == 2 and country.isascii() and country.isalpha()):
        return None, f"country {country[:20]!r} is not a two-letter code"
    return (name, email, phone, country), ""


def _records(data: bytes, first_line: int) -> Iterator[tuple[int, list[str]]]:
    reader = csv.reader(io.StringIO(data.decode("utf-8"), newline=""))
    line = first_line
    try:
        for values in reader:
            if values:
                yield line, values
            line += 1
    except csv.Error as exc:
        yield line, [f"malformed CSV: {exc}"]


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
    context.set_progress(checked.rows, checked.rows, f"chunk {index}: {checked.rows} rows checked")
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


def summarize(import_id: str, *, job_id: str, context: JobContext) -> dict[str, Any]:
    record = Import.objects.get(id=import_id)
    rejections = (
        ImportRejection.objects.filter(job_import_id=record.id)
        .order_by("line")
        .values_list("line", "reason", "values")
    )
    with result_file_writer(job_id, "rejected-rows.csv") as out:
        assert out.file is not None
        text = io.TextIOWrapper(out.file, encoding="utf-8", newline="")
        writer = csv.writer(text)
        writer.writerow(["line", "reason", *record.columns])
        for n, (line, reason, values) in enumerate(rejections.iterator(chunk_size=2000)):
            writer.writerow([line, reason, *values])
            if n % 1000 == 0:
                context.set_progress(n, record.rejected, "writing the rejected rows")
        text.flush()
        text.detach()
    Import.objects.filter(id=import_id).update(
        status=ImportStatus.FINISHED,
        total_rows=record.rows_done,
        summary_job_id=uuid.UUID(job_id),
        finished_at=timezone.now(),
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
    }
