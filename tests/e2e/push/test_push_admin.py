"""The push console in a real browser: compose a notification, watch its progress while a
worker sends it to the fake APNs and FCM, then the devices and deliveries it left behind.
Screenshots of each page go to the test's tmp_path."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import expect

from notifications.push.models import Device, PushDelivery, PushNotification
from tests.support.factories import run_due
from tests.support.push.fake_apns import Answer
from tests.support.push.fixtures import device

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def shoot(page: Any, directory: Path, name: str) -> None:
    page.set_viewport_size({"width": 1280, "height": 800})
    page.screenshot(path=str(directory / f"{name}.png"), full_page=True)


def test_compose_send_and_watch_a_notification(
    admin_page: Any, live_server: Any, live_push: Any, django_user_model: Any, tmp_path: Path
) -> None:
    page = admin_page
    ana = django_user_model.objects.create_user("ana", "ana@example.com")
    budi = django_user_model.objects.create_user("budi", "budi@example.com")
    django_user_model.objects.create_user("citra", "citra@example.com")  # no device: not listed
    phone, tablet = device(ana, "ios"), device(ana, "android")
    gone = device(budi, "ios")
    live_push.apns.script(gone.token, Answer(410, "Unregistered"))

    page.goto(f"{live_server.url}/admin/notifications/pushnotification/add/")
    expect(page.locator("h1")).to_have_text("Compose notification")
    assert page.locator("#id_users_from option").all_inner_texts() == ["ana", "budi"]
    shoot(page, tmp_path, "compose")

    # Data that FCM cannot carry is refused on the form, and nothing is sent.
    page.fill("#id_title", "Your order shipped")
    page.fill("#id_body", "Order 42 is on its way.")
    page.fill("#id_data", '{"order": 42}')
    page.select_option("#id_users_from", label="ana")
    page.click("#id_users_add")
    page.select_option("#id_users_from", label="budi")
    page.click("#id_users_add")
    page.click("input[type=submit]")
    expect(page.locator(".field-data .errorlist")).to_contain_text(
        "must be a string (FCM carries strings only)"
    )
    assert not PushNotification.objects.exists()
    shoot(page, tmp_path, "compose-error")

    # The form kept everything, the chosen users too.
    assert page.locator("#id_users_to option").all_inner_texts() == ["ana", "budi"]
    page.fill("#id_data", '{"order": "42"}')
    page.click("input[type=submit]")
    expect(page.locator(".messagelist")).to_contain_text("Enqueued 3 delivery jobs.")
    expect(page.locator("[role=status]")).to_contain_text("0 of 3 deliveries finished")
    expect(page.locator(".counts .outcome-queued b")).to_have_text("3")
    assert page.locator("meta[http-equiv=refresh]").count() == 1
    shoot(page, tmp_path, "progress-queued")

    run_due(queues=("push",))
    page.reload()
    expect(page.locator("[role=status]")).to_contain_text("3 of 3 deliveries finished (100%)")
    expect(page.locator(".counts .outcome-delivered b")).to_have_text("2")
    expect(page.locator(".counts .outcome-failed b")).to_have_text("1")
    assert page.locator("meta[http-equiv=refresh]").count() == 0
    expect(page.locator("#push-deliveries")).to_contain_text("Unregistered")
    shoot(page, tmp_path, "progress-done")

    # The job behind a delivery is one click away.
    page.locator("#push-deliveries tbody tr").first.locator("a").click()
    expect(page.locator("h1")).to_contain_text("job")
    first = PushDelivery.objects.order_by("created_at", "user_id", "device_id").first()
    assert first is not None and str(first.job_id) in page.url

    page.goto(f"{live_server.url}/admin/notifications/pushdelivery/")
    expect(page.locator("#result_list")).to_contain_text("delivered")
    expect(page.locator("#result_list")).to_contain_text("Unregistered")
    shoot(page, tmp_path, "deliveries")
    page.locator("#result_list tbody tr", has_text="budi").locator("th a").click()
    expect(page.locator(".field-outcome")).to_contain_text("failed")
    expect(page.locator(".field-reason")).to_contain_text("Unregistered")
    expect(page.locator(".field-job a")).to_be_visible()
    shoot(page, tmp_path, "delivery")

    page.goto(f"{live_server.url}/admin/notifications/device/")
    expect(page.locator("#result_list")).to_contain_text("APNs 410 Unregistered")
    shoot(page, tmp_path, "devices")
    page.check(f"input[name=_selected_action][value='{gone.id}']")
    page.select_option("select[name=action]", "reactivate")
    page.click("button[name=index]")
    expect(page.locator(".messagelist")).to_contain_text("Reactivated 1 device.")
    assert Device.objects.filter(active=True).count() == 3
    assert {phone.id, tablet.id, gone.id} == set(Device.objects.values_list("id", flat=True))
    print(f"screenshots in {tmp_path}")


def test_sending_to_all_active_users_needs_no_selection(
    admin_page: Any, live_server: Any, live_push: Any, django_user_model: Any, tmp_path: Path
) -> None:
    page = admin_page
    for name in ("dewi", "eko"):
        device(django_user_model.objects.create_user(name, f"{name}@example.com"), "android")
    page.goto(f"{live_server.url}/admin/notifications/pushnotification/")
    page.click("text=Compose notification")
    page.fill("#id_title", "Maintenance tonight")
    page.fill("#id_body", "The app is offline from 01:00 to 02:00.")
    page.click("input[type=submit]")
    expect(page.locator(".field-users .errorlist")).to_contain_text("Choose at least one user")
    page.check("input[name=audience][value=all]")
    page.click("input[type=submit]")
    expect(page.locator("[role=status]")).to_contain_text("0 of 2 deliveries finished")
    notification = PushNotification.objects.get()
    assert notification.audience == "all active users"
    page.goto(f"{live_server.url}/admin/notifications/pushnotification/")
    expect(page.locator("#result_list")).to_contain_text("Maintenance tonight")
    expect(page.locator("#result_list .field-devices")).to_have_text("2")
    shoot(page, tmp_path, "notifications")
    print(f"screenshots in {tmp_path}")
