"""The name rules the catalog, serve jobs and remote keys share."""

from __future__ import annotations

import pytest

from llmgw.core import names


@pytest.mark.parametrize(
    ("variable", "allowed", "ok"),
    [
        ("LLMGW_PROVIDER_OPENAI", [], True),
        ("LLMGW_PROVIDER_", [], False),  # the bare prefix names no provider
        ("PATH", [], False),
        ("OPENAI_API_KEY", [], False),
        ("OPENAI_API_KEY", ["OPENAI_API_KEY"], True),
        ("OPENAI_API_KEY=x", ["OPENAI_API_KEY=x"], False),  # not a variable name at all
        ("LLMGW_PROVIDER_A\x00", [], False),
    ],
)
def test_a_provider_key_comes_only_from_the_prefix_or_a_listed_variable(
    variable: str, allowed: list[str], ok: bool
) -> None:
    assert names.provider_key_allowed(variable, allowed) is ok


@pytest.mark.parametrize("name", ["a/../b", "..", "a/..", "a/./b", "a//b", "a/", "/a", "a/-b",
                                  "a\x00", "x" * 129, ""])
def test_traversal_like_model_names_break_the_rule(name: str) -> None:
    with pytest.raises(ValueError, match="each '/'-separated part"):
        names.check_model_name(name)


def test_a_name_may_be_128_characters_long() -> None:
    assert names.check_model_name("a" * 128) == "a" * 128


@pytest.mark.parametrize(
    ("check", "value"),
    [(names.check_model_name, "gemma\n"), (names.check_repo, "acme/guard\n"),
     (names.check_file, "g.gguf\n"), (names.check_revision, "main\n"),
     (names.check_env_name, "LLMGW_PROVIDER_A\n")],
)
def test_a_trailing_newline_never_passes_a_rule(check: object, value: str) -> None:
    # `$` in a regex matches before a final newline: every rule must match the whole string.
    assert callable(check)
    with pytest.raises(ValueError):
        check(value)
