"""Reading HTML form fields into API bodies."""

from __future__ import annotations

import pytest

from llmgw.api.console import forms
from llmgw.core.errors import InvalidRequest


def test_empty_fields_are_left_out_so_the_apis_defaults_hold() -> None:
    form = {"name": " a ", "max": "", "min": "2", "idle_s": "1.5"}
    assert forms.given(name=forms.text(form, "name"), max=forms.integer(form, "max"),
                       min=forms.integer(form, "min"), idle_s=forms.number(form, "idle_s")) == \
        {"name": "a", "min": 2, "idle_s": 1.5}


@pytest.mark.parametrize(("read", "value"), [(forms.integer, "two"), (forms.integer, "1.5"),
                                              (forms.number, "x")])
def test_a_bad_number_names_its_field(read: object, value: str) -> None:
    with pytest.raises(InvalidRequest) as caught:
        read({"min": value}, "min")  # type: ignore[operator]
    assert caught.value.param == "min"


def test_a_required_field_left_empty_names_it() -> None:
    with pytest.raises(InvalidRequest) as caught:
        forms.text({"name": "  "}, "name", required=True)
    assert caught.value.param == "name"


def test_lists_and_pairs() -> None:
    assert forms.names({"m": "a, b  c"}, "m") == ["a", "b", "c"]
    assert forms.pairs({"s": "gpu=a100, zone=eu"}, "s") == {"gpu": "a100", "zone": "eu"}
    with pytest.raises(InvalidRequest):
        forms.pairs({"s": "gpu"}, "s")


def test_engine_arguments_split_as_a_shell_would_and_bad_quoting_names_the_field() -> None:
    assert forms.words({"args": "--temp 0.7 -m 'a b.gguf' x\\ y"}, "args") == \
        ["--temp", "0.7", "-m", "a b.gguf", "x y"]
    assert forms.words({}, "args") == []
    for bad in ('--jinja "x', "--x \\"):
        with pytest.raises(InvalidRequest) as caught:
            forms.words({"args": bad}, "args")
        assert caught.value.param == "args"
