"""Strict parsing of the judges' answers."""

from __future__ import annotations

import pytest

from llmgw.core.errors import JudgeUnparseable, UpstreamError
from llmgw.core.guard import Direction, JudgeFormat, Safety, Verdict
from llmgw.guard.verdicts import LLAMA_GUARD_CATEGORIES, category_names, parse

QWEN = JudgeFormat.QWEN3GUARD
LLAMA = JudgeFormat.LLAMA_GUARD
IN = Direction.INPUT
OUT = Direction.OUTPUT


@pytest.mark.parametrize(
    ("direction", "text", "verdict"),
    [
        (IN, "Safety: Safe\nCategories: None", Verdict(safety=Safety.SAFE)),
        (IN, "Safety: Unsafe\nCategories: Violent", Verdict(safety=Safety.UNSAFE, categories=["Violent"])),
        (IN, "Safety: Unsafe\nCategories: Jailbreak, Suicide & Self-Harm",
         Verdict(safety=Safety.UNSAFE, categories=["Jailbreak", "Suicide & Self-Harm"])),
        (IN, "Safety: Controversial\nCategories: Politically Sensitive Topics",
         Verdict(safety=Safety.CONTROVERSIAL, categories=["Politically Sensitive Topics"])),
        (IN, "Safety: Unsafe\nCategories: None", Verdict(safety=Safety.UNSAFE)),
        (OUT, "Safety: Safe\nCategories: None\nRefusal: Yes", Verdict(safety=Safety.SAFE, refusal=True)),
        (OUT, "Safety: Unsafe\nCategories: Non-violent Illegal Acts, PII\nRefusal: No",
         Verdict(safety=Safety.UNSAFE, categories=["Non-violent Illegal Acts", "PII"], refusal=False)),
        (OUT, "Safety: Controversial\nCategories: Sexual Content or Sexual Acts\nRefusal: No",
         Verdict(safety=Safety.CONTROVERSIAL, categories=["Sexual Content or Sexual Acts"], refusal=False)),
    ],
)
def test_qwen3guard_verdicts(direction: Direction, text: str, verdict: Verdict) -> None:
    assert parse(QWEN, direction, text) == verdict


@pytest.mark.parametrize(
    ("text", "verdict"),
    [
        ("safe", Verdict(safety=Safety.SAFE)),
        ("\n\nsafe", Verdict(safety=Safety.SAFE)),
        ("unsafe\nS1", Verdict(safety=Safety.UNSAFE, categories=["S1"])),
        ("\n\nunsafe\nS1,S10", Verdict(safety=Safety.UNSAFE, categories=["S1", "S10"])),
        ("unsafe\nS14", Verdict(safety=Safety.UNSAFE, categories=["S14"])),
    ],
)
@pytest.mark.parametrize("direction", list(Direction))
def test_llama_guard_verdicts(direction: Direction, text: str, verdict: Verdict) -> None:
    assert parse(LLAMA, direction, text) == verdict


@pytest.mark.parametrize("tail", ["\n", "\n\n", " ", " \n\t \n"])
def test_whitespace_after_the_verdict_is_allowed(tail: str) -> None:
    assert parse(QWEN, IN, "Safety: Safe\nCategories: None" + tail) == Verdict(safety=Safety.SAFE)
    assert parse(QWEN, OUT, "Safety: Safe\nCategories: None\nRefusal: No" + tail).refusal is False
    assert parse(LLAMA, IN, "unsafe\nS2" + tail).categories == ["S2"]


def test_repeated_categories_are_kept_once() -> None:
    assert parse(QWEN, IN, "Safety: Unsafe\nCategories: PII, Violent, PII").categories == ["PII", "Violent"]
    assert parse(LLAMA, IN, "unsafe\nS3,S3,S1").categories == ["S3", "S1"]


@pytest.mark.parametrize(
    ("direction", "text"),
    [
        # partial
        (IN, "Safety: Unsafe"),
        (IN, "Safety: Unsafe\n"),
        (IN, "Safety: Unsafe\nCategories:"),
        (IN, "Safety: Unsafe\nCategories: "),
        (OUT, "Safety: Safe\nCategories: None"),
        (OUT, "Safety: Safe\nCategories: None\nRefusal:"),
        # garbage
        (IN, ""),
        (IN, "   "),
        (IN, "Safety: Maybe\nCategories: None"),
        (IN, "I'm sorry, I can't help with that."),
        (IN, "<think>\n\n</think>\n\nSafety: Safe\nCategories: None"),
        # unknown categories, or ones the direction does not have
        (IN, "Safety: Unsafe\nCategories: Violence"),
        (IN, "Safety: Unsafe\nCategories: Violent, Hate"),
        (OUT, "Safety: Unsafe\nCategories: Jailbreak\nRefusal: No"),
        # extra lines, extra text
        (IN, "Safety: Safe\nCategories: None\nRefusal: No"),
        (IN, "Safety: Safe\nCategories: None\nSafety: Unsafe"),
        (IN, "Safety: Safe\n\nCategories: None"),
        (IN, "Sure! Safety: Safe\nCategories: None"),
        (IN, "\nSafety: Safe\nCategories: None"),
        (IN, " Safety: Safe\nCategories: None"),
        (IN, "Safety: Safe \nCategories: None"),
        (IN, "Safety: Safe\r\nCategories: None"),
        (OUT, "Safety: Safe\nCategories: None\nRefusal: Yes\nThe assistant refused."),
        # lowercase and other spellings
        (IN, "safety: safe\ncategories: none"),
        (IN, "Safety: safe\nCategories: None"),
        (IN, "Safety: SAFE\nCategories: None"),
        (IN, "Safety: Safe\nCategories: none"),
        (IN, "Safety: Unsafe\nCategories: violent"),
        (IN, "Safety:Safe\nCategories: None"),
        (IN, "Safety: Safe\nCategory: None"),
        (OUT, "Safety: Safe\nCategories: None\nRefusal: yes"),
        (OUT, "Safety: Safe\nCategories: None\nRefusal: True"),
        # list syntax
        (IN, "Safety: Unsafe\nCategories: Violent,PII"),
        (IN, "Safety: Unsafe\nCategories: Violent;PII"),
        (IN, "Safety: Unsafe\nCategories: Violent, "),
        (IN, "Safety: Unsafe\nCategories: None, Violent"),
        (IN, "Safety: Unsafe\nCategories: " + ", ".join(["PII"] * 10)),
    ],
)
def test_qwen3guard_refuses_anything_else(direction: Direction, text: str) -> None:
    with pytest.raises(JudgeUnparseable):
        parse(QWEN, direction, text)


@pytest.mark.parametrize(
    "text",
    [
        "unsafe",  # partial: no codes line
        "unsafe\n",
        "Safe",
        "SAFE",
        "Unsafe\nS1",
        "unsafe\ns1",
        "unsafe\nS15",
        "unsafe\nS0",
        "unsafe\nS01",
        "unsafe\nS1, S2",
        "unsafe\nS1,",
        "unsafe\nS1\nS2",
        "unsafe\nViolent Crimes",
        "safe\nS1",
        "safe.",
        "\nsafe",
        " safe",
        "The conversation is safe.",
        "unsafe\n" + ",".join(["S1"] * 15),
    ],
)
def test_llama_guard_refuses_anything_else(text: str) -> None:
    with pytest.raises(JudgeUnparseable):
        parse(LLAMA, IN, text)


def test_llama_guard_1b_does_not_know_s14() -> None:
    with pytest.raises(JudgeUnparseable):
        parse(LLAMA, IN, "unsafe\nS14", llama_guard_categories=13)
    assert parse(LLAMA, IN, "unsafe\nS13", llama_guard_categories=13).categories == ["S13"]


def test_the_failure_is_an_upstream_error_that_shows_the_answer() -> None:
    with pytest.raises(JudgeUnparseable) as caught:
        parse(QWEN, IN, "Safety: Maybe")
    error = caught.value
    assert isinstance(error, UpstreamError)
    assert error.message == "judge output does not parse: 'Safety: Maybe'"
    assert error.code == "judge_unparseable"
    assert error.status == 502


def test_a_long_answer_is_cut_short_and_its_newlines_escaped() -> None:
    answer = "Safety: Unsafe\n" + "blah " * 100
    with pytest.raises(JudgeUnparseable) as caught:
        parse(QWEN, IN, answer)
    message = caught.value.message
    assert message == f"judge output does not parse: {answer[:80]!r}…"
    assert "\n" not in message
    assert len(message) < 120


def test_category_names() -> None:
    assert category_names(QWEN) == [
        "Violent",
        "Non-violent Illegal Acts",
        "Sexual Content or Sexual Acts",
        "PII",
        "Suicide & Self-Harm",
        "Unethical Acts",
        "Politically Sensitive Topics",
        "Copyright Violation",
        "Jailbreak",
    ]
    assert category_names(LLAMA) == [f"S{i}" for i in range(1, 15)]
    assert LLAMA_GUARD_CATEGORIES["S1"] == "Violent Crimes"
    assert LLAMA_GUARD_CATEGORIES["S10"] == "Hate"
    assert LLAMA_GUARD_CATEGORIES["S14"] == "Code Interpreter Abuse"
