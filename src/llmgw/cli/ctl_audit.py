"""`llmgw ctl audit`: who changed what, and how, newest first."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any

import typer

from llmgw.cli import render
from llmgw.cli.context import CtlContext, options_for, query
from llmgw.cli.render import HIGH, LOW, Col
from llmgw.core.audit import AuditEntry, AuditKind
from llmgw.core.protocol.audit import AuditQuery
from llmgw.core.protocol.common import DataList

_AGO = re.compile(r"^(\d+)([mhd])$")
_UNITS = {"m": "minutes", "h": "hours", "d": "days"}
# How much of one change a table cell shows; `--json` has all of it.
CHANGE_CHARS = 120


def since_time(value: str, now: datetime) -> str:
    """`--since` as the API takes it: `30m`, `12h` or `7d` ago, or an ISO time as given."""
    found = _AGO.match(value.strip())
    if found is None:
        return value
    return (now - timedelta(**{_UNITS[found[2]]: int(found[1])})).isoformat()


def change(entry: AuditEntry) -> str:
    """What changed, in one line: the fields whose value differs (all of them for an add or a
    removal)."""
    before, after = entry.before or {}, entry.after or {}
    if entry.before is None or entry.after is None:
        shown: dict[str, Any] = after if entry.after is not None else before
        text = ", ".join(f"{k}={v}" for k, v in shown.items())
    else:
        text = "; ".join(f"{k}: {before.get(k)} → {after.get(k)}"
                         for k in dict.fromkeys([*before, *after]) if before.get(k) != after.get(k))
    return text if len(text) <= CHANGE_CHARS else text[: CHANGE_CHARS - 1] + "…"


def audit(
    ctx: typer.Context,
    since: Annotated[str | None, typer.Option(help="Only changes since: 30m, 12h, 7d, or an ISO "
                                                   "time (2026-11-29T10:00:00+00:00).")] = None,
    who: Annotated[str | None, typer.Option(help="Only changes by keys whose name contains "
                                                 "this.")] = None,
    kind: Annotated[AuditKind | None, typer.Option(help="Only changes to this kind of thing.",
                                                   case_sensitive=False)] = None,
    target: Annotated[str | None, typer.Option(help="Only changes to this (a name or id).")] = None,
    limit: Annotated[int, typer.Option(help="The most changes shown.")] = 50,
) -> None:
    """The audit log: every change made through the admin API, newest first."""
    ctl = CtlContext.of(ctx)
    given: dict[str, Any] = {"who": who, "kind": kind, "target": target,
                             "since": since_time(since, datetime.now(UTC)) if since else None}
    with options_for({"since": "--since", "limit": "--limit", "who": "--who",
                      "target": "--target"}):
        filters = AuditQuery(limit=limit, **{k: v for k, v in given.items() if v is not None})
    ctl.show_as(
        DataList[AuditEntry],
        ctl.call("GET", "/admin/v1/audit" + query(filters)),
        lambda d: render.table(
            # What changed and to what, before who and from where.
            "audit log", [Col("at", whole=True), "by", Col("from", priority=LOW),
                          Col("kind", priority=LOW), Col("action", priority=HIGH),
                          Col("target", priority=HIGH), Col("change", priority=HIGH)],
            [[render.when(e.at, seconds=True), e.by, e.address or "", e.kind, e.action, e.target,
              change(e)] for e in d.data],
        ),
    )
