"""`llmgw ctl audit` against a real `server run` (no model needed): who changed what, filtered."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from llmgw.cli.ctl_audit import CHANGE_CHARS, change, since_time
from llmgw.core.audit import AuditEntry, AuditKind
from tests.support.server_process import LlmgwServer

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LlmgwServer]:
    server = LlmgwServer.init(tmp_path_factory.mktemp("audit") / "data", "--no-guard",
                              "--no-embedded-node")
    server.start()
    try:
        yield server
    finally:
        server.stop()


def entries(server: LlmgwServer, *args: str) -> list[dict[str, Any]]:
    return list(json.loads(server.ctl("--json", "audit", *args).stdout)["data"])


def test_ctl_audit_shows_who_changed_what_and_filters(server: LlmgwServer) -> None:
    policy = {"judges": ["qwen3guard-0.6b"], "budget_ms": 3000}
    server.call("PUT", "/admin/v1/guard/policies/night", policy)
    server.call("PUT", "/admin/v1/guard/policies/night", {**policy, "budget_ms": 900})
    server.call("PUT", "/admin/v1/limits/default", {"rpm": 30})

    table = server.ctl("audit", "--kind", "policy", "--since", "10m").stdout
    assert "budget_ms: 3000 → 900" in table and "night" in table
    assert "rpm" not in table  # the limits change is another kind

    found = entries(server, "--who", "admin", "--since", "1h")
    assert [(e["kind"], e["action"], e["target"]) for e in found] == [
        ("limits", "set", "default"), ("policy", "set", "night"), ("policy", "set", "night")]
    assert entries(server, "--who", "nobody-by-this-name") == []
    assert entries(server, "--since", "2999-01-01T00:00:00+00:00") == []

    wrong = server.ctl("audit", "--kind", "nonsense", check=False)
    assert wrong.returncode != 0 and "nonsense" in wrong.stderr


def test_since_takes_minutes_hours_days_ago_or_an_iso_time() -> None:
    assert since_time("30m", NOW) == (NOW - timedelta(minutes=30)).isoformat()
    assert since_time("12h", NOW) == (NOW - timedelta(hours=12)).isoformat()
    assert since_time("7d", NOW) == (NOW - timedelta(days=7)).isoformat()
    assert since_time("2026-11-01T00:00:00+00:00", NOW) == "2026-11-01T00:00:00+00:00"


def entry(before: dict[str, Any] | None, after: dict[str, Any] | None) -> AuditEntry:
    return AuditEntry(id=1, at=NOW, by="admin (sk-1…)", kind=AuditKind.POLICY, action="set",
                      target="p", before=before, after=after)


def test_a_change_shows_only_what_differs_and_stays_one_short_line() -> None:
    assert change(entry({"a": 1, "b": 2}, {"a": 1, "b": 3})) == "b: 2 → 3"
    assert change(entry(None, {"a": 1})) == "a=1"
    assert change(entry({"a": 1}, None)) == "a=1"
    long = change(entry(None, {"text": "x" * 500}))
    assert len(long) == CHANGE_CHARS and long.endswith("…")

