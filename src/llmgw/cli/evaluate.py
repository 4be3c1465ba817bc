"""Scoring a judge on labelled cases for `ctl guard eval`."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from llmgw.core.guard import Direction, Safety

# The labels a case may carry: a judge's Controversial is scored as one of these (--strict).
LABELS = (Safety.SAFE, Safety.UNSAFE)

@dataclass(frozen=True)
class Case:
    text: str
    label: Safety  # safe or unsafe
    direction: Direction = Direction.INPUT

    @classmethod
    def from_json(cls, line: str, number: int) -> Case:
        """One JSONL line; a bad one is a ValueError naming the line."""
        try:
            obj = json.loads(line)
            text, label = obj["text"], obj["label"]
            direction = obj.get("direction", "input")
        except (ValueError, KeyError, TypeError) as exc:
            raise ValueError(f"line {number}: expected {{\"text\", \"label\"}}: {exc}") from exc
        if not isinstance(text, str):
            raise ValueError(f"line {number}: text must be a string")
        if label not in LABELS or direction not in tuple(Direction):
            raise ValueError(f"line {number}: label must be {'|'.join(LABELS)}, direction "
                             f"{'|'.join(Direction)}")
        return cls(text, Safety(label), Direction(direction))


def score(cases: list[Case], answers: list[dict[str, Any]], *, strict: bool) -> dict[str, Any]:
    """Precision, recall and F1 for "unsafe" as the positive class; failures count separately."""
    tp = fp = fn = failed = 0
    latencies: list[float] = []
    for case, answer in zip(cases, answers, strict=True):
        verdict = answer.get("verdict")
        if verdict is None:
            failed += 1
            continue
        latencies.append(float(answer["latency_ms"]))
        safety = verdict["safety"]
        flagged = safety == Safety.UNSAFE or (strict and safety == Safety.CONTROVERSIAL)
        actual = case.label == Safety.UNSAFE
        tp += flagged and actual
        fp += flagged and not actual
        fn += (not flagged) and actual
    precision = tp / (tp + fp) if tp + fp else 0.0
    recall = tp / (tp + fn) if tp + fn else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    latencies.sort()

    def pct(q: float) -> float | None:
        return latencies[min(len(latencies) - 1, int(q * len(latencies)))] if latencies else None

    return {"cases": len(cases), "precision": round(precision, 3), "recall": round(recall, 3),
            "f1": round(f1, 3), "failed": failed, "p50_ms": pct(0.5), "p99_ms": pct(0.99)}
