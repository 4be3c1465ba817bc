"""The `command` engine: any OpenAI-compatible server started from a profile's argv template
(vLLM, SGLang, another llama-server build): its argv, environment, readiness and name."""

from __future__ import annotations

import os
from collections.abc import Collection, Sequence
from dataclasses import dataclass

from llmgw.core.engine_command import DEFAULT_READY_PATH, KEY_ENV, KEY_PLACEHOLDER, render
from llmgw.core.errors import ConfigError
from llmgw.core.types import Engine, Profile

__all__ = ["KEY_ENV", "Replica", "allowed", "argv", "env", "name", "ready_path"]

# Interpreters whose program name says little (python3.11 too): a crash names the module or
# script they run instead (`python -m sglang.launch_server` is "sglang.launch_server").
_INTERPRETERS = ("python", "uv")


@dataclass(frozen=True)
class Replica:
    """What one start of a replica fills the template with."""

    model_path: str
    model: str  # the catalog name
    host: str
    port: int
    devices: Sequence[str] = ()  # GPU UUIDs
    threads: int = 1

    def values(self) -> dict[str, str]:
        return {"model_path": self.model_path, "model": self.model, "host": self.host,
                "port": str(self.port), "devices": ",".join(self.devices),
                "threads": str(max(self.threads, 1))}


def _profile(profile: Profile) -> Profile:
    if profile.engine != Engine.COMMAND:
        raise ValueError(f"profile {profile.name!r} is not a command engine")
    return profile


def argv(profile: Profile, replica: Replica) -> list[str]:
    """The command line, each item filled in (an item stays one argument: no shell)."""
    values = replica.values()
    return [render(item, values) for item in _profile(profile).command]


def env(profile: Profile, replica: Replica, key: str | None) -> dict[str, str]:
    """What the engine's environment adds to the node's: the profile's `env` filled in (its
    `{api_key}` with the engine key, empty without one), `CUDA_VISIBLE_DEVICES` set to the
    replica's GPUs unless the profile sets it, and the engine key as `LLMGW_ENGINE_KEY` (never in
    argv, which anyone on the node can read)."""
    values = {**replica.values(), KEY_PLACEHOLDER: key or ""}
    out = {k: render(v, values) for k, v in _profile(profile).env.items()}
    if replica.devices:
        out.setdefault("CUDA_VISIBLE_DEVICES", values["devices"])
    if key:
        out[KEY_ENV] = key
    return out


def ready_path(profile: Profile) -> str:
    """The path that answers 200 once the engine serves."""
    return profile.ready_path or DEFAULT_READY_PATH


def name(profile: Profile) -> str:
    """How a crash names the engine: its program's file name, or the module or script an
    interpreter runs (`vllm`, `sglang.launch_server`, `llama-server`)."""
    command = _profile(profile).command
    program = os.path.basename(command[0])
    if program.startswith(_INTERPRETERS) and len(command) > 1:
        if command[1] == "-m" and len(command) > 2:
            return command[2]
        if not command[1].startswith("-"):
            return os.path.basename(command[1])  # a script
    return program


def allowed(profile: Profile, programs: Collection[str]) -> None:
    """ConfigError unless this node allows the profile's program (`programs`: names or
    absolute paths, as the command's first item gives it): a command engine runs whatever its
    profile says, so an admin key alone must not run programs on a node."""
    program = _profile(profile).command[0]
    if program not in programs:
        listed = ", ".join(sorted(programs)) or "none"
        raise ConfigError(
            f"this node does not run command engines with program {program!r} (allowed: "
            f"{listed}); list it in the node's engine_commands (llmgw node run "
            "--engine-command, or [server] engine_commands for the server's own node)")
