"""Authenticating requests against the key cache, and which models a key may use."""

from __future__ import annotations

from datetime import timedelta

import pytest

from llmgw.core.clock import FakeClock
from llmgw.core.errors import Forbidden, Unauthenticated
from llmgw.core.types import ApiKey
from llmgw.gateway.auth import KeyCache, may_use, require_admin
from tests.factories import KEY_SECRET, NOW, admin_key, api_key, user_key


def cache(*records: ApiKey) -> KeyCache:
    return KeyCache(KEY_SECRET, list(records))


def test_a_valid_key_authenticates_as_its_record() -> None:
    plaintext, record = user_key()
    assert cache(record).authenticate(f"Bearer {plaintext}", NOW) == record


def test_the_scheme_is_case_insensitive_and_spaces_around_the_key_are_ignored() -> None:
    plaintext, record = user_key()
    assert cache(record).authenticate(f"bearer   {plaintext} ", NOW) == record


@pytest.mark.parametrize("header", [None, ""])
def test_a_request_without_a_key_is_told_how_to_send_one(header: str | None) -> None:
    with pytest.raises(Unauthenticated) as caught:
        cache().authenticate(header, NOW)
    assert caught.value.status == 401
    assert caught.value.code == "missing_api_key"
    assert "Authorization: Bearer" in caught.value.message


@pytest.mark.parametrize(
    "header", ["Basic dXNlcjpwYXNz", "Bearer", "Bearer    ", "sk-llmgw-abc", "Token sk-llmgw-abc"]
)
def test_a_malformed_header_is_rejected(header: str) -> None:
    plaintext, record = user_key()
    with pytest.raises(Unauthenticated) as caught:
        cache(record).authenticate(header, NOW)
    assert caught.value.status == 401
    assert caught.value.code == "invalid_api_key"
    assert "Bearer <key>" in caught.value.message


def test_a_wrong_key_is_rejected_without_echoing_it() -> None:
    _, record = user_key()
    wrong, _ = user_key()

    with pytest.raises(Unauthenticated) as caught:
        cache(record).authenticate(f"Bearer {wrong}", NOW)

    assert caught.value.code == "invalid_api_key"
    assert caught.value.message == "Incorrect API key provided"
    assert wrong not in str(caught.value)


def test_a_key_hashed_with_another_installs_secret_is_rejected() -> None:
    plaintext, foreign = user_key(secret=b"another install's secret")
    with pytest.raises(Unauthenticated, match="Incorrect API key"):
        cache(foreign).authenticate(f"Bearer {plaintext}", NOW)


def test_a_revoked_key_is_rejected_like_an_unknown_one() -> None:
    plaintext, record = user_key(revoked=True)
    with pytest.raises(Unauthenticated) as caught:
        cache(record).authenticate(f"Bearer {plaintext}", NOW)
    assert caught.value.message == "Incorrect API key provided"


def test_a_key_works_until_it_expires() -> None:
    clock = FakeClock(NOW)
    plaintext, record = user_key(expires_at=clock.now() + timedelta(hours=1))
    keys = cache(record)

    clock.advance(3599)
    assert keys.authenticate(f"Bearer {plaintext}", clock.now()) == record

    clock.advance(1)
    with pytest.raises(Unauthenticated) as caught:
        keys.authenticate(f"Bearer {plaintext}", clock.now())
    assert caught.value.status == 401
    assert caught.value.code == "expired_api_key"
    assert "expired" in caught.value.message


def test_each_key_in_the_cache_is_found() -> None:
    pairs = [user_key(name=f"k{i}") for i in range(3)] + [admin_key()]
    keys = cache(*(record for _, record in pairs))
    for plaintext, record in pairs:
        assert keys.authenticate(f"Bearer {plaintext}", NOW) is record


# --- families: a minted key lives no longer than the keys above it -----------------------------


def minted(by: ApiKey, **over: object) -> tuple[str, ApiKey]:
    plaintext, record = user_key(name=f"minted by {by.name}")
    return plaintext, record.model_copy(update={"minted_by": by.id, **over})


def test_a_key_beneath_a_revoked_key_is_refused_even_if_not_revoked_itself() -> None:
    # The store revokes a key's descendants with it; this is the second line, for a key minted
    # in the instant its minter was revoked.
    _, parent = user_key(name="parent", revoked=True)
    child_secret, child = minted(parent)
    grandchild_secret, grandchild = minted(child)
    keys = cache(parent, child, grandchild)
    for secret in (child_secret, grandchild_secret):
        with pytest.raises(Unauthenticated) as caught:
            keys.authenticate(f"Bearer {secret}", NOW)
        assert caught.value.message == "Incorrect API key provided"


def test_a_key_beneath_an_expired_key_expires_with_it() -> None:
    _, parent = user_key(name="parent", expires_at=NOW + timedelta(hours=1))
    secret, child = minted(parent)
    keys = cache(parent, child)
    assert keys.authenticate(f"Bearer {secret}", NOW) == child
    with pytest.raises(Unauthenticated) as caught:
        keys.authenticate(f"Bearer {secret}", NOW + timedelta(hours=1))
    assert caught.value.code == "expired_api_key"


def test_a_key_is_found_by_id_under_the_same_rules_as_by_secret() -> None:
    # The console's sessions hold a key id: a session lives exactly as long as the key would
    # be let in.
    _, live = user_key(name="live")
    _, revoked = user_key(name="revoked", revoked=True)
    _, parent = user_key(name="parent", expires_at=NOW + timedelta(hours=1))
    _, child = minted(parent)
    _, orphan = minted(revoked)
    keys = cache(live, revoked, parent, child, orphan)
    assert keys.principal(live.id, NOW) == live
    assert keys.principal(child.id, NOW) == child
    for gone in (revoked.id, orphan.id, "key-unknown"):
        with pytest.raises(Unauthenticated) as caught:
            keys.principal(gone, NOW)
        assert caught.value.message == "Incorrect API key provided"
    with pytest.raises(Unauthenticated) as caught:
        keys.principal(child.id, NOW + timedelta(hours=1))
    assert caught.value.code == "expired_api_key"


def test_a_family_starts_at_the_key_an_admin_made() -> None:
    # An admin key's keys are not its family: revoking or limiting it leaves them alone.
    _, admin = admin_key(revoked=True)
    secret, user = minted(admin)
    _, child = minted(user)
    keys = cache(admin, user, child)
    assert keys.authenticate(f"Bearer {secret}", NOW) == user
    assert keys.chain(child) == (child, user)
    assert keys.chain(user) == (user,)
    assert keys.family(user.id) == (user.id, child.id)


# --- permissions -------------------------------------------------------------------------------


def test_admin_endpoints_refuse_user_keys() -> None:
    _, user = user_key()
    _, admin = admin_key()
    require_admin(admin)
    with pytest.raises(Forbidden) as caught:
        require_admin(user)
    assert caught.value.status == 403


def test_a_key_without_a_model_list_may_use_any_model() -> None:
    _, record = user_key()
    assert may_use(record, "gemma3-270m")
    assert may_use(record, "gpt-4o-mini")


def test_an_admin_key_may_use_any_model_whatever_its_list_says() -> None:
    _, record = admin_key(models=["gemma3-*"])
    assert may_use(record, "gpt-4o-mini")


@pytest.mark.parametrize(
    ("model", "allowed"),
    [
        ("gemma3-270m", True),
        ("gemma3-1b", True),
        ("qwen3guard-0.6b", True),
        ("qwen3guard-4b", True),
        ("qwen3guard-8b", False),
        ("gpt-4o-mini", True),
        ("gpt-4o", False),
        ("GEMMA3-270M", False),
        ("llama-guard-3-1b", False),
    ],
)
def test_a_user_key_may_use_the_models_its_patterns_match(model: str, allowed: bool) -> None:
    _, record = api_key(models=["gemma3-*", "qwen3guard-[04]*", "gpt-4o-mini"])
    assert may_use(record, model) is allowed


def test_a_key_let_in_before_is_refused_once_the_next_cache_has_it_revoked() -> None:
    plaintext, record = user_key()
    before = cache(record)
    for _ in range(2):  # the second time from the tokens the cache remembers
        assert before.authenticate(f"Bearer {plaintext}", NOW) == record

    after = cache(record.model_copy(update={"revoked": True}))

    with pytest.raises(Unauthenticated):
        after.authenticate(f"Bearer {plaintext}", NOW)


def test_a_remembered_key_still_expires() -> None:
    plaintext, record = user_key()
    keys = cache(record.model_copy(update={"expires_at": NOW + timedelta(seconds=1)}))
    keys.authenticate(f"Bearer {plaintext}", NOW)
    with pytest.raises(Unauthenticated) as exc:
        keys.authenticate(f"Bearer {plaintext}", NOW + timedelta(seconds=2))
    assert exc.value.code == "expired_api_key"


def test_unknown_tokens_are_not_remembered() -> None:
    _, record = user_key()
    keys = cache(record)
    for i in range(50):
        with pytest.raises(Unauthenticated):
            keys.authenticate(f"Bearer sk-llmgw-made-up-{i}", NOW)
    assert not keys._seen
