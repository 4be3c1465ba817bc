"""Field checks shared by the dialects: each refusal names the field, booleans are not numbers."""

from __future__ import annotations

import pytest

from llmgw.core.errors import InvalidRequest
from llmgw.gateway.wire import checks


def test_token_counts() -> None:
    assert checks.token_count({"n": 5}, "n") == 5
    assert checks.token_count({}, "n") is None
    assert checks.token_count({"n": None}, "n") is None
    assert checks.token_count({"n": checks.MAX_TOKENS}, "n") == checks.MAX_TOKENS
    for bad in (0, -1, checks.MAX_TOKENS + 1, True, 2.0, "5"):
        with pytest.raises(InvalidRequest) as refused:
            checks.token_count({"n": bad}, "n")
        assert refused.value.param == "n"
    with pytest.raises(InvalidRequest, match="'n' is a required property"):
        checks.token_count({}, "n", required=True)


def test_flags_strings_and_numbers() -> None:
    assert checks.flag({}, "stream") is False
    assert checks.flag({"stream": True}, "stream") is True
    with pytest.raises(InvalidRequest, match="'stream' must be a boolean"):
        checks.flag({"stream": 1}, "stream")
    assert checks.required_str({"model": "m"}, "model") == "m"
    with pytest.raises(InvalidRequest, match="'model' is a required property"):
        checks.required_str({}, "model")
    checks.optional_number({"t": 0.5}, "t")
    checks.optional_number({"t": None}, "t")
    with pytest.raises(InvalidRequest, match="'t' must be a number"):
        checks.optional_number({"t": False}, "t")
    checks.optional({"k": 3}, "k", int, "an integer")
    with pytest.raises(InvalidRequest, match="'k' must be an integer"):
        checks.optional({"k": True}, "k", int, "an integer")
    checks.optional({"b": True}, "b", bool, "a boolean")
    checks.string_list({"s": ["a"]}, "s")
    with pytest.raises(InvalidRequest, match="'s' must be an array of strings"):
        checks.string_list({"s": ["a", None]}, "s")
