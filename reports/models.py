"""Customers (what imports bring in) and the book-keeping of imports.

An import is stored, then split into chunks by one job; each chunk job upserts its rows
and records itself in ``ImportChunk`` in the same transaction, so a chunk that is retried
after it committed finds its record and changes nothing; the chunk that completes the set
enqueues the summary step (see importing.py).
"""

import uuid

from django.conf import settings
from django.db import models
from django.db.models.functions import Lower


class Customer(models.Model):
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="customers")
    name = models.CharField(max_length=200)
    # Unique per owner, case-insensitively (the import's ON CONFLICT target).
    email = models.EmailField(max_length=254)
    phone = models.CharField(max_length=40, blank=True, default="")
    # ISO 3166 alpha-2, upper case ("" if not given).
    country = models.CharField(max_length=2, blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        db_table = "reports_customer"
        constraints = [
            models.UniqueConstraint(
                models.F("owner"), Lower("email"), name="reports_customer_email_per_owner"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.name} <{self.email}>"


class ImportStatus(models.TextChoices):
    # Stored and validated; the split job has not run yet.
    QUEUED = "queued", "Queued"
    # Split into chunk jobs; they are upserting rows.
    RUNNING = "running", "Running"
    # Every chunk done and the summary written (counts, rejected rows file).
    FINISHED = "finished", "Finished"


class Import(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="imports")
    # The name the file was uploaded with, and where the storage keeps it until the summary.
    filename = models.CharField(max_length=255)
    stored_name = models.TextField()
    size = models.BigIntegerField()
    # The header's columns in file order, as Customer field names.
    columns = models.JSONField(default=list)
    status = models.TextField(choices=ImportStatus.choices, default=ImportStatus.QUEUED)
    # Set by the split: data rows (blank lines not counted) and chunks.
    total_rows = models.IntegerField(null=True, blank=True)
    chunk_count = models.IntegerField(null=True, blank=True)
    # Sums over the chunks done so far (each added once, with its chunk record).
    chunks_done = models.IntegerField(default=0)
    rows_done = models.IntegerField(default=0)
    inserted = models.IntegerField(default=0)
    updated = models.IntegerField(default=0)
    unchanged = models.IntegerField(default=0)
    rejected = models.IntegerField(default=0)
    # The split job, and the summary job whose result file holds the rejected rows.
    job_id = models.UUIDField(null=True, blank=True)
    summary_job_id = models.UUIDField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "reports_import"
        indexes = [models.Index(fields=["owner", "-created_at"], name="reports_import_owner")]

    def __str__(self) -> str:
        return f"{self.filename} ({self.status})"

    @property
    def unread(self) -> int:
        """Rows the scan counted that no chunk read (neither stored nor rejected): 0 unless
        part of the file could not be read, which the import then reports."""
        if self.status != ImportStatus.FINISHED or self.total_rows is None:
            return 0
        return max(0, self.total_rows - self.rows_done)


class ImportChunk(models.Model):
    """One chunk's outcome, written in the transaction that upserted its rows."""

    job_import = models.ForeignKey(Import, on_delete=models.CASCADE, related_name="chunks", db_index=False)
    index = models.IntegerField()
    rows = models.IntegerField()
    inserted = models.IntegerField()
    updated = models.IntegerField()
    unchanged = models.IntegerField()
    rejected = models.IntegerField()
    done_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        db_table = "reports_import_chunk"
        constraints = [
            models.UniqueConstraint(fields=["job_import", "index"], name="reports_import_chunk_once"),
        ]

    def __str__(self) -> str:
        return f"{self.job_import_id} #{self.index}"


class ImportRejection(models.Model):
    """A row the import refused, with the reason and the row's fields as they were."""

    job_import = models.ForeignKey(
        Import, on_delete=models.CASCADE, related_name="rejections", db_index=False
    )
    # The row's record number in the file (the header is 1).
    line = models.IntegerField()
    reason = models.TextField()
    values = models.JSONField(default=list)

    class Meta:
        db_table = "reports_import_rejection"
        indexes = [models.Index(fields=["job_import", "line"], name="reports_rejection_line")]

    def __str__(self) -> str:
        return f"line {self.line}: {self.reason}"
