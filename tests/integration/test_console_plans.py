"""The console's queries keep their index plans: every query the job list (each filter,
the search), the detail page and the dashboard send to the job table is served by an
index, and none counts or DISTINCTs the table. Measured on a few thousand rows with
sequential scans priced out (``enable_seqscan = off``: a plan that still scans has no
index to use); the timings at a million rows are the bench_console benchmark's."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from jobs import store
from jobs.models import Job
from jobs.states import State
from tests.support import factories

pytestmark = pytest.mark.django_db

LIST = reverse("admin:jobs_job_changelist")


@pytest.fixture
def console(client: Client, django_user_model) -> Client:
    client.force_login(django_user_model.objects.create(username="ops", is_staff=True, is_superuser=True))
    factories.insert_finished(1500)
    factories.insert_finished(300, state=State.DEAD, task_path="tests.tasks.basic.fail_always")
    factories.insert_queued(100, queue_name="email")
    dead = Job.objects.filter(state=State.DEAD).first()
    Job.objects.filter(id=dead.id).update(last_error="SMTPRecipientsRefused: no such user", dedupe_key="k:1")
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE jobs_job")
        cursor.execute("SET enable_seqscan = off")
    yield client
    with connection.cursor() as cursor:
        cursor.execute("RESET enable_seqscan")


def job_table_queries(client: Client, url: str) -> list[str]:
    with CaptureQueriesContext(connection) as captured:
        response = client.get(url)
    assert response.status_code == 200, url
    # The planner's own estimate (an EXPLAIN of the page's query) is not a query to plan.
    return [
        q["sql"]
        for q in captured.captured_queries
        if "jobs_job" in q["sql"] and "django_session" not in q["sql"] and not q["sql"].startswith("EXPLAIN")
    ]


def plan(sql: str) -> str:
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN " + sql)
        return "\n".join(row[0] for row in cursor.fetchall())


QUERIES = [
    "",
    "?state=dead",
    "?state=queued",
    "?state=retrying",
    "?queue=email",
    "?state=dead&queue=default",
    "?task=tests.tasks.basic.fail_always",
    "?state=dead&task=tests.tasks.basic.fail_always",
    "?created=1h",
    "?q=SMTPRecipients",
    "?q=k:1",
    "?q=01a231c0-153c-7150-acae-769cf8c65968",
]


def test_every_list_query_is_served_by_an_index_and_none_counts_the_table(console: Client) -> None:
    for query in QUERIES:
        queries = job_table_queries(console, LIST + query)
        assert queries, query
        for sql in queries:
            assert "COUNT(" not in sql.upper(), sql
            assert "DISTINCT" not in sql.upper(), sql
            shown = plan(sql)
            assert "Seq Scan on jobs_job " not in shown + " ", f"{query}\n{sql}\n{shown}"
    # Which index serves the page itself.
    assert "Index Scan Backward using jobs_job_pkey" in plan(page_query(console, ""))
    assert "jobs_job_console_state" in plan(page_query(console, "?state=dead"))
    assert "jobs_job_console_state" in plan(
        page_query(console, "?state=dead&task=tests.tasks.basic.fail_always")
    )
    assert "jobs_job_pkey" in plan(page_query(console, "?task=tests.tasks.basic.fail_always"))
    assert "jobs_job_console_error" in plan(page_query(console, "?q=SMTPRecipients"))
    assert "jobs_job_console_dedupe" in plan(page_query(console, "?q=k:1"))
    assert "jobs_job_claimable" in plan(page_query(console, "?queue=email&state=queued"))
    # The detail page and the dashboard.
    job = Job.objects.filter(state=State.DEAD).first()
    for url in (reverse("admin:jobs_job_change", args=[job.pk]), reverse("admin:jobs_job_dashboard")):
        for sql in job_table_queries(console, url):
            shown = plan(sql)
            assert "Seq Scan on jobs_job " not in shown + " ", f"{url}\n{sql}\n{shown}"


def page_query(client: Client, query: str) -> str:
    [page] = [
        sql for sql in job_table_queries(client, LIST + query) if 'ORDER BY "jobs_job"."id" DESC' in sql
    ]
    return page


def test_the_claim_keeps_its_plan_with_a_paused_queue(console: Client) -> None:
    import uuid

    from jobs import store

    store.pause_queue("default")
    with connection.cursor() as cursor:
        cursor.execute("RESET enable_seqscan")
    params = {
        "queues": ["email", "default"], "quotas": [10, 10], "limit": 10, "worker": uuid.uuid4(),
        "now": None, "lease_seconds": 300.0, "default_timeout": None, "unstarted_lease": 10.0,
    }  # fmt: skip
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN " + store.sql("claim"), params)
        shown = "\n".join(row[0] for row in cursor.fetchall())
    assert "jobs_job_claimable" in shown and "Seq Scan on jobs_job " not in shown + " ", shown


def test_pruning_walks_the_finished_index_by_id(console: Client) -> None:
    # Pruning has no index of its own (migration 0019): it walks jobs_job_console_state
    # (state, id), its ids bounded by the cutoff, for each state and range.
    with CaptureQueriesContext(connection) as captured:
        store.prune(retention={State.SUCCEEDED: 3600.0, State.DEAD: 86400.0})
    deletes = [q["sql"] for q in captured.captured_queries if q["sql"].lstrip().startswith("DELETE")]
    assert len(deletes) == 4
    for sql in deletes:
        shown = plan(sql)
        assert "jobs_job_console_state" in shown and "Seq Scan on jobs_job" not in shown, shown
