"""At 80 columns each ctl table keeps the columns that answer what it is read for, and leaves out
the least useful first: a failed job's error, the judge keeper's reason, the audit log's target
and change, the key names usage is read by, a policy's budget and what a failure does."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from llmgw.core.audit import AuditEntry, AuditKind
from llmgw.core.guard import Policy
from llmgw.core.protocol.guard import GuardOut, JudgeStatusOut
from llmgw.core.protocol.models import JobOut, JobState, ServeRequest
from llmgw.core.types import HubSource
from tests.cli.conftest import OfflineCtl

AT = datetime(2026, 12, 3, 13, 36, 27, tzinfo=UTC)
BY = "admin (sk-llmgw-Ab3d…x9Qz)"


def fits(out: str) -> list[str]:
    lines = out.splitlines()
    assert max(len(line) for line in lines) <= 80, out
    return lines


def header(out: str) -> list[str]:
    line = next(line for line in out.splitlines() if "┃" in line)
    return [c.strip() for c in line.split("┃")[1:-1]]


def column(out: str, name: str) -> str:
    """The text of one column over every row's lines, its folded cells joined."""
    i = header(out).index(name)
    cells = [line.split("│")[1:-1] for line in out.splitlines() if line.startswith("│")]
    return " ".join(c[i].strip() for c in cells if c[i].strip())


def data(*items: Any) -> dict[str, Any]:
    return {"data": [i.model_dump(mode="json") for i in items]}


def test_a_failed_jobs_error_shows_at_80_columns(offline_ctl: OfflineCtl) -> None:
    job = JobOut(id="job-588b700edf", state=JobState.FAILED, created_at=AT, bytes_total=253_000_000,
                 bytes_done=12_000_000, error="acme/tiny-GGUF/tiny.gguf: repo not found (or private: "
                 "set HF_TOKEN)",
                 request=ServeRequest(name="gemma-3-270m-q4_k_m", by=BY, source=HubSource(
                     kind="hf", repo="acme/tiny-GGUF", file="tiny.gguf")))
    out = offline_ctl({"/admin/v1/jobs": data(job)}, "job", "list", columns=80)
    fits(out)
    assert header(out)[:3] == ["id", "model", "state"] and header(out)[-1] == "error", out
    assert "repo not found (or private: set HF_TOKEN)" in column(out, "error"), out


def test_the_judge_keepers_reason_shows_at_80_columns(offline_ctl: OfflineCtl) -> None:
    judge = JudgeStatusOut(judge="qwen3guard-0.6b", source="known", note="", format=None,
                           in_catalog=False, replicas_ready=0, keeper_server="vm-15942",
                           keeper="in grace until 2026-12-03T13:46:06+00:00", p50_ms=212.0,
                           p99_ms=480.5, judgments=12, slots=4, in_flight=1, queue_depth=2,
                           sustained_per_s=3.5)
    out = offline_ctl({"/admin/v1/guard/judges": data(judge)}, "guard", "judge", "status", columns=80)
    fits(out)
    assert {"judge", "replicas", "keeper"} <= set(header(out)), out
    # A word wider than the column is folded, not left out.
    assert column(out, "keeper").replace(" ", "") == "ingraceuntil2026-12-03T13:46:06+00:00", out


def test_a_policys_budget_and_failure_mode_show_at_80_columns(offline_ctl: OfflineCtl) -> None:
    policy = Policy(name="default", judges=["demo-judge"], by="llmgw server init", output=True,
                    budget_ms=3000)
    out = offline_ctl({"/admin/v1/guard": GuardOut(guard_enabled=True, log_prompts=False,
                                                  policies=[policy]).model_dump(mode="json")},
                      "guard", "status", columns=80)
    fits(out)
    assert {"name", "on", "models", "checks", "judges", "budget ms", "on failure"} <= set(header(out)), out
    assert column(out, "budget ms") == "3000" and column(out, "on failure") == "closed", out


def test_the_audit_logs_target_and_change_show_at_80_columns(offline_ctl: OfflineCtl) -> None:
    entry = AuditEntry(id=1, at=AT, by=BY, kind=AuditKind.MODEL, action="scale",
                       target="gemma3-270m", address="127.0.0.1",
                       before={"min_replicas": 1, "max_replicas": 1},
                       after={"min_replicas": 0, "max_replicas": 2})
    out = offline_ctl({"/admin/v1/audit?limit=50": data(entry)}, "audit", columns=80)
    fits(out)
    assert {"at", "action", "target", "change"} <= set(header(out)), out
    assert column(out, "target") == "gemma3-270m", out
    assert "min_replicas: 1 → 0" in column(out, "change"), out


def test_usage_names_its_keys_and_keeps_them_at_80_columns(offline_ctl: OfflineCtl) -> None:
    row = {"key_id": "key-77aa0c1b2d", "key_name": "support-bot", "model": "gemma3-270m",
           "day": "2026-12-03", "requests": 12, "prompt_tokens": 340, "completion_tokens": 768,
           "errors": 1, "blocked": 0, "cache_hits": 0, "saved_tokens": 0}
    out = offline_ctl({"/admin/v1/usage": {"data": [row]}}, "usage", columns=80)
    fits(out)
    assert {"day", "key", "model", "requests"} <= set(header(out)), out
    assert column(out, "key") == "support-bot (key-77aa0c1b2d)", out
