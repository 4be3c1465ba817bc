"""Small GGUF files written in tests (no real model): the `gguf` package's own writer."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
from gguf import GGUFWriter, LlamaFileType

# A tiny "llama": 2 layers, 64-wide embedding, 8 heads (head dim 8), 2 KV heads.
LLAMA_FIELDS: dict[str, int | list[int]] = {
    "llama.block_count": 2,
    "llama.context_length": 2048,
    "llama.embedding_length": 64,
    "llama.attention.head_count": 8,
    "llama.attention.head_count_kv": 2,
}


def llama_tensors() -> dict[str, np.ndarray]:
    """Two f16 matrices and an f32 norm: 32×64 + 64 + 32×64 = 4160 elements, 8448 bytes."""
    return {
        "token_embd.weight": np.zeros((32, 64), dtype=np.float16),
        "blk.0.attn_norm.weight": np.ones(64, dtype=np.float32),
        "output.weight": np.zeros((32, 64), dtype=np.float16),
    }


def write_gguf(
    path: Path,
    *,
    arch: str = "llama",
    fields: dict[str, int | list[int]] | None = None,
    omit: Sequence[str] = (),
    file_type: int | None = LlamaFileType.MOSTLY_F16,
    tensors: dict[str, np.ndarray] | None = None,
) -> Path:
    """Write a small GGUF file: `LLAMA_FIELDS` updated by `fields`, minus the keys in `omit`."""
    meta = {**LLAMA_FIELDS, **(fields or {})}
    path.parent.mkdir(parents=True, exist_ok=True)
    writer = GGUFWriter(path, arch)
    for key, value in meta.items():
        if key in omit:
            continue
        if isinstance(value, list):
            writer.add_array(key, value)
        else:
            writer.add_uint32(key, value)
    if file_type is not None:
        writer.add_file_type(file_type)
    if "general.architecture" in omit:
        del writer.kv_data[0]["general.architecture"]
    for name, data in (llama_tensors() if tensors is None else tensors).items():
        writer.add_tensor(name, data)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path
