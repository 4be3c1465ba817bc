"""The verdict log's filters, on each backend."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from llmgw.core.guard import Direction, Outcome, VerdictRecord
from llmgw.store.store import Store

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def verdict(request_id: str, *, minutes: int = 0, outcome: Outcome = Outcome.SAFE) -> VerdictRecord:
    return VerdictRecord(at=NOW + timedelta(minutes=minutes), policy="p", judge="j",
                         direction=Direction.INPUT, outcome=outcome, latency_ms=1.0,
                         request_id=request_id)


def test_one_requests_verdicts_are_found_however_many_came_after(store: Store) -> None:
    store.guard.add_verdicts([verdict("req-1"), verdict("req-1", outcome=Outcome.UNSAFE),
                              *(verdict(f"later-{i}", minutes=1) for i in range(300))])

    found = store.guard.verdicts(request_id="req-1", limit=10)

    assert sorted(v.outcome for v in found) == [Outcome.SAFE, Outcome.UNSAFE]
    assert store.guard.verdicts(request_id="req-unknown") == []
    # The other filters still combine with it.
    assert [v.outcome for v in store.guard.verdicts(request_id="req-1", outcome="unsafe")] == [
        Outcome.UNSAFE]
