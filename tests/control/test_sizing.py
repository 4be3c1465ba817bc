"""`estimate` and `fits`: a replica's memory from the model's shape and llama-server's args."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from llmgw.control.sizing import estimate, fits, flag_value
from llmgw.core.errors import InvalidRequest
from llmgw.core.gguf import GgufInfo

GIB = 2**30
MIB = 2**20


def llama_8b(**over: Any) -> GgufInfo:
    """A Llama-3-8B-shaped model: 32 layers, 8 KV heads of 128, 4096 wide, 4 GiB of weights.

    At ctx 4096 in f16 its KV cache is 32 × 4096 × 8 × (128 + 128) × 2 bytes = 0.5 GiB exactly,
    and compute is 256 MiB + 4096 × 4096 × 4 × 2 bytes = 384 MiB = 0.375 GiB.
    """
    info = GgufInfo(
        architecture="llama",
        parameters=8_030_261_248,
        quantization="Q4_K_M",
        layers=32,
        heads=32,
        kv_heads=8,
        embedding=4096,
        head_dim_k=128,
        head_dim_v=128,
        context_trained=8192,
        file_bytes=4 * GIB + 5 * MIB,
        weights_bytes=4 * GIB,
    )
    return replace(info, **over)


NO_PROMPT_CACHE = ["--cache-ram", "0"]


# --- the parts ---------------------------------------------------------------------------------


def test_a_known_config_adds_up_part_by_part() -> None:
    e = estimate(llama_8b(), ["--ctx-size", "4096", *NO_PROMPT_CACHE])
    assert e.weights_gb == 4.0
    assert e.kv_cache_gb == 0.5
    assert e.compute_gb == 0.375
    assert e.prompt_cache_gb == 0.0
    assert e.total_gb == 4.88  # 4.875 rounded up
    assert (e.ctx, e.parallel, e.cache_type_k, e.cache_type_v) == (4096, 1, "f16", "f16")


def test_the_total_rounds_up_to_hundredths_but_leaves_exact_values_alone() -> None:
    exact = estimate(llama_8b(weights_bytes=int(3.625 * GIB)), ["-c", "4096", *NO_PROMPT_CACHE])
    assert exact.total_gb == 4.5
    one_byte_more = llama_8b(weights_bytes=int(3.625 * GIB) + 1)
    just_over = estimate(one_byte_more, ["-c", "4096", *NO_PROMPT_CACHE])
    assert just_over.total_gb == 4.51


def test_kv_cache_uses_separate_key_and_value_head_dims() -> None:
    # 18 layers × 4096 × 1 KV head × (256 + 128) × 2 bytes
    e = estimate(llama_8b(layers=18, kv_heads=1, head_dim_k=256, head_dim_v=128), ["-c", "4096"])
    assert e.kv_cache_gb * GIB == 18 * 4096 * 1 * (256 + 128) * 2


def test_the_default_prompt_cache_adds_exactly_8_gib_over_none() -> None:
    default = estimate(llama_8b(), ["-c", "4096"])
    none = estimate(llama_8b(), ["-c", "4096", *NO_PROMPT_CACHE])
    assert default.prompt_cache_gb == 8.0
    assert default.total_gb - none.total_gb == pytest.approx(8.0)


def test_cache_ram_in_mib_is_counted_as_given() -> None:
    assert estimate(llama_8b(), ["--cache-ram", "512"]).prompt_cache_gb == 0.5
    assert estimate(llama_8b(), ["-cram", "2048"]).prompt_cache_gb == 2.0


def test_an_unbounded_prompt_cache_counts_as_8_gib_and_says_so() -> None:
    e = estimate(llama_8b(), ["-c", "4096", "--cache-ram", "-1"])
    assert e.prompt_cache_gb == 8.0
    assert e.prompt_cache_unbounded
    assert "prompt cache 8.00 (unbounded, counted as 8)" in e.describe()


def test_ctx_size_0_or_absent_means_the_trained_context() -> None:
    for args in (["--ctx-size", "0"], ["-c", "0"], []):
        e = estimate(llama_8b(), [*args, *NO_PROMPT_CACHE])
        assert e.ctx == 8192
        assert e.kv_cache_gb == 1.0
        assert e.compute_gb == 0.5  # 256 MiB + 8192 × 4096 × 8 bytes


def test_parallel_slots_share_the_context_instead_of_multiplying_it() -> None:
    one = estimate(llama_8b(), ["-c", "4096"])
    four = estimate(llama_8b(), ["-c", "4096", "--parallel", "4"])
    assert four.parallel == 4
    assert four.kv_cache_gb == one.kv_cache_gb == 0.5
    assert estimate(llama_8b(), ["-np", "3"]).parallel == 3


def test_parallel_absent_or_minus_one_takes_the_default() -> None:
    assert estimate(llama_8b(), []).parallel == 1
    assert estimate(llama_8b(), [], parallel_default=4).parallel == 4
    assert estimate(llama_8b(), ["--parallel", "-1"], parallel_default=2).parallel == 2


def test_flags_may_be_written_with_an_equals_sign() -> None:
    e = estimate(llama_8b(), ["--ctx-size=4096", "--parallel=2", "--cache-ram=0", "--cache-type-k=q8_0"])
    assert (e.ctx, e.parallel, e.prompt_cache_gb, e.cache_type_k) == (4096, 2, 0.0, "q8_0")


def test_the_last_occurrence_of_a_flag_wins() -> None:
    assert flag_value(["-c", "1024", "--ctx-size=2048", "--ctx-size", "4096"], ("--ctx-size", "-c")) == "4096"
    assert flag_value(["--ctx-size", "1024", "-c=2048"], ("--ctx-size", "-c")) == "2048"
    assert flag_value(["--port", "8080"], ("--ctx-size", "-c")) is None
    # A flag that merely starts like another is not it.
    assert flag_value(["-ctk", "q8_0", "--ctx-size-draft", "9"], ("--ctx-size", "-c")) is None


def test_key_and_value_cache_types_size_their_own_halves() -> None:
    # q8_0 is 34 bytes per 32 elements, q4_0 18 per 32: per token 8 × (128 × 34/32 + 128 × 2) bytes.
    mixed = estimate(llama_8b(), ["-c", "4096", "-ctk", "q8_0"])
    assert (mixed.cache_type_k, mixed.cache_type_v) == ("q8_0", "f16")
    assert mixed.kv_cache_gb * GIB == 32 * 4096 * 8 * (128 * 34 / 32 + 128 * 2)
    q4 = estimate(llama_8b(), ["-c", "4096", "--cache-type-k", "q4_0", "--cache-type-v", "q4_0"])
    assert q4.kv_cache_gb == 32 * 4096 * 8 * (128 + 128) * 0.5625 / GIB
    swapped = estimate(llama_8b(head_dim_v=64), ["-c", "4096", "-ctv", "Q8_0"])
    assert swapped.kv_cache_gb * GIB == 32 * 4096 * 8 * (128 * 2 + 64 * 34 / 32)


# --- describe ----------------------------------------------------------------------------------


def test_describe_shows_how_the_total_adds_up() -> None:
    e = estimate(llama_8b(), ["-c", "4096", "-np", "2"])
    assert e.describe() == (
        "weights 4.00 + KV cache 0.50 (ctx 4096 × 2 slots, f16) + compute 0.38"
        " + prompt cache 8.00 = 12.88 GiB"
    )


def test_describe_names_both_cache_types_when_they_differ() -> None:
    e = estimate(llama_8b(), ["-c", "4096", "-ctk", "q8_0", *NO_PROMPT_CACHE])
    assert "(ctx 4096 × 1 slot, k q8_0, v f16)" in e.describe()


# --- bad args ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--ctx-size", "lots"], "--ctx-size takes a whole number"),
        (["--ctx-size", "-5"], "--ctx-size must be 0 or more"),
        (["--parallel", "0"], "--parallel must be 1 or more"),
        (["--cache-ram", "-2"], "--cache-ram must be -1, 0 or a size in MiB"),
        (["--cache-type-k", "q3_k"], "--cache-type-k 'q3_k' is not a cache type"),
        (["-c"], "-c needs a value"),
    ],
)
def test_bad_args_are_invalid_requests(args: list[str], message: str) -> None:
    with pytest.raises(InvalidRequest, match=message):
        estimate(llama_8b(), args)


# --- fits --------------------------------------------------------------------------------------


def test_an_estimate_that_fits_has_nothing_to_say() -> None:
    e = estimate(llama_8b(), ["-c", "4096", *NO_PROMPT_CACHE])
    assert fits(e, 4.88) is None
    assert fits(e, 64.0) is None


def test_a_misfit_names_the_prompt_cache_when_it_is_the_largest_part() -> None:
    e = estimate(llama_8b(), ["-c", "4096"])
    assert fits(e, 3.2) == (
        "needs 12.88 GiB (prompt cache 8.00 is the largest part: set --cache-ram 0 to drop it);"
        " node has 3.20 GiB free"
    )


def test_a_misfit_names_the_kv_cache_when_it_is_the_largest_part() -> None:
    # At the trained context of 65536: KV 8 GiB, compute 256 MiB + 65536 × 4096 × 8 bytes = 2.25 GiB.
    e = estimate(llama_8b(context_trained=65536), NO_PROMPT_CACHE)
    message = fits(e, 8.0)
    assert message is not None
    assert message.startswith("needs 14.25 GiB (KV cache 8.00 is the largest part: lower --ctx-size")
    assert message.endswith("node has 8.00 GiB free")


def test_a_misfit_names_the_weights_when_they_are_the_largest_part() -> None:
    e = estimate(llama_8b(), ["-c", "1024", *NO_PROMPT_CACHE])
    message = fits(e, 2.0)
    assert message is not None
    assert "(weights 4.00 is the largest part: use a smaller quantization" in message


def test_on_gpus_a_replica_needs_weights_kv_cache_and_compute_but_not_the_prompt_cache() -> None:
    e = estimate(llama_8b(), ["--ctx-size", "4096"])  # the default 8 GiB prompt cache too

    assert e.on_devices() == 4.88  # 4 + 0.5 + 0.375, rounded up
    # Half the layers offloaded: half the weights and KV cache, all of the compute buffers.
    assert e.on_devices(gpu_layers=16) == 2.63  # 2 + 0.25 + 0.375, rounded up
    assert e.on_devices(gpu_layers=999) == e.on_devices()
