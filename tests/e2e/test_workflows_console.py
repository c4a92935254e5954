"""The workflow console in a real browser: the graph links each step to its job; an
operator approves a waiting payment from the page and the next step becomes claimable."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from demos.workflows import start_payment_approval
from jobs.models import Job
from tests.support import factories

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def test_an_operator_sends_the_approval_from_the_workflow_page(admin_page, live_server) -> None:  # type: ignore[no-untyped-def]
    page = admin_page
    run = start_payment_approval(order_id=5, amount_cents=700)
    factories.run_due()
    page.goto(f"{live_server.url}/admin/jobs/workflow/")
    page.click(f"#result_list a[href*='{run.id}']")
    graph = page.locator("svg.wf-graph")
    expect(graph).to_contain_text("wait: approval")
    prepare = run.refresh().steps()[0]
    assert graph.locator(f"a[href$='/admin/jobs/job/{prepare.job_id}/change/']").count() == 1

    page.fill("input[name=payload]", "{not json")
    page.click("input[value='Send signal']")
    expect(page.locator(".messagelist")).to_contain_text("not JSON")
    page.fill("input[name=payload]", '{"approved": true, "by": "ops"}')
    page.click("input[value='Send signal']")
    expect(page.locator(".messagelist")).to_contain_text("Signal 'approval': delivered.")
    finalize = run.refresh().steps()[1]
    assert Job.objects.get(id=finalize.job_id).state == "queued"
    expect(page.locator("svg.wf-graph")).to_contain_text("queued")
