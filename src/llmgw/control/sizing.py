"""How much memory a llama-server replica of a GGUF model needs, from the model and its args.

Pure: the caller reads the model's header (`llmgw.node.gguf_info.read_info`) and passes the
profile's args. All sizes are GiB (2**30 bytes). The estimate is the sum of four parts:

- **weights**: the tensors' stored bytes (`GgufInfo.weights_bytes`), mapped in full.
- **KV cache**: ``layers × ctx × kv_heads × (head_dim_k × k_bytes + head_dim_v × v_bytes)``.
  ``ctx`` is ``--ctx-size``/``-c``; absent or 0 means the model's trained context. llama-server's
  KV cache is unified across slots: the ``--parallel``/``-np`` slots share those ``ctx`` tokens,
  so the slot count does not multiply it. ``k_bytes``/``v_bytes`` are bytes per element of
  ``--cache-type-k``/``-ctk`` and ``--cache-type-v``/``-ctv`` (f16 = 2 by default, q8_0 =
  1.0625 i.e. 34 bytes per 32, q4_0 = 0.5625 i.e. 18 bytes per 32). Sliding-window layers are
  counted at full context, so for such models this errs on the large side.
- **compute**: an approximation of llama-server's scratch buffers, a fixed 256 MiB plus two f32
  activation buffers of ``ctx × embedding``: ``256 MiB + ctx × embedding × 4 × 2`` bytes. Real
  buffers depend on the backend and batch size; this is a planning figure, not a measurement.
- **prompt cache**: ``--cache-ram``/``-cram`` MiB; absent means llama-server's default of
  8192 MiB, 0 means none, -1 means unbounded and is counted as 8 GiB.

The total is the sum rounded up to hundredths of a GiB. On GPUs (`MemoryEstimate.on_devices`) a
replica needs the weights and KV cache of the layers it offloads (all of them unless the profile's
`gpu_layers` says fewer) plus the compute buffers; the prompt cache stays in the host's memory.
Flags are read in the ``--flag value``
and ``--flag=value`` forms; the last occurrence wins, as in llama-server.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from llmgw.core.errors import InvalidRequest
from llmgw.core.gguf import GgufInfo

GIB = 2**30
MIB = 2**20

PROMPT_CACHE_DEFAULT_MIB = 8192
PROMPT_CACHE_UNBOUNDED_GIB = 8.0
COMPUTE_FIXED_BYTES = 256 * MIB

# Bytes per cached element for llama-server's --cache-type-k / --cache-type-v values.
CACHE_TYPE_BYTES: dict[str, float] = {
    "f32": 4.0,
    "f16": 2.0,
    "bf16": 2.0,
    "q8_0": 34 / 32,
    "q4_0": 18 / 32,
    "q4_1": 20 / 32,
    "iq4_nl": 18 / 32,
    "q5_0": 22 / 32,
    "q5_1": 24 / 32,
}

_CTX = ("--ctx-size", "-c")
_PARALLEL = ("--parallel", "-np")
_CACHE_K = ("--cache-type-k", "-ctk")
_CACHE_V = ("--cache-type-v", "-ctv")
_CACHE_RAM = ("--cache-ram", "-cram")


@dataclass(frozen=True)
class MemoryEstimate:
    """Memory a replica needs, by part, in GiB; `describe()` shows how it adds up."""

    weights_gb: float
    kv_cache_gb: float
    compute_gb: float
    prompt_cache_gb: float
    total_gb: float
    ctx: int
    parallel: int
    cache_type_k: str = "f16"
    cache_type_v: str = "f16"
    prompt_cache_unbounded: bool = False
    layers: int = 0

    def on_devices(self, gpu_layers: int | None = None) -> float:
        """GiB a replica needs across its GPUs offloading `gpu_layers` layers (None: all)."""
        share = 1.0
        if gpu_layers is not None and self.layers:
            share = min(gpu_layers, self.layers) / self.layers
        return _round_up((self.weights_gb + self.kv_cache_gb) * share + self.compute_gb)

    def parts(self) -> dict[str, float]:
        return {
            "weights": self.weights_gb,
            "KV cache": self.kv_cache_gb,
            "compute": self.compute_gb,
            "prompt cache": self.prompt_cache_gb,
        }

    def largest_part(self) -> str:
        parts = self.parts()
        return max(parts, key=lambda name: parts[name])

    def describe(self) -> str:
        types = (
            self.cache_type_k
            if self.cache_type_k == self.cache_type_v
            else f"k {self.cache_type_k}, v {self.cache_type_v}"
        )
        slots = "slot" if self.parallel == 1 else "slots"
        unbounded = " (unbounded, counted as 8)" if self.prompt_cache_unbounded else ""
        return (
            f"weights {self.weights_gb:.2f}"
            f" + KV cache {self.kv_cache_gb:.2f} (ctx {self.ctx} × {self.parallel} {slots}, {types})"
            f" + compute {self.compute_gb:.2f}"
            f" + prompt cache {self.prompt_cache_gb:.2f}{unbounded}"
            f" = {self.total_gb:.2f} GiB"
        )


def estimate(info: GgufInfo, args: Sequence[str], parallel_default: int = 1) -> MemoryEstimate:
    """The memory llama-server needs to serve `info`'s model with `args`; see the module doc."""
    ctx = _int_flag(args, _CTX)
    if ctx is None or ctx == 0:
        ctx = info.context_trained
    if ctx < 0:
        raise InvalidRequest(f"--ctx-size must be 0 or more, got {ctx}", param="args")
    parallel = _int_flag(args, _PARALLEL)
    if parallel is None or parallel == -1:
        parallel = parallel_default
    if parallel < 1:
        raise InvalidRequest(
            f"--parallel must be 1 or more (or -1 for the default), got {parallel}", param="args"
        )
    type_k = _cache_type(args, _CACHE_K)
    type_v = _cache_type(args, _CACHE_V)

    per_token = info.kv_heads * (
        info.head_dim_k * CACHE_TYPE_BYTES[type_k] + info.head_dim_v * CACHE_TYPE_BYTES[type_v]
    )
    kv_bytes = info.layers * ctx * per_token
    compute_bytes = COMPUTE_FIXED_BYTES + ctx * info.embedding * 4 * 2

    cache_ram = _int_flag(args, _CACHE_RAM)
    unbounded = cache_ram == -1
    if cache_ram is None:
        prompt_cache_gb = PROMPT_CACHE_DEFAULT_MIB * MIB / GIB
    elif unbounded:
        prompt_cache_gb = PROMPT_CACHE_UNBOUNDED_GIB
    elif cache_ram >= 0:
        prompt_cache_gb = cache_ram * MIB / GIB
    else:
        raise InvalidRequest(f"--cache-ram must be -1, 0 or a size in MiB, got {cache_ram}", param="args")

    weights_gb = info.weights_bytes / GIB
    kv_cache_gb = kv_bytes / GIB
    compute_gb = compute_bytes / GIB
    total = weights_gb + kv_cache_gb + compute_gb + prompt_cache_gb
    return MemoryEstimate(
        weights_gb=weights_gb,
        kv_cache_gb=kv_cache_gb,
        compute_gb=compute_gb,
        prompt_cache_gb=prompt_cache_gb,
        total_gb=_round_up(total),
        ctx=ctx,
        parallel=parallel,
        cache_type_k=type_k,
        cache_type_v=type_v,
        prompt_cache_unbounded=unbounded,
        layers=info.layers,
    )


_HINTS = {
    "weights": "use a smaller quantization of the model",
    "KV cache": "lower --ctx-size or set --cache-type-k/--cache-type-v q8_0",
    "compute": "lower --ctx-size",
    "prompt cache": "set --cache-ram 0 to drop it",
}


def fits(estimate: MemoryEstimate, node_memory_free_gb: float) -> str | None:
    """None when the estimate fits in the node's free memory, else why not, naming the largest part."""
    if estimate.total_gb <= node_memory_free_gb:
        return None
    part = estimate.largest_part()
    size = estimate.parts()[part]
    return (
        f"needs {estimate.total_gb:.2f} GiB ({part} {size:.2f} is the largest part: {_HINTS[part]});"
        f" node has {node_memory_free_gb:.2f} GiB free"
    )


def flag_value(args: Sequence[str], names: Sequence[str]) -> str | None:
    """The value of the last of `names` in `args` (``--flag value`` or ``--flag=value``), or None."""
    found: str | None = None
    i = 0
    while i < len(args):
        arg = args[i]
        if arg in names:
            if i + 1 >= len(args):
                raise InvalidRequest(f"{arg} needs a value", param="args")
            found = args[i + 1]
            i += 2
            continue
        name, eq, value = arg.partition("=")
        if eq and name in names:
            found = value
        i += 1
    return found


def _int_flag(args: Sequence[str], names: Sequence[str]) -> int | None:
    raw = flag_value(args, names)
    if raw is None:
        return None
    try:
        return int(raw)
    except ValueError as exc:
        raise InvalidRequest(f"{names[0]} takes a whole number, got {raw!r}", param="args") from exc


def _cache_type(args: Sequence[str], names: Sequence[str]) -> str:
    raw = flag_value(args, names)
    if raw is None:
        return "f16"
    kind = raw.lower()
    if kind not in CACHE_TYPE_BYTES:
        known = ", ".join(CACHE_TYPE_BYTES)
        raise InvalidRequest(f"{names[0]} {raw!r} is not a cache type llmgw knows ({known})", param="args")
    return kind


def _round_up(gib: float) -> float:
    """Up to the next hundredth, ignoring float noise below a hundredth of a byte."""
    return math.ceil(round(gib * 100, 9)) / 100
