"""Strict parsing of what a judge answered into a `Verdict`.

The parser accepts the lines the judge's grammar admits (`grammars.grammar`) and nothing else,
apart from whitespace at the very end: no other leading text, no extra or missing lines, no
lowercase or reworded labels, no unknown categories. A judge answering anything else has
failed, and the failure is a `JudgeUnparseable` (an `UpstreamError`, code `judge_unparseable`)
whose message shows the start of the answer, so the policy's `on_failure` decides and the verdict
log says why.

Categories are kept as the judge names them: Qwen3Guard's category names ("Violent", "PII", …;
`Categories: None` is the empty list), Llama Guard's codes ("S1", …; `LLAMA_GUARD_CATEGORIES`
names them). Repeats are dropped, first mention kept.
"""

from __future__ import annotations

import re

from llmgw.core.errors import JudgeUnparseable
from llmgw.core.guard import Direction, JudgeFormat, Safety, Verdict
from llmgw.guard.grammars import qwen3guard_categories
from llmgw.guard.prompts import LLAMA_GUARD_CATEGORIES, QWEN3GUARD_INPUT_CATEGORIES, llama_guard_codes

__all__ = ["LLAMA_GUARD_CATEGORIES", "category_names", "parse"]

_SHOWN_CHARS = 80

_QWEN_SAFETY = {"Safe": Safety.SAFE, "Unsafe": Safety.UNSAFE, "Controversial": Safety.CONTROVERSIAL}
_QWEN_REFUSAL = {"Yes": True, "No": False}


def category_names(fmt: JudgeFormat) -> list[str]:
    """Every category a verdict of this format can carry: names for Qwen3Guard, codes for Llama Guard."""
    if fmt is JudgeFormat.QWEN3GUARD:
        return list(QWEN3GUARD_INPUT_CATEGORIES)
    return list(LLAMA_GUARD_CATEGORIES)


def _unparseable(text: str) -> JudgeUnparseable:
    shown = repr(text[:_SHOWN_CHARS]) + ("…" if len(text) > _SHOWN_CHARS else "")
    return JudgeUnparseable(f"judge output does not parse: {shown}")


def _qwen3guard_pattern(direction: Direction) -> re.Pattern[str]:
    categories = qwen3guard_categories(direction)
    category = "|".join(re.escape(name) for name in categories)
    refusal = r"\nRefusal: (Yes|No)" if direction is Direction.OUTPUT else ""
    # As in the grammar: at most as many names as there are categories.
    listed = rf"(None|(?:{category})(?:, (?:{category})){{0,{len(categories) - 1}}})"
    return re.compile(rf"Safety: (Safe|Unsafe|Controversial)\nCategories: {listed}{refusal}")


_QWEN_PATTERNS = {direction: _qwen3guard_pattern(direction) for direction in Direction}
_LLAMA_GUARD_PATTERN = re.compile(r"(?:\n\n)?(?:(safe)|unsafe\n(S[1-9][0-9]*(?:,S[1-9][0-9]*)*))")


def _unique(items: list[str]) -> list[str]:
    return list(dict.fromkeys(items))


def parse(fmt: JudgeFormat, direction: Direction, text: str, *, llama_guard_categories: int = 14) -> Verdict:
    """The verdict in `text`, a judge's whole answer; raises `JudgeUnparseable` when it is not one."""
    body = text.rstrip()
    if fmt is JudgeFormat.QWEN3GUARD:
        match = _QWEN_PATTERNS[direction].fullmatch(body)
        if match is None:
            raise _unparseable(text)
        listed = match.group(2)
        return Verdict(
            safety=_QWEN_SAFETY[match.group(1)],
            categories=[] if listed == "None" else _unique(listed.split(", ")),
            refusal=_QWEN_REFUSAL[match.group(3)] if direction is Direction.OUTPUT else None,
        )
    match = _LLAMA_GUARD_PATTERN.fullmatch(body)
    if match is None:
        raise _unparseable(text)
    if match.group(1):
        return Verdict(safety=Safety.SAFE)
    codes = match.group(2).split(",")
    known = llama_guard_codes(llama_guard_categories)
    if len(codes) > len(known) or any(code not in known for code in codes):
        raise _unparseable(text)
    return Verdict(safety=Safety.UNSAFE, categories=_unique(codes))
