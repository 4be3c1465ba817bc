"""What a GGUF model file says about itself: the numbers memory sizing needs."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class GgufInfo:
    """A GGUF file's header, reduced to the shape of the model.

    `parameters` and `weights_bytes` are sums over the file's tensors (element counts and stored
    byte sizes). Per-layer metadata (some architectures give `head_count_kv` as one value per
    layer) is reduced to its maximum, so sizing from it errs on the large side.
    """

    architecture: str
    parameters: int
    quantization: str
    layers: int
    heads: int
    kv_heads: int
    embedding: int
    head_dim_k: int
    head_dim_v: int
    context_trained: int
    file_bytes: int
    weights_bytes: int
    sliding_window: int | None = None
