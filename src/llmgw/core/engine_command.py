"""The `command` engine's templates: which placeholders an argv or environment value may use
(the environment all but `{port}`, and `{api_key}` too), checked when a profile is made, and
filled in when a replica starts (`engines.command`).

Refusals name where a template is wrong (`command[2]`, `env FOO`), never the text: like every
validation error here, they do not echo what was given."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from string import Formatter

# What a template may name, each filled in per replica:
PLACEHOLDERS = (
    "model_path",  # the model's file (or directory) on the node
    "model",  # the catalog name: what clients send as `model`
    "host",  # the address the engine must listen on (the node's bind address)
    "port",  # the port llmgw picked for this start
    "devices",  # the UUIDs of the replica's GPUs, comma-joined; empty on a CPU
    "threads",  # the CPU cores the replica holds (at least 1)
)
# The engine key, in the environment only: argv is public (`ps`). It is always there under
# `KEY_ENV`, and an `env` value may name it as `{api_key}` (vLLM reads `VLLM_API_KEY`).
KEY_ENV = "LLMGW_ENGINE_KEY"
KEY_PLACEHOLDER = "api_key"
# Where a command engine answers 200 once it serves, unless its profile says otherwise.
DEFAULT_READY_PATH = "/v1/models"

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def fields(text: str) -> list[str]:
    """The placeholders `text` names, in order (`{{` and `}}` are literal braces); ValueError
    for a brace that opens or closes nothing, or a placeholder with a format or conversion."""
    try:
        parsed = list(Formatter().parse(text))
    except ValueError as exc:
        raise ValueError(f"{exc} (write {{{{ or }}}} for a literal brace)") from None
    found = []
    for _, name, spec, conversion in parsed:
        if name is None:
            continue
        if spec or conversion:
            raise ValueError(f"write a placeholder as {{{name}}}, with no format")
        found.append(name)
    return found


def _fields_at(where: str, text: str) -> list[str]:
    try:
        return fields(text)
    except ValueError as exc:
        raise ValueError(f"{where}: {exc}") from None


def check(command: Sequence[str], env: Mapping[str, str]) -> None:
    """ValueError, in words, for a template no replica could start from: an empty command, a
    placeholder in the program's name, an unknown placeholder, the engine key in argv, no
    `{port}` (llmgw could not reach the engine), or an environment name llmgw owns."""
    if not command or not command[0].strip():
        raise ValueError("a command engine needs a command: the program, then its arguments")
    if _fields_at("command[0]", command[0]):
        raise ValueError("the program (the command's first item) takes no placeholder: nodes "
                         "allow command engines by their program")
    named: list[str] = []
    for i, text in enumerate(command):
        named += _fields_at(f"command[{i}]", text)
    if KEY_PLACEHOLDER in named:
        raise ValueError(f"{{{KEY_PLACEHOLDER}}} is for env only: anyone on the node can read a "
                         "command line (ps); give the key to the engine through its environment "
                         f"(env, or {KEY_ENV}, which is always set)")
    in_env = [name for key, value in env.items() for name in _fields_at(f"env {key}", value)]
    if "port" in in_env:
        # The environment is set once per replica; the port is picked anew at each start.
        raise ValueError("env takes no {port}: give the port in the command")
    for name in named + [n for n in in_env if n != KEY_PLACEHOLDER]:
        if name not in PLACEHOLDERS:
            raise ValueError(f"unknown placeholder {{{name}}}: use "
                             + ", ".join(f"{{{p}}}" for p in PLACEHOLDERS))
    if "port" not in named:
        raise ValueError("the command never names {port}: the engine must listen on the port "
                         "llmgw gives it, or llmgw cannot reach it")
    for name in env:
        if not _ENV_NAME.fullmatch(name):
            raise ValueError(f"env: {name!r} is not an environment variable name")
        if name == KEY_ENV:
            raise ValueError(f"env: {KEY_ENV} is set by llmgw (the engine key)")


def render(text: str, values: Mapping[str, str]) -> str:
    """`text` with its placeholders filled in from `values`."""
    return text.format_map(values)
