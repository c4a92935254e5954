"""The APNs provider token: ES256, kid and iss, reused, replaced before an hour, never
replaced within 20 minutes. The clock is passed in."""

from __future__ import annotations

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from notifications.push.providers.apns import ProviderToken


class Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


def make_token() -> tuple[ProviderToken, Clock, ec.EllipticCurvePublicKey]:
    key = ec.generate_private_key(ec.SECP256R1())
    pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()
    clock = Clock()
    return (
        ProviderToken(key=pem, key_id="KEY1234567", team_id="TEAM123456", clock=clock),
        clock,
        key.public_key(),
    )


def test_the_token_is_es256_signed_with_kid_and_iss() -> None:
    token, clock, public = make_token()
    value = token.current()
    assert jwt.get_unverified_header(value) == {"alg": "ES256", "kid": "KEY1234567", "typ": "JWT"}
    assert jwt.decode(value, public, algorithms=["ES256"], options={"verify_iat": False}) == {
        "iss": "TEAM123456",
        "iat": int(clock.now),
    }


def test_the_token_is_reused_until_it_is_50_minutes_old() -> None:
    token, clock, _ = make_token()
    first = token.current()
    clock.now += 49 * 60
    assert token.current() == first
    clock.now += 60
    second = token.current()
    assert second != first
    assert jwt.decode(second, options={"verify_signature": False})["iat"] == int(clock.now)


def test_a_refresh_waits_until_the_token_is_20_minutes_old() -> None:
    token, clock, _ = make_token()
    token.current()
    clock.now += 5 * 60
    assert token.wait_before_refresh() == 15 * 60
    clock.now += 15 * 60
    assert token.wait_before_refresh() == 0


def test_a_refused_token_is_replaced_at_once_and_only_once() -> None:
    token, clock, _ = make_token()
    refused = token.current()
    clock.now += 60
    # Two sends refused with the same token: the first mints, the second uses its token.
    assert token.replace(refused) == 0
    successor = token.current()
    assert successor != refused
    assert token.replace(refused) == 0
    assert token.current() == successor


def test_too_many_updates_holds_new_tokens_back_with_a_growing_wait() -> None:
    token, clock, _ = make_token()
    token.current()
    assert token.too_many_updates() == 60
    held = token.current()
    assert token.replace(held) == 60
    clock.now += 60
    assert token.replace(held) == 0 and token.current() != held
    assert token.too_many_updates() == 120
    token.accepted()
    assert token.too_many_updates() == 60
