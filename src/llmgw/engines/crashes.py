"""Why an engine process ended, in words an operator can act on.

An exit status alone ("killed by signal 4") tells a user nothing; the signals an engine dies of
at start each have one usual cause and one usual remedy, named here once for the log, `ctl
replica list`, the console and the 503 a client gets.
"""

from __future__ import annotations

import signal
from dataclasses import dataclass

# Said before a replica's last error once its supervisor stopped restarting it; `scripts/up.sh`
# and the console read it to tell a crash loop that ended from one still trying.
GAVE_UP = "gave up after"
# Said before the reason while a replica starts again after failed starts.
RESTARTING = "restarting after"

# Engine flag that turns off llama.cpp's repacked weight layouts (and with them its AMX
# kernels): the remedy llmgw applies itself when a start dies of SIGILL.
NO_REPACK = "--no-repack"

# Why a replica placed on a GPU does not start: the engine cannot offload to it.
NO_CUDA = ("this llama-server has no CUDA backend: rebuild it with CMAKE_ARGS=-DGGML_CUDA=on "
           "(scripts/up.sh does this where nvcc is found) or name a CUDA build with "
           "LLMGW_LLAMA_SERVER")
# What llama.cpp logs when told to offload and it finds no GPU it can use; it then runs on
# the CPU.
NO_GPU_LINE = "no usable GPU found, --gpu-layers option will be ignored"


def no_gpu(last_output: str) -> bool:
    """Whether an engine's log says it found no GPU to offload to."""
    return NO_GPU_LINE in last_output

_ADVICE: dict[int, tuple[str, str]] = {
    signal.SIGILL: (
        "stopped with an illegal instruction (SIGILL)",
        "this build uses CPU instructions this machine cannot run (a virtual machine may "
        "advertise AMX or AVX-512 and not run them); run `llmgw doctor`, and rebuild "
        "llama-server without native CPU flags (docs: how-to/engine-crashes) or point "
        "LLMGW_LLAMA_SERVER at a portable build",
    ),
    signal.SIGSEGV: (
        "crashed with a segmentation fault (SIGSEGV)",
        "a bug in llama-server or a model file it cannot read: check the file (a truncated "
        "download?) and the engine log, or try another llama-server version",
    ),
    signal.SIGBUS: (
        "stopped with a bus error (SIGBUS)",
        "the model file changed, shrank or became unreadable while mapped: check the file and "
        "its disk",
    ),
    signal.SIGABRT: (
        "aborted (SIGABRT)",
        "llama-server failed one of its own checks: the engine log's last lines say which "
        "(often an argument or model it does not support)",
    ),
    signal.SIGKILL: (
        "was killed (SIGKILL), most likely by the kernel's out-of-memory killer",
        "the model needs more memory than was free: give the profile a larger min_memory_gb, "
        "a smaller --ctx-size, or a smaller quantisation",
    ),
}


@dataclass(frozen=True)
class Exit:
    """How an engine process ended: `returncode` as asyncio reports it (-N for signal N)."""

    returncode: int
    # It answered /health before it ended (a crash while serving, not at start).
    was_ready: bool = False

    @property
    def signal(self) -> int | None:
        return -self.returncode if self.returncode < 0 else None

    @property
    def illegal_instruction(self) -> bool:
        return self.signal == signal.SIGILL


# Another engine (a `command` engine: vLLM, SGLang) dying of the same signals: what happened is
# the same, the llama-server remedies are not.
_OTHER_ENGINE_ADVICE: dict[int, str] = {
    signal.SIGKILL: "the engine needs more memory than was free: give the profile a larger "
                    "min_memory_gb, or the engine a smaller model or context",
}
_SEE_LOG = "the engine log's last lines say why"


# A process that serves no model (a stdio MCP server behind its bridge): a model's remedies
# would mislead.
_SEE_ITS_LOG = "its log's last lines say why"


def summary(engine: str, ended: Exit, serves_a_model: bool = True) -> str:
    """One line: what happened and what to do."""
    sig = ended.signal
    if sig in _ADVICE:
        what, advice = _ADVICE[sig]
        if not serves_a_model:
            advice = _SEE_ITS_LOG
        elif engine != "llama-server":
            advice = _OTHER_ENGINE_ADVICE.get(sig, _SEE_LOG)
        return f"{engine} {what}: {advice}"
    if sig is not None:
        return f"{engine} was stopped by signal {_name(sig)}"
    return f"{engine} exited with code {ended.returncode}: " + (
        _SEE_LOG if serves_a_model else _SEE_ITS_LOG)


def message(engine: str, ended: Exit, log_path: str, last_output: str,
            found_no_gpu: bool = False, serves_a_model: bool = True) -> str:
    """A replica's last error: the summary first (what one-line views show), then where the
    engine's log is and its last lines. An engine that found no GPU to offload to (its log
    says so: `found_no_gpu`, or the last lines) is said to lack one, whatever it died of."""
    first = (NO_CUDA if found_no_gpu or no_gpu(last_output)
             else summary(engine, ended, serves_a_model))
    lines = [first, f"{'engine log' if serves_a_model else 'log'}: {log_path}"]
    if last_output:
        lines += ["last output:", last_output]
    return "\n".join(lines)


def _name(sig: int) -> str:
    try:
        return f"{signal.Signals(sig).name} ({sig})"
    except ValueError:
        return str(sig)


def headline(last_error: str | None) -> str:
    """What an engine died of, in a few words ("llama-server stopped with an illegal instruction
    (SIGILL)"), from a replica's last error: for a status column."""
    line = (last_error or "").split("\n", 1)[0]
    if line.startswith((GAVE_UP, RESTARTING)):
        # "gave up after N failed starts in a row (…): WHY", "restarting after N … in a row: WHY"
        line = line.partition(" in a row")[2].partition(": ")[2]
    return line.split(": ", 1)[0]
