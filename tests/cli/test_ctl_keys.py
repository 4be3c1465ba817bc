"""`llmgw ctl key …` as people read it: the key table fits the terminal, names and keys whole."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from llmgw.core.protocol.keys import KeyOut
from llmgw.core.types import KeyScope, Limits
from tests.cli.conftest import OfflineCtl
from tests.cli.test_ctl_guard import flat, row


def key(id: str, name: str, prefix: str, last4: str, **fields: Any) -> dict[str, Any]:
    out = KeyOut(id=id, name=name, prefix=prefix, last4=last4, label=f"{prefix}…{last4}", **fields)
    return out.model_dump(mode="json")


ADMIN = "sk-llmgw-AbCd"
KEYS = {"data": [
    key("key-3f9a0c1b2d", "admin", ADMIN, "wxyz", scope=KeyScope.ADMIN, by="llmgw server init"),
    key("key-77aa0c1b2d", "demo-judge-eval", "sk-llmgw-Qr5t", "9aZ1", scope=KeyScope.USER,
        models=["gemma3-270m", "demo-judge"], limits=Limits(rpm=30, tpm=10000),
        expires_at=datetime(2026, 12, 3, 7, 18, 22, tzinfo=UTC), by=f"admin ({ADMIN}…wxyz)",
        note="the guard's evaluation set"),
]}


def test_key_list_fits_80_columns_with_every_name_and_key_whole(offline_ctl: OfflineCtl) -> None:
    out = offline_ctl({"/admin/v1/keys": KEYS}, "key", "list", columns=80)
    lines = out.splitlines()
    assert max(len(line) for line in lines) <= 80, out
    for k in KEYS["data"]:
        assert any(f" {k['name']} " in line and f" {k['label']} " in line for line in lines), out
    assert "not shown at 80 columns:" in flat(out) and "--json" in out


def test_key_list_shows_every_column_when_there_is_room(offline_ctl: OfflineCtl) -> None:
    out = offline_ctl({"/admin/v1/keys": KEYS}, "key", "list", columns=250)
    cells = row(out, "key-77aa0c1b2d")
    assert cells[1:4] == ["demo-judge-eval", "sk-llmgw-Qr5t…9aZ1", "user"]
    assert cells[5:8] == ["gemma3-270m, demo-judge", "rpm 30, tpm 10000", "2026-12-03 07:18"]
    assert cells[-1] == "the guard's evaluation set" and "not shown" not in out


def test_key_show_says_what_the_key_uses_now_and_where_that_was_counted(offline_ctl: OfflineCtl) -> None:
    shown = dict(KEYS["data"][1], live={"source": "redis", "requests_this_minute": 12,
                                        "tokens_this_minute": 3400, "in_flight": 2,
                                        "tokens_today": 51000, "tokens_this_month": 900000})
    out = offline_ctl({"/admin/v1/keys/key-77aa0c1b2d": shown}, "key", "show", "key-77aa0c1b2d",
                      columns=200)
    assert ("now (redis): 12 requests and 3,400 tokens this minute, 2 in flight; 51,000 tokens "
            "today, 900,000 this month") in out
