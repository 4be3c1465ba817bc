"""Usage counters and the shared per-minute rate windows."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from sqlalchemy import Engine, and_, delete, func, insert, select, update

from llmgw.store.schema import rate_windows, usage

COUNTERS = ("requests", "prompt_tokens", "completion_tokens", "errors", "blocked")


@dataclass(frozen=True)
class UsageRow:
    key_id: str
    model: str
    day: str
    requests: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    errors: int = 0
    blocked: int = 0


class UsageRepo:
    """Additive writes, so any number of servers can flush their deltas."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    def add_usage(self, rows: Iterable[UsageRow]) -> None:
        with self._engine.begin() as conn:
            for r in rows:
                key = and_(usage.c.key_id == r.key_id, usage.c.model == r.model, usage.c.day == r.day)
                deltas = {c: getattr(r, c) for c in COUNTERS}
                changed = conn.execute(
                    update(usage).where(key).values({c: usage.c[c] + v for c, v in deltas.items()})
                ).rowcount
                if not changed:
                    conn.execute(insert(usage).values(key_id=r.key_id, model=r.model, day=r.day, **deltas))

    def usage(
        self, key_id: str | None = None, model: str | None = None, since: str | None = None
    ) -> list[UsageRow]:
        query = select(usage).order_by(usage.c.day, usage.c.key_id, usage.c.model)
        if key_id:
            query = query.where(usage.c.key_id == key_id)
        if model:
            query = query.where(usage.c.model == model)
        if since:
            query = query.where(usage.c.day >= since)
        with self._engine.connect() as conn:
            return [UsageRow(**r._mapping) for r in conn.execute(query).all()]

    def tokens_since(self, key_ids: list[str], day: str) -> dict[str, int]:
        """Tokens used per key from `day` (inclusive) on: for daily and monthly budgets."""
        if not key_ids:
            return {}
        total = func.sum(usage.c.prompt_tokens + usage.c.completion_tokens)
        query = (select(usage.c.key_id, total).where(usage.c.key_id.in_(key_ids), usage.c.day >= day)
                 .group_by(usage.c.key_id))
        with self._engine.connect() as conn:
            return {k: int(v or 0) for k, v in conn.execute(query).all()}

    def add_rates(self, deltas: dict[tuple[str, int], tuple[int, int]]) -> None:
        """Add (requests, tokens) per (key id, minute)."""
        with self._engine.begin() as conn:
            for (key_id, minute), (reqs, toks) in deltas.items():
                where = and_(rate_windows.c.key_id == key_id, rate_windows.c.minute == minute)
                changed = conn.execute(update(rate_windows).where(where).values(
                    requests=rate_windows.c.requests + reqs, tokens=rate_windows.c.tokens + toks)).rowcount
                if not changed:
                    conn.execute(insert(rate_windows).values(key_id=key_id, minute=minute,
                                                             requests=reqs, tokens=toks))

    def rates(self, minutes: list[int]) -> dict[tuple[str, int], tuple[int, int]]:
        """Every key's (requests, tokens) in these minutes, as all servers wrote them."""
        query = select(rate_windows).where(rate_windows.c.minute.in_(minutes))
        with self._engine.connect() as conn:
            return {(r.key_id, r.minute): (r.requests, r.tokens) for r in conn.execute(query).all()}

    def prune_rates(self, before_minute: int) -> None:
        with self._engine.begin() as conn:
            conn.execute(delete(rate_windows).where(rate_windows.c.minute < before_minute))
