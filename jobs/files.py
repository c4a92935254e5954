"""Result files: what a job makes for someone to download (a report, a rejected-rows CSV).

A handler writes the file through Django's storage API (``STORAGES[JOBS["RESULT_STORAGE"]]``:
the file system under MEDIA_ROOT by default, S3 through django-storages by settings) under
``job-results/<job id>/`` and returns ``{"file": <what result_file_writer gave>, ...}``.
The status API then gives the owner (or staff) a signed download link that expires after
``JOBS["DOWNLOAD_URL_MAX_AGE"]`` seconds; the download view checks both the signature and
the viewer. Pruning a job deletes its file.

Files are written to a temporary file first and handed to the storage whole, so a handler
streaming a million rows never holds them in memory, and a failed attempt leaves nothing.
"""

from __future__ import annotations

import contextlib
import logging
import os
import tempfile
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import IO, Any

from django.core import signing
from django.core.files import File
from django.core.files.storage import FileSystemStorage, Storage, storages
from django.urls import reverse
from django.utils import timezone

from .conf import jobs_settings

logger = logging.getLogger("jobs.files")

PREFIX = "job-results"
_SALT = "jobs.files.download"


class BadDownload(Exception):
    """A download link that is not valid for this job and file (or has expired)."""

    def __init__(self, message: str, *, expired: bool = False) -> None:
        super().__init__(message)
        self.expired = expired


def result_storage() -> Storage:
    return storages[jobs_settings().RESULT_STORAGE]


def _folder(job_id: uuid.UUID | str) -> str:
    return f"{PREFIX}/{uuid.UUID(str(job_id))}/"


@contextlib.contextmanager
def result_file_writer(job_id: uuid.UUID | str, filename: str) -> Iterator[ResultFile]:
    """Write a job's result file: ``with result_file_writer(id, "report.csv") as out:``
    write bytes to ``out.file``, then return ``{"file": out.entry, ...}`` from the handler.
    The file is stored when the block ends without an error (replacing one an earlier
    attempt of the same job stored)."""
    out = ResultFile(job_id=str(job_id), filename=_safe_filename(filename))
    with tempfile.TemporaryFile() as temporary:
        out.file = temporary
        yield out
        temporary.flush()
        temporary.seek(0)
        storage = result_storage()
        name = _folder(job_id) + out.filename
        if storage.exists(name):
            storage.delete(name)
        saved = storage.save(name, File(temporary, name=out.filename))
        out.entry = {"name": saved, "filename": out.filename, "size": storage.size(saved)}


@dataclass
class ResultFile:
    job_id: str
    filename: str
    file: IO[bytes] | None = None
    entry: dict[str, Any] | None = None


def file_of(job_id: uuid.UUID | str, result: Any) -> dict[str, Any] | None:
    """The result file a job's result names, if it is one of this job's files."""
    entry = result.get("file") if isinstance(result, dict) else None
    if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
        return None
    # A result can only point at its own job's folder, never at another file in the storage.
    if not entry["name"].startswith(_folder(job_id)) or ".." in entry["name"]:
        return None
    return entry


def download_url(job_id: uuid.UUID | str, entry: dict[str, Any], *, max_age: float | None = None) -> str:
    """A path to download ``entry`` of the job, signed, valid ``max_age`` seconds (default
    JOBS["DOWNLOAD_URL_MAX_AGE"]). Only the job's owner or staff can use it."""
    age = jobs_settings().DOWNLOAD_URL_MAX_AGE if max_age is None else max_age
    expires = int(timezone.now().timestamp() + age)
    token = signing.dumps({"j": str(job_id), "n": entry["name"], "e": expires}, salt=_SALT, compress=True)
    return f"{reverse('jobs:job-file', kwargs={'job_id': job_id})}?s={token}"


def check_signature(job_id: uuid.UUID | str, token: str, entry: dict[str, Any]) -> None:
    """BadDownload unless ``token`` was made for this job's current file and is unexpired."""
    try:
        value = signing.loads(token, salt=_SALT)
    except signing.BadSignature as exc:
        raise BadDownload("this download link is not valid") from exc
    if not isinstance(value, dict) or value.get("j") != str(job_id) or value.get("n") != entry["name"]:
        raise BadDownload("this download link is not valid")
    if not isinstance(value.get("e"), int) or value["e"] < timezone.now().timestamp():
        raise BadDownload("this download link has expired; ask the job's status for a new one", expired=True)


def delete_files(names: Iterable[str]) -> int:
    """Delete result files (pruned jobs'); a file already gone is fine. Returns how many."""
    storage = result_storage()
    deleted = 0
    for name in names:
        if not name.startswith(f"{PREFIX}/"):
            continue
        try:
            storage.delete(name)
        except Exception:  # a storage outage must not stop pruning; the file stays
            logger.exception("event=result_file_delete_failed name=%s", name)
            continue
        deleted += 1
        if isinstance(storage, FileSystemStorage):
            # The job's folder, now empty (object stores have no folders).
            with contextlib.suppress(OSError):
                os.rmdir(os.path.dirname(storage.path(name)))
    return deleted


def _safe_filename(filename: str) -> str:
    cleaned = "".join(ch if ch.isalnum() or ch in "-_." else "-" for ch in filename).strip(".-")
    return cleaned[:100] or "result"
