"""Pure pieces of accounts and email: durations, client IPs, template variables, keys."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.test import RequestFactory, override_settings

from accounts.cooldowns import cooldown_key
from accounts.durations import in_words
from accounts.tokens import API_TOKEN_PREFIX, api_token_digest, new_api_token
from config.security import secret_key_problem
from notifications.email import catalog
from notifications.email.sending import message_id
from notifications.exceptions import BadVariables, UnknownTemplate
from web.clientip import client_ip


@pytest.mark.parametrize(
    ("seconds", "words"),
    [(259200, "3 days"), (86400, "1 day"), (3600, "1 hour"), (7200, "2 hours"), (900, "15 minutes"),
     (timedelta(minutes=1), "1 minute"), (20, "1 minute"), (5400, "90 minutes")],
)  # fmt: skip
def test_durations_in_words(seconds, words) -> None:
    assert in_words(seconds) == words


def test_the_client_ip_is_remote_addr_unless_proxies_are_trusted() -> None:
    request = RequestFactory().get("/", REMOTE_ADDR="10.0.0.9", HTTP_X_FORWARDED_FOR="6.6.6.6, 203.0.113.5")
    with override_settings(CLIENT_IP_PROXY_COUNT=0):
        assert client_ip(request) == "10.0.0.9"
    with override_settings(CLIENT_IP_PROXY_COUNT=1):
        # The proxy appended the address it saw; what the client sent before it is not trusted.
        assert client_ip(request) == "203.0.113.5"
    with override_settings(CLIENT_IP_PROXY_COUNT=3):
        assert client_ip(request) == "10.0.0.9"  # fewer entries than proxies: not trusted


def test_template_variables_must_be_exactly_the_declared_ones() -> None:
    receipt = catalog.get_template("order_receipt")
    catalog.check_variables(receipt, {"name": "Ann", "order_number": "A-1", "total": 12.5})
    with pytest.raises(BadVariables) as raised:
        catalog.check_variables(receipt, {"name": True, "order_number": "x\ny", "extra": "1"})
    assert raised.value.errors == {
        "name": "must be a string or a number",
        "order_number": "must be on one line",
        "extra": "this template has no such variable",
        "total": "required",
    }
    with pytest.raises(UnknownTemplate):
        catalog.get_template("nope")
    assert catalog.api_template_names() == ["order_receipt", "welcome"]


def test_api_tokens_are_random_and_only_their_digest_is_kept() -> None:
    token, prefix, digest = new_api_token()
    assert token.startswith(API_TOKEN_PREFIX) and len(token) > 40 and token.startswith(prefix)
    assert digest == api_token_digest(token) and token not in digest
    assert new_api_token()[0] != token


def test_cooldown_keys_hold_no_address_in_clear() -> None:
    key = cooldown_key("resend-address", "ann@example.com")
    assert "ann" not in key and len(key) == 64
    assert key != cooldown_key("resend-ip", "ann@example.com")


def test_message_ids_are_stable_per_message_key() -> None:
    assert message_id("verify_email:1:a@b.c:1") == message_id("verify_email:1:a@b.c:1")
    assert message_id("verify_email:1:a@b.c:1") != message_id("verify_email:1:a@b.c:2")
    assert message_id("k").endswith("@localhost>")


def test_secret_keys_too_weak_for_a_public_site() -> None:
    dev = "dev-key"
    assert secret_key_problem("", development_key=dev)
    assert secret_key_problem(dev, development_key=dev)
    assert "at least 50" in (secret_key_problem("x" * 49, development_key=dev) or "")
    assert secret_key_problem("ab" * 30, development_key=dev)
    assert secret_key_problem("Zq3-" + "k8Jm" * 12 + "Lp", development_key=dev) is None
