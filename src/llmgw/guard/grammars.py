"""GBNF grammars (llama.cpp's grammar syntax) that let a judge answer only with its verdict lines.

Sent as `grammar` with the `/completion` request, they make the sampler reject every token that
would leave the verdict's shape, and once a verdict is complete only end-of-generation remains.
They admit exactly what `verdicts.parse` accepts (apart from the trailing whitespace the parser
tolerates), so a constrained judge cannot answer something we then fail to parse:

- Qwen3Guard, input:  `Safety: (Safe|Unsafe|Controversial)` `\\n` `Categories: ` then `None` or
  one to nine of the nine input categories joined by ", ";
- Qwen3Guard, output: the same with the eight output categories (no Jailbreak), then
  `\\n` `Refusal: (Yes|No)`;
- Llama Guard 3: `safe`, or `unsafe` `\\n` and one to N codes `S1`…`SN` joined by "," (N is 13 for
  the 1B, 14 for the 8B), after an optional blank line: the prompt ends right after the
  assistant header, and Llama 3's header is followed by "\\n\\n", which the model then writes.

The number of categories in a list is capped at the number of categories (a repeated name stays
grammatical, the parser drops repeats), which bounds the longest legal verdict; `n_predict` is
sized from it.
"""

from __future__ import annotations

from llmgw.core.guard import Direction, JudgeFormat
from llmgw.guard.prompts import (
    QWEN3GUARD_INPUT_CATEGORIES,
    QWEN3GUARD_OUTPUT_CATEGORIES,
    llama_guard_codes,
)


def _literal(text: str) -> str:
    """`text` as a GBNF string literal."""
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'"{escaped}"'


def _alternatives(options: list[str] | tuple[str, ...]) -> str:
    return " | ".join(_literal(option) for option in options)


def qwen3guard_categories(direction: Direction) -> tuple[str, ...]:
    """The categories Qwen3Guard may name when judging `direction`."""
    return QWEN3GUARD_INPUT_CATEGORIES if direction is Direction.INPUT else QWEN3GUARD_OUTPUT_CATEGORIES


def grammar(fmt: JudgeFormat, direction: Direction, *, llama_guard_categories: int = 14) -> str:
    """The GBNF grammar admitting exactly the judge's verdict lines for `direction`."""
    if fmt is JudgeFormat.QWEN3GUARD:
        categories = qwen3guard_categories(direction)
        root = 'root ::= "Safety: " safety "\\nCategories: " categories'
        if direction is Direction.OUTPUT:
            root += ' "\\nRefusal: " refusal'
        rules = [
            root,
            "safety ::= " + _alternatives(["Safe", "Unsafe", "Controversial"]),
            f'categories ::= "None" | category (", " category){{0,{len(categories) - 1}}}',
            "category ::= " + _alternatives(categories),
        ]
        if direction is Direction.OUTPUT:
            rules.append("refusal ::= " + _alternatives(["Yes", "No"]))
        return "\n".join(rules) + "\n"
    codes = llama_guard_codes(llama_guard_categories)
    # Longest codes first: GBNF alternatives are not ordered, this only helps a human reader.
    ordered = sorted(codes, key=lambda code: (-len(code), code))
    return (
        'root ::= "\\n\\n"? ("safe" | "unsafe\\n" codes)\n'
        f'codes ::= code ("," code){{0,{len(codes) - 1}}}\n'
        f"code ::= {_alternatives(ordered)}\n"
    )


def longest_verdict(fmt: JudgeFormat, direction: Direction, *, llama_guard_categories: int = 14) -> str:
    """The longest text `grammar` admits (for sizing `n_predict` and for tests)."""
    if fmt is JudgeFormat.QWEN3GUARD:
        categories = qwen3guard_categories(direction)
        longest = max(categories, key=len)
        text = "Safety: Controversial\nCategories: " + ", ".join([longest] * len(categories))
        if direction is Direction.OUTPUT:
            text += "\nRefusal: Yes"
        return text
    codes = llama_guard_codes(llama_guard_categories)
    longest = max(codes, key=len)
    return "\n\nunsafe\n" + ",".join([longest] * len(codes))


# Token budgets for the verdict. The longest grammatical verdicts (`longest_verdict`) tokenize to
# 61 (Qwen3Guard input: nine times "Sexual Content or Sexual Acts"), 60 (output, eight of them and
# the Refusal line) and 31 (Llama Guard: "\n\nunsafe\n" and fourteen "S14") tokens with the
# Qwen2/Qwen3 and Llama 3 vocabularies (measured with llama.cpp's `llama-tokenize`); a real verdict
# is 5 to 25. The budgets add half again for a judge that spells a word in smaller pieces than the
# tokenizer would. They only cap a misbehaving judge: a constrained judge stops when its verdict
# is complete.
_N_PREDICT = {
    (JudgeFormat.QWEN3GUARD, Direction.INPUT): 96,
    (JudgeFormat.QWEN3GUARD, Direction.OUTPUT): 96,
    (JudgeFormat.LLAMA_GUARD, Direction.INPUT): 48,
    (JudgeFormat.LLAMA_GUARD, Direction.OUTPUT): 48,
}


def n_predict(fmt: JudgeFormat, direction: Direction) -> int:
    """How many tokens to let the judge generate: enough for the longest legal verdict."""
    return _N_PREDICT[(fmt, direction)]
