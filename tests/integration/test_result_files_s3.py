"""Result files in an S3 bucket (STORAGE_BACKEND=s3: django-storages' S3Storage, as
config/settings.py sets it up) against a real S3 API server, moto's, on a port of its own:
a report stored, downloaded by its owner through the signed link, refused to anyone else,
written again by a later attempt (replaced, not added), and deleted when its job is
pruned."""

from __future__ import annotations

import csv
import io
import logging
import uuid
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import boto3
import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.utils import timezone

from jobs import store
from jobs.files import result_file_writer
from jobs.models import Job
from jobs.states import State
from reports.models import Customer
from tests.support import factories
from tests.support.mail import free_port

pytestmark = pytest.mark.django_db

REGION = "eu-central-1"
KEYS = {"aws_access_key_id": "test-key", "aws_secret_access_key": "test-secret"}


@pytest.fixture(scope="module")
def s3_endpoint() -> Iterator[str]:
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # its line per request
    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.stop()


@pytest.fixture
def bucket(s3_endpoint: str, settings: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """A fresh bucket, and the default storage pointed at it as STORAGE_BACKEND=s3 does."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", KEYS["aws_access_key_id"])
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", KEYS["aws_secret_access_key"])
    name = f"results-{uuid.uuid4().hex[:12]}"
    s3 = boto3.client("s3", endpoint_url=s3_endpoint, region_name=REGION, **KEYS)
    s3.create_bucket(Bucket=name, CreateBucketConfiguration={"LocationConstraint": REGION})
    settings.STORAGES = {
        **settings.STORAGES,
        "default": {
            "BACKEND": "storages.backends.s3.S3Storage",
            "OPTIONS": {
                "bucket_name": name,
                "endpoint_url": s3_endpoint,
                "region_name": REGION,
                "default_acl": "private",
                "file_overwrite": False,
            },
        },
    }
    yield lambda: [item["Key"] for item in s3.list_objects_v2(Bucket=name).get("Contents", [])]


def test_a_report_file_lives_in_the_bucket_from_its_job_to_its_pruning(client: Client, bucket: Any) -> None:
    ann = User.objects.create_user("ann", "ann@example.com", "pw-ann-12345")
    Customer.objects.bulk_create(
        Customer(owner=ann, name=f"C{n}", email=f"c{n}@example.com", country="FR") for n in range(300)
    )
    client.force_login(ann)
    job_id = client.post(
        "/api/reports", {"kind": "customers", "params": {}}, content_type="application/json"
    ).json()["job_id"]
    factories.run_due()
    [key] = bucket()
    assert key.startswith(f"job-results/{job_id}/customers-") and key.endswith(".csv")

    status = client.get(f"/api/jobs/{job_id}").json()
    assert status["status"] == "succeeded" and status["file"]["size"] > 0
    response = client.get(status["file"]["download_url"])
    assert response.status_code == 200
    rows = list(csv.reader(io.StringIO(b"".join(response.streaming_content).decode())))
    assert len(rows) == 301 and rows[1][:2] == ["C0", "c0@example.com"]
    # Only its owner (or staff) downloads it, link or not.
    bob = User.objects.create_user("bob", "bob@example.com", "pw-bob-12345")
    client.force_login(bob)
    assert client.get(status["file"]["download_url"]).status_code == 404

    # A later attempt of the job writes its file again: it replaces the object, not adds one
    # (the bucket keeps names; file_overwrite is off, so a second name would be invented).
    filename = status["file"]["filename"]
    with result_file_writer(job_id, filename) as out:
        assert out.file is not None
        out.file.write(b"name,email\n")
    assert out.entry is not None and out.entry["name"] == key
    assert bucket() == [key]

    later = timezone.now() + timedelta(days=365)
    assert store.prune(retention={State.SUCCEEDED: 0}, now=later) == 1
    assert not Job.objects.filter(id=job_id).exists()
    assert bucket() == []
