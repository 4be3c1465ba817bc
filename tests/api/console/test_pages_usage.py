"""The usage chart's data as plain data."""

from __future__ import annotations

from llmgw.api.console.pages_overview import usage_by_model
from llmgw.api.console.pages_usage import chart


def row(day: str, model: str, key: str, prompt: int, completion: int) -> dict[str, object]:
    return {"day": day, "model": model, "key_id": key, "requests": 1, "prompt_tokens": prompt,
            "completion_tokens": completion, "errors": 0, "blocked": 0}


ROWS = [row("2026-11-29", "a", "k1", 10, 5), row("2026-11-30", "a", "k2", 1, 1),
        row("2026-11-30", "b", "k1", 100, 0), row("2026-11-30", "a", "k1", 3, 0)]


def test_the_chart_has_one_stacked_dataset_per_model_with_tokens_per_day() -> None:
    data = chart(ROWS)
    assert data["labels"] == ["2026-11-29", "2026-11-30"]
    assert data["datasets"] == [{"label": "a", "data": [15, 5]}, {"label": "b", "data": [0, 100]}]


def test_the_overview_sums_a_keys_usage_per_model() -> None:
    totals = usage_by_model(ROWS)
    assert [(t["model"], t["requests"], t["prompt_tokens"]) for t in totals] == [("a", 3, 14), ("b", 1, 100)]
