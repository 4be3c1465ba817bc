"""Read a GGUF file's header: architecture, shape and size of the model, no tensor data.

`gguf.GGUFReader` memory-maps the file; only the metadata key/values and the tensors' shapes,
types and byte sizes are looked at, so reading a multi-gigabyte model touches a few pages.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from gguf import GGUFReader, LlamaFileType

from llmgw.core.errors import InvalidRequest, NotFound
from llmgw.core.gguf import GgufInfo

_MAGIC = b"GGUF"


def read_info(path: Path) -> GgufInfo:
    """The model's shape from its GGUF header.

    Raises `NotFound` when the file is missing and `InvalidRequest` when it is not GGUF, is
    truncated, or lacks the architecture fields sizing needs; the message names the file.
    """
    try:
        with path.open("rb") as f:
            magic = f.read(len(_MAGIC))
        file_bytes = path.stat().st_size
    except FileNotFoundError as exc:
        raise NotFound(f"{path}: no such file") from exc
    except OSError as exc:
        raise InvalidRequest(f"{path}: cannot read the file ({exc.strerror or exc})") from exc
    if magic != _MAGIC:
        raise InvalidRequest(f"{path}: not a GGUF file (it does not start with the GGUF magic)")
    try:
        reader = GGUFReader(path)
    except (ValueError, IndexError, KeyError, OverflowError, TypeError, OSError) as exc:
        why = str(exc) or type(exc).__name__
        raise InvalidRequest(f"{path}: truncated or corrupt GGUF file ({why})") from exc
    return _info(path, reader, file_bytes)


def _info(path: Path, reader: GGUFReader, file_bytes: int) -> GgufInfo:
    arch = _value(reader, "general.architecture")
    if not isinstance(arch, str) or not arch:
        raise InvalidRequest(f"{path}: GGUF metadata has no general.architecture")

    def key(name: str) -> str:
        return f"{arch}.{name}"

    missing: list[str] = []

    def required(name: str) -> int:
        v = _int(reader, key(name))
        if v is None:
            missing.append(key(name))
            return 0
        return v

    layers = required("block_count")
    heads = required("attention.head_count")
    embedding = required("embedding_length")
    context_trained = required("context_length")
    if missing:
        raise InvalidRequest(f"{path}: GGUF metadata lacks {', '.join(missing)}")
    if heads <= 0:
        raise InvalidRequest(f"{path}: GGUF metadata has {key('attention.head_count')} = {heads}")

    tensors = reader.tensors
    if not tensors:
        raise InvalidRequest(f"{path}: GGUF file has no tensors")
    data_end = max(t.data_offset + t.n_bytes for t in tensors)
    if data_end > file_bytes:
        raise InvalidRequest(
            f"{path}: truncated GGUF file (tensor data ends at byte {data_end}, the file has {file_bytes})"
        )

    kv_heads = _int(reader, key("attention.head_count_kv")) or heads
    return GgufInfo(
        architecture=arch,
        parameters=sum(int(t.n_elements) for t in tensors),
        quantization=_quantization(reader),
        layers=layers,
        heads=heads,
        kv_heads=kv_heads,
        embedding=embedding,
        head_dim_k=_int(reader, key("attention.key_length")) or embedding // heads,
        head_dim_v=_int(reader, key("attention.value_length")) or embedding // heads,
        context_trained=context_trained,
        file_bytes=file_bytes,
        weights_bytes=sum(int(t.n_bytes) for t in tensors),
        sliding_window=_int(reader, key("attention.sliding_window")) or None,
    )


def _value(reader: GGUFReader, key: str) -> Any:
    field = reader.get_field(key)
    return None if field is None else field.contents()


def _int(reader: GGUFReader, key: str) -> int | None:
    """An integer field; a per-layer array counts as its largest element."""
    v = _value(reader, key)
    if isinstance(v, list):
        v = max((x for x in v if isinstance(x, int | float) and not isinstance(x, bool)), default=None)
    if isinstance(v, bool) or not isinstance(v, int | float):
        return None
    return int(v)


def _quantization(reader: GGUFReader) -> str:
    """`general.file_type` by name (`Q4_K_M`), else the tensor type holding the most weights."""
    ftype = _int(reader, "general.file_type")
    if ftype is not None and ftype != LlamaFileType.GUESSED:
        try:
            name = LlamaFileType(ftype).name
        except ValueError:
            pass
        else:
            return name.removeprefix("MOSTLY_").removeprefix("ALL_")
    elements: Counter[str] = Counter()
    for t in reader.tensors:
        elements[t.tensor_type.name] += int(t.n_elements)
    return elements.most_common(1)[0][0]
