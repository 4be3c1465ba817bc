"""Creating, finding, revoking and rotating keys on a real store, with the minting rules."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from llmgw.admin.keys import KeyAdmin, visible
from llmgw.core.clock import FakeClock
from llmgw.core.errors import (
    Conflict,
    Forbidden,
    InvalidRequest,
    NotFound,
    RateLimited,
    Unauthenticated,
)
from llmgw.core.ids import hash_key
from llmgw.core.protocol.keys import KeyRequest
from llmgw.core.types import ApiKey, KeyScope, Limits, Team
from llmgw.gateway.auth import KeyCache
from llmgw.store.store import Store
from tests.factories import KEY_SECRET, NOW, admin_key, user_key


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(NOW)


class Install:
    """A KeyAdmin on a real store, its admin key, and the default limits it reads."""

    def __init__(self, store: Store, clock: FakeClock) -> None:
        self.store = store
        self.clock = clock
        self.default = Limits()
        self.changes = 0

        async def changed() -> None:
            self.changes += 1

        self.admin = KeyAdmin(store, clock, KEY_SECRET, lambda: self.default, on_change=changed)
        self.root_secret, root = admin_key(name="root")
        self.root = root.model_copy(update={"created_at": clock.now() - timedelta(days=1)})
        store.keys.create(self.root)

    async def create(self, minter: ApiKey | None = None, **fields: Any) -> tuple[ApiKey, str]:
        fields.setdefault("name", f"k{len(self.store.keys.list())}")  # live names are unique
        return await self.admin.create(KeyRequest(**fields), minter or self.root)

    def authenticate(self, secret: str) -> ApiKey:
        """As a server would after its next refresh: a cache built from the stored keys."""
        cache = KeyCache(KEY_SECRET, self.store.keys.list())
        return cache.authenticate(f"Bearer {secret}", self.clock.now())


@pytest.fixture
def install(store: Store, clock: FakeClock) -> Install:
    return Install(store, clock)


@pytest.fixture
async def minter(install: Install) -> ApiKey:
    """A user key allowed gemma3 models, rpm 10 and tpm 1000, expiring in 30 days."""
    key, _ = await install.create(name="team", models=["gemma3-*"], limits=Limits(rpm=10, tpm=1000),
                                  expires_in_days=30)
    return key


# --- admin keys create anything ----------------------------------------------------------------


async def test_an_admin_creates_any_key_and_only_its_hash_is_stored(
    install: Install, tmp_path: Path
) -> None:
    key, secret = await install.create(
        name="ops", scope=KeyScope.ADMIN, models=["*"], expires_in_days=3650,
        limits=Limits(rpm=1_000_000, tpm=10**9, concurrent=500), note="on call",
    )
    assert secret.startswith("sk-llmgw-") and len(secret) > 40
    assert key.hash == hash_key(KEY_SECRET, secret) and secret not in key.model_dump_json()
    assert key.prefix == secret[:13] and key.last4 == secret[-4:]
    assert key.scope == KeyScope.ADMIN and key.minted_by == install.root.id
    assert key.by == f"root ({install.root.label})"
    assert key.expires_at == NOW + timedelta(days=3650)
    assert install.store.keys.get(key.id) == key
    assert install.changes == 1  # caches are told at once

    # The plaintext is in no file of the database (WAL and journal included), the hash is.
    files = [p for p in tmp_path.iterdir() if p.name.startswith("llmgw.db")]
    stored = b"".join(p.read_bytes() for p in files)
    assert secret.encode() not in stored
    assert secret.split("sk-llmgw-")[1].encode() not in stored
    assert key.hash.encode() in stored

    assert install.authenticate(secret) == key


async def test_each_secret_is_different(install: Install) -> None:
    secrets = {(await install.create(name=f"k{i}"))[1] for i in range(20)}
    assert len(secrets) == 20


async def test_a_key_cannot_be_made_already_expired(install: Install, clock: FakeClock) -> None:
    with pytest.raises(InvalidRequest) as caught:
        await install.create(expires_at=clock.now() - timedelta(seconds=1))
    assert caught.value.param == "expires_at"


# --- what a user key may mint ------------------------------------------------------------------


async def test_a_user_key_mints_only_user_keys(install: Install, minter: ApiKey) -> None:
    with pytest.raises(Forbidden) as caught:
        await install.create(minter, name="escalate", scope=KeyScope.ADMIN)
    assert caught.value.status == 403 and caught.value.param == "scope"
    assert [k.name for k in install.store.keys.list()] == ["root", "team"]


async def test_a_user_key_grants_only_its_own_models(install: Install, minter: ApiKey) -> None:
    child, _ = await install.create(minter, models=["gemma3-1b", "gemma3-270m"])
    assert child.models == ["gemma3-1b", "gemma3-270m"]
    same, _ = await install.create(minter, models=["gemma3-*"])  # its own pattern, as is
    assert same.models == ["gemma3-*"]
    inherited, _ = await install.create(minter)
    assert inherited.models == ["gemma3-*"]

    for models in (["gpt-4o"], ["gemma3-1b", "qwen3guard-0.6b"], ["*"], ["gemma*"]):
        with pytest.raises(Forbidden) as caught:
            await install.create(minter, models=models)
        assert caught.value.status == 403 and caught.value.param == "models"
        assert next(m for m in models if not m.startswith("gemma3-")) in caught.value.message


async def test_a_minted_pattern_cannot_be_wider_than_the_minters(install: Install) -> None:
    # "gemma3-?b" grants gemma3-1b and gemma3-4b. The pattern "gemma3-*b", read as a model name,
    # matches "gemma3-?b" ('?' matches the '*'), but as a grant it reaches gemma3-12b and
    # gemma3-27b, which the minter itself may not use.
    small, _ = await install.create(name="small-models", models=["gemma3-?b"])
    with pytest.raises(Forbidden) as caught:
        await install.create(small, models=["gemma3-*b"])
    assert caught.value.param == "models" and "gemma3-*b" in caught.value.message
    child, _ = await install.create(small, models=["gemma3-4b"])
    assert child.models == ["gemma3-4b"]


async def test_a_user_key_without_a_model_list_grants_any_model(install: Install) -> None:
    open_key, _ = await install.create(name="open")
    child, _ = await install.create(open_key, models=["gpt-4o", "gemma3-*"])
    assert child.models == ["gpt-4o", "gemma3-*"]


async def test_minted_limits_inherit_what_they_leave_unset(install: Install, minter: ApiKey) -> None:
    child, _ = await install.create(minter, limits=Limits(rpm=5))
    assert child.limits == Limits(rpm=5, tpm=1000)
    # The minter sets no concurrency limit and there is no default: the child may set any.
    child, _ = await install.create(minter, limits=Limits(concurrent=50))
    assert child.limits == Limits(rpm=10, tpm=1000, concurrent=50)


@pytest.mark.parametrize(
    ("limits", "field"),
    [(Limits(rpm=11), "rpm"), (Limits(tpm=1001), "tpm"), (Limits(rpm=5, tpm=5000), "tpm")],
)
async def test_limits_above_the_minters_are_forbidden_naming_the_field(
    install: Install, minter: ApiKey, limits: Limits, field: str
) -> None:
    with pytest.raises(Forbidden) as caught:
        await install.create(minter, limits=limits)
    assert caught.value.status == 403 and caught.value.param == "limits"
    assert field in caught.value.message
    assert ("rpm" in caught.value.message) == (field == "rpm")


async def test_default_limits_count_as_the_minters_own(install: Install, minter: ApiKey) -> None:
    install.default = Limits(concurrent=4, tokens_per_day=100_000)
    child, _ = await install.create(minter)
    assert child.limits == Limits(rpm=10, tpm=1000, concurrent=4, tokens_per_day=100_000)
    with pytest.raises(Forbidden, match="concurrent"):
        await install.create(minter, limits=Limits(concurrent=5))
    with pytest.raises(Forbidden, match="tokens_per_day"):
        await install.create(minter, limits=Limits(tokens_per_day=100_001))


async def test_a_minted_key_cannot_outlive_its_minter(
    install: Install, minter: ApiKey, clock: FakeClock
) -> None:
    assert minter.expires_at == clock.now() + timedelta(days=30)
    with pytest.raises(Forbidden) as caught:
        await install.create(minter, expires_in_days=31)
    assert caught.value.status == 403 and caught.value.param == "expires_at"
    with pytest.raises(Forbidden):
        await install.create(minter, expires_at=minter.expires_at + timedelta(seconds=1))

    shorter, _ = await install.create(minter, expires_in_days=10)
    assert shorter.expires_at == clock.now() + timedelta(days=10)
    unset, _ = await install.create(minter)  # no expiry asked: it ends with its minter
    assert unset.expires_at == minter.expires_at


async def test_a_minted_key_records_who_minted_it(install: Install, minter: ApiKey) -> None:
    child, secret = await install.create(minter, name="child")
    assert child.minted_by == minter.id and child.by == f"team ({minter.label})"
    assert child.scope == KeyScope.USER
    assert install.authenticate(secret) == child


# --- revoke, rotate, expire --------------------------------------------------------------------


async def test_a_revoked_key_no_longer_authenticates(install: Install) -> None:
    key, secret = await install.create(name="leaving")
    assert install.authenticate(secret) == key

    revoked, beneath = await install.admin.revoke("leaving")
    assert revoked.revoked and revoked.id == key.id and beneath == 0
    with pytest.raises(Unauthenticated) as caught:
        install.authenticate(secret)
    assert caught.value.status == 401 and caught.value.code == "invalid_api_key"
    assert install.changes == 2  # created, revoked: each refreshes the caches at once


async def test_rotation_replaces_the_secret_and_keeps_the_settings(
    install: Install, minter: ApiKey
) -> None:
    old, old_secret = await install.create(minter, name="svc", models=["gemma3-270m"],
                                           limits=Limits(rpm=3), note="billing job")
    new, new_secret = await install.admin.rotate("svc", install.root)

    with pytest.raises(Unauthenticated):
        install.authenticate(old_secret)
    assert install.authenticate(new_secret) == new
    assert new_secret != old_secret
    assert new.id != old.id and new.hash != old.hash and new.prefix == new_secret[:13]
    keep = ("name", "scope", "models", "limits", "expires_at", "note", "minted_by")
    assert {f: getattr(new, f) for f in keep} == {f: getattr(old, f) for f in keep}
    assert old.label in new.by
    assert install.store.keys.get(old.id).revoked

    # The name now finds the new key; the old one cannot be rotated again.
    assert (await install.admin.find("svc")).id == new.id
    with pytest.raises(InvalidRequest, match="revoked"):
        await install.admin.rotate(old.id, install.root)


async def test_an_expired_key_is_401_expired_api_key(install: Install, clock: FakeClock) -> None:
    key, secret = await install.create(name="temp", expires_in_days=1)
    clock.advance(86399)
    assert install.authenticate(secret) == key
    clock.advance(1)
    with pytest.raises(Unauthenticated) as caught:
        install.authenticate(secret)
    assert caught.value.status == 401 and caught.value.code == "expired_api_key"


# --- finding keys ------------------------------------------------------------------------------


async def test_find_by_id_name_or_prefix(install: Install) -> None:
    key, secret = await install.create(name="finder")
    await install.create(name="other")
    assert await install.admin.find(key.id) == key
    assert await install.admin.find("finder") == key
    assert await install.admin.find(key.prefix) == key
    assert await install.admin.find(secret[:20]) == key  # anything that starts with its prefix


async def test_find_refuses_unknown_and_ambiguous_refs(
    install: Install, clock: FakeClock
) -> None:
    # Names are unique among live keys; two expired keys can still share one.
    a, _ = await install.create(name="twin", expires_in_days=1)
    clock.advance(86400)
    await install.create(name="twin", expires_in_days=1)
    clock.advance(86400)
    with pytest.raises(NotFound, match="give its id"):
        await install.admin.find("twin")
    assert (await install.admin.find(a.id)).id == a.id
    with pytest.raises(NotFound) as caught:
        await install.admin.find("ghost")
    assert caught.value.status == 404 and "ghost" in caught.value.message
    with pytest.raises(NotFound):
        await install.admin.revoke("ghost")


async def test_a_revoked_name_can_be_reused(install: Install) -> None:
    old, _ = await install.create(name="ci")
    await install.admin.revoke(old.id)
    new, _ = await install.create(name="ci")
    assert (await install.admin.find("ci")).id == new.id


async def test_default_limits_are_stored(install: Install) -> None:
    assert await install.admin.default_limits() == Limits()
    await install.admin.set_default_limits(Limits(rpm=100, tokens_per_month=10**6))
    assert install.store.keys.default_limits() == Limits(rpm=100, tokens_per_month=10**6)
    await install.admin.set_default_limits(Limits())
    assert await install.admin.default_limits() == Limits()


# --- families: revoked together, capped together, one name per live key ----------------------


async def test_revoking_a_key_revokes_every_key_minted_beneath_it(install: Install) -> None:
    parent, _ = await install.create(name="parent")
    child, child_secret = await install.create(parent, name="child")
    grandchild, grandchild_secret = await install.create(child, name="grandchild")
    other, other_secret = await install.create(name="other")

    key, beneath = await install.admin.revoke("parent")
    assert key.revoked and beneath == 2
    assert [k.name for k in install.store.keys.list() if k.revoked] == ["parent", "child",
                                                                         "grandchild"]
    for secret in (child_secret, grandchild_secret):
        with pytest.raises(Unauthenticated):
            install.authenticate(secret)
    # A mint by a key revoked since its request was authenticated is refused in the write.
    with pytest.raises(Unauthenticated):
        await install.create(grandchild, name="late")
    assert install.authenticate(other_secret) == other


async def test_revoking_an_admin_key_leaves_the_keys_it_made(install: Install) -> None:
    ops, _ = await install.create(name="ops", scope=KeyScope.ADMIN)
    user, secret = await install.create(ops, name="made-by-ops")
    _, beneath = await install.admin.revoke("ops")
    assert beneath == 0 and install.authenticate(secret) == user


async def test_rotation_keeps_the_keys_a_key_minted(install: Install) -> None:
    parent, _ = await install.create(name="parent")
    child, child_secret = await install.create(parent, name="child")
    new, _ = await install.admin.rotate("parent", install.root)
    assert new.name == "parent"
    assert install.authenticate(child_secret).minted_by == new.id  # the family goes on
    assert install.store.keys.get(child.id).minted_by == new.id


async def test_the_101st_live_key_of_a_family_is_refused(install: Install) -> None:
    parent, _ = await install.create(name="parent")
    child, _ = await install.create(parent, name="child")
    # A burst of mints from the whole family, all at once: exactly the cap gets through.
    tries = [install.create(parent if i % 2 else child, name=f"k{i}") for i in range(110)]
    results = await asyncio.gather(*tries, return_exceptions=True)
    refusals = [r for r in results if isinstance(r, BaseException)]
    assert len(results) - len(refusals) == 99  # with the child: 100 minted in the family
    assert all(isinstance(r, Forbidden) and "100 live minted keys" in r.message for r in refusals)

    # An admin key mints without a cap.
    await install.create(name="admin-made")


async def test_a_family_mints_at_most_100_keys_an_hour(install: Install, clock: FakeClock) -> None:
    parent, _ = await install.create(name="parent")
    for i in range(100):
        await install.create(parent, name=f"k{i}", expires_in_days=0.0001)  # ~9 s each
    clock.advance(60)  # all expired: none is live, but the hour's 100 are spent
    with pytest.raises(RateLimited) as caught:
        await install.create(parent, name="more")
    assert caught.value.status == 429 and 3500 <= caught.value.retry_after_s <= 3540
    clock.advance(caught.value.retry_after_s)
    await install.create(parent, name="more")


async def test_a_name_is_refused_while_a_live_key_has_it(install: Install, minter: ApiKey) -> None:
    with pytest.raises(Conflict) as caught:
        await install.create(minter, name="root")  # the admin key's name
    assert caught.value.status == 409 and caught.value.param == "name"
    with pytest.raises(Conflict):
        await install.create(name="team")
    assert (await install.admin.find("root")).id == install.root.id


async def test_a_naive_expiry_is_taken_as_utc(install: Install) -> None:
    key, _ = await install.create(name="naive", expires_at=datetime(2027, 1, 1, 12, 0))
    assert key.expires_at == datetime(2027, 1, 1, 12, 0, tzinfo=UTC)


def test_a_user_key_sees_itself_and_every_key_minted_beneath_it_and_nothing_else() -> None:
    _, root = admin_key(name="root")
    _, alice = user_key(name="alice")
    child = user_key(name="child")[1].model_copy(update={"minted_by": alice.id})
    grandchild = user_key(name="grandchild")[1].model_copy(update={"minted_by": child.id})
    _, bob = user_key(name="bob")
    nephew = user_key(name="nephew")[1].model_copy(update={"minted_by": bob.id})
    keys = [root, alice, child, grandchild, bob, nephew]
    assert visible(alice, keys) == [alice, child, grandchild]
    assert visible(child, keys) == [child, grandchild]
    assert visible(grandchild, keys) == [grandchild]
    assert visible(root, keys) == keys and visible(None, keys) == keys



async def test_a_burst_of_a_team_admins_mints_stops_at_the_cap(install: Install) -> None:
    install.store.teams.put(Team(name="red", limits=Limits(rpm=10)), "test", install.clock.now(),
                            replace=False)
    lead, _ = await install.create(name="lead", team="red", team_admin=True)
    tries = [install.create(lead, name=f"k{i}") for i in range(110)]
    results = await asyncio.gather(*tries, return_exceptions=True)
    made = [r for r in results if not isinstance(r, BaseException)]
    assert len(made) == 100  # its keys are the team's, but its minting is capped all the same
    assert all(key.team == "red" and key.minted_by == lead.id for key, _ in made)
    assert all(isinstance(r, Forbidden) for r in results if isinstance(r, BaseException))


async def test_a_revoked_team_admin_mints_nothing(install: Install) -> None:
    install.store.teams.put(Team(name="red"), "test", install.clock.now(), replace=False)
    lead, secret = await install.create(name="lead", team="red", team_admin=True)
    await install.admin.revoke(lead.id)
    with pytest.raises(Unauthenticated):
        install.authenticate(secret)
    with pytest.raises(Unauthenticated):  # a request authenticated just before the revocation
        await install.create(install.store.keys.get(lead.id), name="late")


async def test_a_burst_of_a_team_admin_persons_mints_stops_at_the_cap(install: Install) -> None:
    # A team admin signed in to the console is no key: its keys start no family, yet its
    # minting is capped as a team admin key's is.
    from llmgw.core.users import Grant, Person, Role, User

    install.store.teams.put(Team(name="red"), "test", install.clock.now(), replace=False)
    tara = User(id="usr-0123456789", issuer="https://idp.example", subject="tara",
                email="tara@example.test", email_verified=True, created_at=NOW,
                signed_in_at=NOW)
    person = Person(tara, Grant(role=Role.TEAM_ADMIN, team="red")).key
    results = await asyncio.gather(*(install.create(person, name=f"k{i}") for i in range(110)),
                                   return_exceptions=True)
    made = [r for r in results if not isinstance(r, BaseException)]
    assert len(made) == 100, {repr(r) for r in results if isinstance(r, BaseException)}
    assert all(key.team == "red" and key.minted_by is None and key.by == "tara@example.test (sso)"
               for key, _ in made)
    refused = [r for r in results if isinstance(r, BaseException)]
    assert all(isinstance(r, Forbidden) and "you already hold 100 live minted keys" in r.message
               for r in refused)


# --- a team admin key mints within its team's grants and its own --------------------------------


@pytest.fixture
async def lead(install: Install) -> ApiKey:
    """Team red's admin key (the team may call gemma3 and qwen3 models, rpm 100), itself
    limited to gemma3 models, rpm 10, and 30 days."""
    install.store.teams.put(Team(name="red", models=["gemma3-*", "qwen3-*"], limits=Limits(rpm=100)),
                            "test", install.clock.now(), replace=False)
    key, _ = await install.create(name="lead", team="red", team_admin=True, models=["gemma3-*"],
                                  limits=Limits(rpm=10), expires_in_days=30)
    return key


async def test_a_team_admin_key_grants_only_models_it_may_call_itself(
        install: Install, lead: ApiKey) -> None:
    with pytest.raises(Forbidden) as caught:  # the team's, but not the team admin's
        await install.create(lead, models=["qwen3-8b"])
    assert caught.value.status == 403 and caught.value.param == "models"
    assert "qwen3-8b" in caught.value.message
    made, _ = await install.create(lead)
    assert made.models == ["gemma3-*"] and made.team == "red" and made.minted_by == lead.id


async def test_a_key_a_team_admin_mints_without_limits_gets_its_limits_and_expiry(
        install: Install, lead: ApiKey) -> None:
    made, _ = await install.create(lead)
    assert made.limits.rpm == 10 and made.expires_at == lead.expires_at
    for asked, param in [({"limits": Limits(rpm=11)}, "limits"),
                         ({"expires_in_days": 31}, "expires_at")]:
        with pytest.raises(Forbidden) as caught:
            await install.create(lead, **asked)
        assert caught.value.param == param


async def test_a_team_admin_persons_keys_are_bound_by_the_team_alone(install: Install) -> None:
    from llmgw.core.users import Grant, Person, Role, User

    install.store.teams.put(Team(name="red", models=["gemma3-*"], limits=Limits(rpm=100)), "test",
                            install.clock.now(), replace=False)
    tara = User(id="usr-0123456789", issuer="https://idp.example", subject="tara",
                email="tara@example.test", created_at=NOW, signed_in_at=NOW)
    person = Person(tara, Grant(role=Role.TEAM_ADMIN, team="red")).key
    made, _ = await install.create(person)
    assert made.minted_by is None and made.models == ["gemma3-*"] and made.limits == Limits()
    with pytest.raises(Forbidden) as caught:
        await install.create(person, limits=Limits(rpm=101))
    assert caught.value.param == "limits"


async def test_revoking_a_team_admin_revokes_the_keys_it_minted(
        install: Install, lead: ApiKey) -> None:
    made, secret = await install.create(lead)
    assert install.authenticate(secret) == made
    _, beneath = await install.admin.revoke(lead.id)
    assert beneath == 1 and install.store.keys.get(made.id).revoked
    with pytest.raises(Unauthenticated):  # as every server's cache has it after its refresh
        install.authenticate(secret)


async def test_a_key_a_team_admin_minted_expires_with_it(
        install: Install, lead: ApiKey, clock: FakeClock) -> None:
    made, secret = await install.create(lead)
    # One minted before team admins' expiry bound what they mint, with no expiry of its own.
    older = made.model_copy(update={"id": "key-older", "name": "older", "hash": "h",
                                    "expires_at": None})
    install.store.keys.create(older)
    assert lead.expires_at is not None
    clock.advance((lead.expires_at - clock.now()).total_seconds())
    with pytest.raises(Unauthenticated) as caught:
        install.authenticate(secret)
    assert caught.value.code == "expired_api_key"
    cache = KeyCache(KEY_SECRET, install.store.keys.list())
    with pytest.raises(Unauthenticated) as caught:
        cache.principal(older.id, clock.now())
    assert caught.value.code == "expired_api_key"
