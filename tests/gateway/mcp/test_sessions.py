"""Sealed MCP sessions: any process opens one it did not issue; nobody else's, and no forgery."""

from __future__ import annotations

import base64

import orjson

from llmgw.gateway.mcp.sessions import Session, seal, unseal
from tests.factories import KEY_SECRET

OPENED = Session("key-alice", "2025-06-18", None, 1_700_000_000)


def test_a_session_opens_on_any_process_with_the_installs_secret() -> None:
    sid = seal(KEY_SECRET, OPENED)
    assert unseal(KEY_SECRET, sid, "key-alice", None) == OPENED


def test_a_session_replayed_by_another_key_or_on_another_bundle_opens_as_nothing() -> None:
    sid = seal(KEY_SECRET, OPENED)
    assert unseal(KEY_SECRET, sid, "key-mallory", None) is None
    assert unseal(KEY_SECRET, sid, "key-alice", "web") is None


def test_a_session_sealed_with_another_secret_opens_as_nothing() -> None:
    assert unseal(KEY_SECRET, seal(b"another install", OPENED), "key-alice", None) is None


def test_an_altered_session_opens_as_nothing() -> None:
    version, payload, mac = seal(KEY_SECRET, OPENED).split(".")
    # The payload rewritten to name the attacker's key, the MAC kept.
    forged = base64.urlsafe_b64encode(
        orjson.dumps(["key-mallory", "2025-06-18", None, 1_700_000_000])).rstrip(b"=").decode()
    assert unseal(KEY_SECRET, f"{version}.{forged}.{mac}", "key-mallory", None) is None
    assert unseal(KEY_SECRET, f"{version}.{payload}.{mac[:-1]}x", "key-alice", None) is None
    for junk in ("", "v1", "v1..", "v2." + payload + "." + mac, "x" * 5000):
        assert unseal(KEY_SECRET, junk, "key-alice", None) is None
