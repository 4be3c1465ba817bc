"""`/v1/moderations` answered by guard judges, in OpenAI's shape."""

from __future__ import annotations

from typing import Any

from llmgw.core.errors import GuardUnavailable
from llmgw.core.guard import Safety
from llmgw.guard.enforcement import Answer

OPENAI_CATEGORIES = (
    "harassment", "harassment/threatening", "hate", "hate/threatening", "illicit",
    "illicit/violent", "self-harm", "self-harm/intent", "self-harm/instructions", "sexual",
    "sexual/minors", "violence", "violence/graphic",
)

# Judges' own categories mapped to OpenAI's where one clearly corresponds; the rest are still
# reported under `llmgw.judges[].categories` and still flag the input.
_TO_OPENAI = {
    "violent": "violence",
    "non-violent illegal acts": "illicit",
    "sexual content or sexual acts": "sexual",
    "suicide & self-harm": "self-harm",
    "s1": "violence",
    "s2": "illicit",
    "s3": "sexual",
    "s4": "sexual/minors",
    "s9": "illicit/violent",
    "s10": "hate",
    "s11": "self-harm",
    "s12": "sexual",
}


def result(answers: list[Answer]) -> dict[str, Any]:
    """One input's moderation result; Controversial flags (the strict reading)."""
    judged = [a for a in answers if a.verdict is not None]
    if not judged:
        detail = "; ".join(f"{a.judge}: {a.error}" for a in answers)
        raise GuardUnavailable(f"no judge could answer: {detail}")
    hits: set[str] = set()
    flagged = False
    for a in judged:
        assert a.verdict is not None
        if a.verdict.safety != Safety.SAFE:
            flagged = True
            hits |= {_TO_OPENAI[c.lower()] for c in a.verdict.categories if c.lower() in _TO_OPENAI}
    return {
        "flagged": flagged,
        "categories": {c: c in hits for c in OPENAI_CATEGORIES},
        "category_scores": {c: 1.0 if c in hits else 0.0 for c in OPENAI_CATEGORIES},
        "llmgw": {
            "judges": [
                {
                    "judge": a.judge,
                    "outcome": a.outcome.value,
                    "categories": a.verdict.categories if a.verdict else [],
                    "error": a.error or None,
                    "latency_ms": round(a.latency_ms, 1),
                }
                for a in answers
            ]
        },
    }
