"""The console's signed cookies as plain data: what they hold, when they stop being accepted."""

from __future__ import annotations

from llmgw.api.console.oidc import Flow
from llmgw.api.console.session import (
    FLOW_MAX_AGE_S,
    PERSON_MAX_AGE_S,
    SESSION_MAX_AGE_S,
    Session,
    Sessions,
    console_secret,
)

SECRET = console_secret("11" * 32)


class Clock:
    def __init__(self, t: float = 1_800_000_000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def test_a_session_cookie_names_the_key_by_id_and_reads_back() -> None:
    sessions = Sessions(SECRET)
    value = sessions.issue("key-1")
    session = sessions.read(value)
    assert session is not None and session.key_id == "key-1"
    assert sessions.issue("key-1") != value  # each sign-in gets its own nonce, so its own CSRF token


def test_a_session_is_accepted_until_its_max_age_and_not_after() -> None:
    clock = Clock()
    sessions = Sessions(SECRET, clock)
    value = sessions.issue("key-1")
    clock.t += SESSION_MAX_AGE_S
    assert sessions.read(value) is not None
    clock.t += 2
    assert sessions.read(value) is None


def test_a_persons_cookie_lives_as_long_as_its_server_side_session_says() -> None:
    # 8 hours would cut a 12-hour [sso] session short: the server's session ends it instead.
    clock = Clock()
    sessions = Sessions(SECRET, clock)
    value = sessions.issue_person("token-1")
    clock.t += 12 * 3600
    session = sessions.read(value)
    assert session is not None and session.token == "token-1" and session.key_id is None
    clock.t += PERSON_MAX_AGE_S
    assert sessions.read(value) is None


def test_a_flow_cookie_is_read_back_for_ten_minutes_only() -> None:
    clock = Clock()
    sessions = Sessions(SECRET, clock)
    flow = Flow(state="s", nonce="n", verifier="v", return_to="/ui/models", silent=True)
    value = sessions.issue_flow(flow)
    assert sessions.read_flow(value) == flow
    assert sessions.read(value) is None  # signed for another purpose: never a session
    clock.t += FLOW_MAX_AGE_S + 1
    assert sessions.read_flow(value) is None


def test_a_tampered_or_foreign_cookie_is_no_session() -> None:
    sessions = Sessions(SECRET)
    value = sessions.issue("key-1")
    payload, stamp, signature = value.split(".")
    forged = Sessions(console_secret("22" * 32)).issue("key-admin")
    assert sessions.read(forged) is None  # another install's secret
    assert sessions.read(f"{payload}.{stamp}.{signature[:-2]}AA") is None
    assert sessions.read(f"{payload[:-2]}xx.{stamp}.{signature}") is None
    assert sessions.read("") is None and sessions.read(None) is None
    # A pre-sign-in cookie is signed for another purpose: never a session.
    pre, _ = sessions.issue_pre()
    assert sessions.read(pre) is None


def test_every_server_of_an_install_accepts_the_others_cookies() -> None:
    value = Sessions(console_secret("ab" * 32)).issue("key-1")
    assert Sessions(console_secret("ab" * 32)).read(value) == Session("key-1", _nonce(value))


def _nonce(value: str) -> str:
    session = Sessions(console_secret("ab" * 32)).read(value)
    assert session is not None
    return session.nonce


def test_the_csrf_token_belongs_to_one_nonce() -> None:
    sessions = Sessions(SECRET)
    token = sessions.csrf("n1")
    assert sessions.csrf_ok("n1", token)
    assert not sessions.csrf_ok("n2", token)
    assert not sessions.csrf_ok("n1", None) and not sessions.csrf_ok("n1", "")
    assert not Sessions(console_secret("22" * 32)).csrf_ok("n1", token)


def test_the_console_secret_is_not_the_key_secret() -> None:
    assert SECRET != bytes.fromhex("11" * 32)
    assert len(SECRET) == 32
