"""Accepting a CSV upload: check its shape, store it, record the import, enqueue its job.

The checks are the file's own (size, UTF-8, a header of known columns); rows are checked
by the chunk jobs, where a bad row is rejected rather than fatal. A refused file leaves
nothing: no stored file, no import row, no job.
"""

from __future__ import annotations

import codecs
import csv
import io
from typing import Any

from django.conf import settings
from django.core.files.storage import default_storage
from django.core.files.uploadedfile import UploadedFile
from django.db import transaction
from django.template.defaultfilters import pluralize

from .exceptions import BadUpload
from .models import Import

COLUMNS = ("name", "email", "phone", "country")
REQUIRED = ("name", "email")
# Header names people use for our columns.
ALIASES = {"e-mail": "email", "mail": "email", "full name": "name", "telephone": "phone", "tel": "phone"}
# How much of the file the header may take.
HEADER_BYTES = 64 * 1024


def max_bytes() -> int:
    return int(settings.REPORTS_IMPORT_MAX_BYTES)


def check_size(size: int) -> None:
    if size > max_bytes():
        raise BadUpload(f"the file is {_mb(size)}; the limit is {_mb(max_bytes())}")
    if size == 0:
        raise BadUpload("the file is empty")


def read_header(upload: UploadedFile) -> list[str]:
    """The header's columns as Customer fields; BadUpload if the file is not UTF-8 text
    or its header is not ours. Reads the whole file once (to check the encoding)."""
    decoder = codecs.getincrementaldecoder("utf-8")()
    head = b""
    offset = 0
    upload.seek(0)
    for chunk in upload.chunks():
        if b"\x00" in chunk:
            raise BadUpload("the file is not a CSV text file (it holds NUL bytes)")
        try:
            decoder.decode(chunk)
        except UnicodeDecodeError as exc:
            raise BadUpload(
                f"the file is not UTF-8 text (byte 0x{chunk[exc.start]:02x} at offset {offset + exc.start}); "
                "save it as “CSV UTF-8” and upload it again"
            ) from exc
        if len(head) < HEADER_BYTES:
            head += chunk[: HEADER_BYTES - len(head)]
        offset += len(chunk)
    try:
        decoder.decode(b"", final=True)
    except UnicodeDecodeError as exc:
        raise BadUpload("the file is not UTF-8 text (it ends inside a character)") from exc
    upload.seek(0)
    text = head.decode("utf-8", errors="ignore").removeprefix("\ufeff")
    if "\n" not in text and len(head) == HEADER_BYTES:
        raise BadUpload("the first line is too long to be a CSV header")
    try:
        header = next(csv.reader(io.StringIO(text.splitlines()[0] if text.strip() else "")), [])
    except (csv.Error, IndexError) as exc:
        raise BadUpload(f"the header is not valid CSV: {exc}") from exc
    return check_header(header)


def check_header(header: list[str]) -> list[str]:
    columns = [ALIASES.get(name.strip().lower(), name.strip().lower()) for name in header]
    expected = f"expected a header line with {', '.join(REQUIRED)} and optionally {', '.join(COLUMNS[2:])}"
    if not any(columns):
        raise BadUpload(f"the file has no header line; {expected}")
    unknown = [name for name, column in zip(header, columns, strict=True) if column not in COLUMNS]
    if unknown:
        raise BadUpload(
            f"unknown column{pluralize(unknown)} {', '.join(repr(n) for n in unknown)}; {expected}"
        )
    missing = [name for name in REQUIRED if name not in columns]
    if missing:
        raise BadUpload(f"missing column{pluralize(missing)} {', '.join(missing)}; {expected}")
    repeated = sorted({name for name in columns if columns.count(name) > 1})
    if repeated:
        verb = "appears" if len(repeated) == 1 else "appear"
        raise BadUpload(f"column{pluralize(repeated)} {', '.join(repeated)} {verb} more than once")
    return columns


def accept(*, upload: UploadedFile, owner: Any) -> Import:
    """Check, store and record ``upload`` for ``owner`` and enqueue its split job, or raise
    BadUpload leaving nothing behind."""
    from .tasks import split_import

    check_size(upload.size or 0)
    columns = read_header(upload)
    record = Import(
        owner=owner, filename=(upload.name or "upload.csv")[:255], size=upload.size or 0, columns=columns
    )
    stored = default_storage.save(f"imports/{record.id}/upload.csv", upload)
    try:
        with transaction.atomic():
            record.stored_name = stored
            record.save()
            result = split_import.using(owner=owner).enqueue(str(record.id))
            record.job_id = result.id
            record.save(update_fields=["job_id"])
    except BaseException:
        default_storage.delete(stored)
        raise
    return record


def _mb(size: int) -> str:
    return f"{size / 1_000_000:.1f} MB" if size >= 100_000 else f"{size:,} bytes"
