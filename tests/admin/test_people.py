"""People signed in to the console: their grants from the provider's groups, their sessions
cached per server yet ended everywhere, their timeouts, and the sign-in limit per address."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest

from llmgw.admin.people import TOUCH_S, People, SignedIn
from llmgw.core.clock import FakeClock
from llmgw.core.errors import NotFound, RateLimited, SignInRefused
from llmgw.core.settings import SsoSettings
from llmgw.core.users import Grant, Role
from llmgw.store.store import Store

ISSUER = "https://idp.example"


def sso_settings(**kw: object) -> SsoSettings:
    values: dict[str, object] = {
        "issuer": ISSUER, "client_id": "llmgw", "client_secret_file": "/etc/llmgw/secret",
        "redirect_url": "https://llm.example/ui/sso/callback",
        "roles": {"llmgw-admins": "admin", "ops": "operator", "ml": "team-admin:ml",
                  "staff": "viewer"},
        "idle_timeout_s": 1800, "max_age_s": 7200, "refresh_s": 600, "signin_per_minute": 10,
    }
    values.update(kw)
    return SsoSettings.model_validate(values)


def alice_admin(**kw: object) -> SignedIn:
    fields: dict[str, object] = {"issuer": ISSUER, "subject": "alice", "email": "alice@example.test",
                                 "email_verified": True, "name": "Alice",
                                 "groups": ("llmgw-admins", "staff")}
    fields.update(kw)
    return SignedIn(**fields)  # type: ignore[arg-type]


def server(store: Store, clock: FakeClock, **kw: object) -> People:
    """One server's People: its cache lives while the store's revision stays."""
    return People(store, clock, sso_settings(**kw), store.revision)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def store(any_store: Store) -> Store:
    """Each backend: sessions and sign-in counts are the store's, SQLite's or PostgreSQL's."""
    return any_store


async def test_a_user_gets_the_most_their_groups_map_to(store: Store, clock: FakeClock) -> None:
    token, visit = await server(store, clock).sign_in(alice_admin(), "10.0.0.7")
    assert visit.user.grant == Grant(role=Role.ADMIN)
    assert visit.person is not None and visit.person.key.scope.value == "admin"
    [entry] = [e for e in store.audit.entries() if e.action == "sign-in"]
    assert (entry.by, entry.address) == ("alice@example.test (sso)", "10.0.0.7")
    assert store.sessions.find(token) is not None


async def test_a_user_in_no_mapped_group_has_no_access_unless_a_default_is_set(
        store: Store, clock: FakeClock) -> None:
    _, visit = await server(store, clock).sign_in(alice_admin(groups=("other",)), "10.0.0.7")
    assert visit.person is None
    _, visit = await server(store, clock, default_role="viewer").sign_in(
        alice_admin(groups=()), "10.0.0.7")
    assert visit.user.grant == Grant(role=Role.VIEWER)


@pytest.mark.parametrize(("email", "verified"), [("alice@example.test", True),
                                                   ("alice@corp.example", False), (None, True)])
async def test_only_verified_emails_of_allowed_domains_sign_in(
        store: Store, clock: FakeClock, email: str | None, verified: bool) -> None:
    people = server(store, clock, allowed_domains=["corp.example"])
    with pytest.raises(SignInRefused, match="not of a domain allowed"):
        await people.sign_in(alice_admin(email=email, email_verified=verified), "10.0.0.7")
    assert store.sessions.list() == []
    _, visit = await people.sign_in(alice_admin(email="alice@Corp.Example"), "10.0.0.7")
    assert visit.person is not None


async def test_a_role_set_by_email_never_lands_on_an_account_that_only_claims_it(
        store: Store, clock: FakeClock) -> None:
    # No allowed_domains (the default): anyone the provider signs in gets a user. Mallory's
    # account claims alice's email without the provider verifying it.
    people = server(store, clock)
    _, visit = await people.sign_in(alice_admin(subject="mallory", name="Mallory", groups=(),
                                                email_verified=False), "10.0.0.66")
    assert (visit.user.email, visit.user.email_verified) == (None, False)
    with pytest.raises(NotFound):
        await people.set_grant("alice@example.test", Grant(role=Role.ADMIN))
    [entry] = [e for e in store.audit.entries() if e.action == "sign-in"]
    assert entry.by == "mallory (sso)"  # not in alice's name either
    # The real alice, verified, is the one the admin's command finds.
    _, alice = await people.sign_in(alice_admin(groups=()), "10.0.0.7")
    assert alice.user.email_verified
    assert (await people.set_grant("ALICE@example.test", Grant(role=Role.ADMIN))).id == alice.user.id
    mallory = store.users.get(visit.user.id)
    assert mallory.grant is None and mallory.email is None


async def test_a_page_reads_the_store_only_when_its_revision_moved(store: Store, clock: FakeClock) -> None:
    people = server(store, clock)
    token, _ = await people.sign_in(alice_admin(), "10.0.0.7")
    assert await people.resolve(token) is not None
    # Gone from the store behind the cache's back (no revision moved): the cache still answers,
    # so the page cost no read; a change (fresh) reads the store and is refused.
    with store.engine.begin() as conn:
        conn.exec_driver_sql("DELETE FROM console_sessions")
    assert await people.resolve(token) is not None
    assert await people.resolve(token, fresh=True) is None


async def test_a_session_ended_on_one_server_is_refused_by_another(store: Store, clock: FakeClock) -> None:
    one, two = server(store, clock), server(store, clock)
    token, visit = await one.sign_in(alice_admin(), "10.0.0.7")
    assert await two.resolve(token) is not None  # cached on the second server
    await one.end(visit, "signed out", "10.0.0.8")
    assert await one.resolve(token) is None
    assert await two.resolve(token) is None  # the revision moved: its cache is dropped
    ended = next(e for e in store.audit.entries() if e.action == "end")
    assert (ended.by, ended.address) == ("alice@example.test (sso)", "10.0.0.8")
    assert ended.after == {"reason": "signed out"}


async def test_an_admin_demoting_a_user_reaches_their_cached_sessions(store: Store, clock: FakeClock) -> None:
    one, two = server(store, clock), server(store, clock)
    token, visit = await one.sign_in(alice_admin(), "10.0.0.7")
    assert (await two.resolve(token)).user.grant == Grant(role=Role.ADMIN)  # type: ignore[union-attr]
    await one.set_grant("alice@example.test", Grant(role=Role.VIEWER))
    found = await two.resolve(token)
    assert found is not None and found.user.grant == Grant(role=Role.VIEWER)
    # Set by hand: a later sign-in with the admin group does not undo it.
    _, again = await one.sign_in(alice_admin(), "10.0.0.7")
    assert again.user.grant == Grant(role=Role.VIEWER) and again.user.role_source == "admin"


async def test_the_provider_demoting_a_user_reaches_their_other_sessions(
        store: Store, clock: FakeClock) -> None:
    one, two = server(store, clock), server(store, clock)
    first, _ = await one.sign_in(alice_admin(), "10.0.0.7")
    assert await two.resolve(first) is not None
    await one.sign_in(alice_admin(groups=("staff",)), "10.0.0.9")
    found = await two.resolve(first)
    assert found is not None and found.user.grant == Grant(role=Role.VIEWER)


async def test_an_admin_ends_every_session_of_a_user(store: Store, clock: FakeClock) -> None:
    people = server(store, clock)
    tokens = [(await people.sign_in(alice_admin(), "10.0.0.7"))[0] for _ in range(3)]
    user, ended = await people.end_sessions("alice@example.test")
    assert ended == 3 and user.subject == "alice"
    assert [await people.resolve(t) for t in tokens] == [None, None, None]


async def test_an_idle_session_ends(store: Store, clock: FakeClock) -> None:
    people = server(store, clock)
    token, visit = await people.sign_in(alice_admin(), "10.0.0.7")
    clock.advance(TOUCH_S + 1)
    assert await people.resolve(token) is not None
    # The use was written, once: another server sees the session as used then.
    [stored] = store.sessions.list()
    assert stored.last_seen_at == clock.now()
    clock.advance(1799)
    assert await people.resolve(token) is not None
    clock.advance(1800)
    assert await people.resolve(token) is None
    assert await server(store, clock).resolve(token) is None


async def test_a_busy_session_still_ends_at_its_absolute_end(store: Store, clock: FakeClock) -> None:
    people = server(store, clock)
    token, _ = await people.sign_in(alice_admin(), "10.0.0.7")
    for _ in range(7199 // 600):
        clock.advance(600)
        assert await people.resolve(token) is not None
    clock.advance(7200 - 600 * (7199 // 600))
    assert await people.resolve(token) is None


async def test_a_session_asks_the_provider_again_after_refresh_s(store: Store, clock: FakeClock) -> None:
    people = server(store, clock)
    token, visit = await people.sign_in(alice_admin(), "10.0.0.7")
    clock.advance(599)
    assert not people.due_refresh(visit)
    clock.advance(1)
    visit = await people.resolve(token)  # type: ignore[assignment]
    assert people.due_refresh(visit)
    renewed = await people.refreshed(visit, alice_admin(groups=("ops",)), "10.0.0.7")
    assert not people.due_refresh(renewed)
    assert renewed.user.grant == Grant(role=Role.OPERATOR)


async def test_a_renewal_that_signs_in_another_account_ends_the_session(
        store: Store, clock: FakeClock) -> None:
    people = server(store, clock)
    token, visit = await people.sign_in(alice_admin(), "10.0.0.7")
    with pytest.raises(SignInRefused, match="another account"):
        await people.refreshed(visit, alice_admin(subject="mallory"), "10.0.0.7")
    assert await people.resolve(token) is None


async def test_sign_in_attempts_are_limited_per_address_across_servers(
        store: Store, clock: FakeClock) -> None:
    one, two = server(store, clock), server(store, clock)
    for people in (one, two) * 5:
        await people.attempt("10.0.0.7")
    with pytest.raises(RateLimited) as refused:
        await two.attempt("10.0.0.7")
    assert refused.value.code == "signin_rate_exceeded" and refused.value.retry_after_s >= 1
    await one.attempt("10.0.0.8")  # another address has its own count
    clock.advance(60)
    await one.attempt("10.0.0.7")  # a new minute


async def test_a_burst_of_sign_in_attempts_gets_exactly_the_limit(store: Store, clock: FakeClock) -> None:
    servers = [server(store, clock) for _ in range(3)]
    results = await asyncio.gather(*(servers[i % 3].attempt("10.0.0.7") for i in range(30)),
                                   return_exceptions=True)
    assert sum(r is None for r in results) == 10
    assert all(isinstance(r, RateLimited) for r in results if r is not None)


async def test_old_sign_in_windows_and_sessions_are_pruned(store: Store, clock: FakeClock) -> None:
    people = server(store, clock)
    await people.attempt("10.0.0.7")
    token, visit = await people.sign_in(alice_admin(), "10.0.0.7")
    await people.end(visit, "signed out", "10.0.0.7")
    later = clock.now() + timedelta(days=1)
    assert store.signins.prune(later) == 1
    assert store.sessions.prune(later) == 1
