"""Named domain data for tests: nodes, models, replicas and keys a reader can picture.

Plain functions with keyword overrides, so any test module can `from tests.factories import …`.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from llmgw.core.ids import hash_key, key_prefix, new_api_key
from llmgw.core.mcp import McpServer, McpTransport
from llmgw.core.types import (
    ApiKey,
    Engine,
    Gpu,
    KeyScope,
    LocalSource,
    Model,
    Node,
    Profile,
    ProviderApi,
    RemoteSource,
    Replica,
    ReplicaState,
    Scaling,
)
from llmgw.store.store import Store

# The moment "now" in tests that do not move time; FakeClock() starts here too.
NOW = datetime(2026, 1, 1, tzinfo=UTC)

# The server-side secret keying API-key hashes in tests.
KEY_SECRET = bytes.fromhex("00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff")


# --- nodes -------------------------------------------------------------------------------------


def node(id: str = "node-a", *, cores: int = 4, memory_gb: float = 16.0, **over: Any) -> Node:
    """A node that reported in at NOW."""
    fields: dict[str, Any] = {"heartbeat_at": NOW}
    fields.update(over)
    return Node(id=id, cores=cores, memory_gb=memory_gb, **fields)


def node_2_cores(id: str = "small", **over: Any) -> Node:
    """A laptop-sized node: 2 cores, 8 GB."""
    return node(id, cores=2, memory_gb=8.0, **over)


def node_8_cores(id: str = "big", **over: Any) -> Node:
    """A workstation: 8 cores, 32 GB."""
    return node(id, cores=8, memory_gb=32.0, **over)


def gpu_node(id: str = "gpu", *, gpus: dict[str, int] | None = None, **over: Any) -> Node:
    """A node with one L4 GPU unless told otherwise."""
    return node(id, cores=8, memory_gb=32.0, gpus=gpus if gpus is not None else {"l4": 1}, **over)


def gpu_device(
    index: int, gpu_class: str, memory_gb: float, *, free_gb: float | None = None,
    name: str = "", **over: Any,
) -> Gpu:
    """A GPU as a node's agent reports it (NVML): free as much as its total unless told."""
    return Gpu(index=index, uuid=f"GPU-{gpu_class}-{index:02d}-5f3c", name=name, gpu_class=gpu_class,
               memory_gb=memory_gb, free_gb=memory_gb if free_gb is None else free_gb, **over)


def gpus_node(id: str, devices: list[Gpu], **over: Any) -> Node:
    """A node with these GPUs (counted by class as the agent counts them): 32 cores, 256 GB."""
    counts: dict[str, int] = {}
    for d in devices:
        counts[d.gpu_class] = counts.get(d.gpu_class, 0) + 1
    return node(id, cores=32, memory_gb=256.0, gpus=counts, devices=devices, **over)


def h200_node(id: str = "h200-box", *, free_gb: float | None = None, **over: Any) -> Node:
    """One NVIDIA H200 as NVML reports it: 139.8 GB."""
    return gpus_node(id, [gpu_device(0, "h200", 139.8, free_gb=free_gb, name="NVIDIA H200",
                                     compute_capability="9.0")], **over)


def a100_pair_node(id: str = "a100-box", *, gpu_class: str | None = None, **over: Any) -> Node:
    """Two A100s of different memory, 40 GB and 80 GB: classes a100-40gb and a100-80gb as named
    from NVML, or both `gpu_class` as a node's config may rename them."""
    return gpus_node(id, [
        gpu_device(0, gpu_class or "a100-40gb", 40.0, name="NVIDIA A100-SXM4-40GB"),
        gpu_device(1, gpu_class or "a100-80gb", 80.0, name="NVIDIA A100-SXM4-80GB"),
    ], **over)


def judge_machine(
    id: str = "judge-box", *, cores: int = 4, memory_gb: float = 16.0, **over: Any
) -> Node:
    """A 4-core, 16 GB node set aside for judges: labelled role=judge."""
    over.setdefault("labels", {"role": "judge"})
    return node(id, cores=cores, memory_gb=memory_gb, **over)


def tiny_node(id: str = "tiny", **over: Any) -> Node:
    """Plenty of cores, little memory: 16 cores, 2 GB."""
    return node(id, cores=16, memory_gb=2.0, **over)


def silent_node(id: str = "silent", *, silent_s: float = 47, **over: Any) -> Node:
    """An 8-core node whose last heartbeat was `silent_s` seconds before NOW."""
    return node_8_cores(id, heartbeat_at=NOW - timedelta(seconds=silent_s), **over)


# --- catalog -----------------------------------------------------------------------------------


def cpu_profile(name: str = "default", *, cores: int = 1, memory_gb: float = 1.0, **over: Any) -> Profile:
    """A llama.cpp profile holding `cores` cores and `memory_gb` GB."""
    return Profile(name=name, engine=Engine.LLAMACPP, cpu_cores=cores, min_memory_gb=memory_gb, **over)


def gpu_profile(name: str = "gpu", *, gpu: int = 1, gpu_class: str | None = "l4", **over: Any) -> Profile:
    """A llama.cpp profile that needs a GPU."""
    return Profile(name=name, engine=Engine.LLAMACPP, gpu=gpu, gpu_class=gpu_class, **over)


def judge_profile(name: str = "judge", *, cores: int = 1, memory_gb: float = 1.0, **over: Any) -> Profile:
    """A CPU profile that only goes on nodes labelled role=judge."""
    over.setdefault("node_selector", {"role": "judge"})
    return cpu_profile(name, cores=cores, memory_gb=memory_gb, **over)


def local_model(
    name: str,
    *,
    profiles: list[Profile] | None = None,
    replicas: int = 1,
    path: str | None = None,
    **over: Any,
) -> Model:
    """A local GGUF model kept at `replicas` replicas (scaling.min = scaling.max)."""
    return Model(
        name=name,
        source=LocalSource(path=path or f"/models/{name}.gguf"),
        profiles=profiles if profiles is not None else [cpu_profile()],
        scaling=Scaling(min=replicas, max=max(replicas, 1)),
        **over,
    )


def gemma_model(**over: Any) -> Model:
    """The demo model: Gemma 3 270M, one core and one GB by default."""
    return local_model("gemma3-270m", **over)


def qwen_guard_model(**over: Any) -> Model:
    """A judge model: Qwen3Guard 0.6B."""
    return local_model("qwen3guard-0.6b", guard=True, **over)


def remote_model(
    name: str = "gpt-4o-mini",
    *,
    base_url: str = "https://api.example.com/v1",
    api_key_env: str | None = "LLMGW_PROVIDER_EXAMPLE",
    upstream_name: str | None = None,
    api: ProviderApi = ProviderApi.OPENAI,
) -> Model:
    """A model proxied to a remote provider speaking `api`."""
    return Model(
        name=name,
        source=RemoteSource(base_url=base_url, api_key_env=api_key_env, model=upstream_name, api=api),
        profiles=[Profile(engine=Engine.REMOTE, cpu_cores=0, min_memory_gb=0)],
    )


# --- replicas ----------------------------------------------------------------------------------


def replica(id: str, model: str, **over: Any) -> Replica:
    return Replica(id=id, model=model, **over)


def replica_pending(
    id: str = "rep-pending", model: str = "gemma3-270m", *, reason: str | None = None
) -> Replica:
    """Waiting for a node; `reason` is what the keeper last said about it."""
    return Replica(id=id, model=model, state=ReplicaState.PENDING, last_error=reason)


def replica_placed(
    id: str,
    model: str = "gemma3-270m",
    *,
    node_id: str = "big",
    state: ReplicaState = ReplicaState.STARTING,
    cores: int = 1,
    memory_gb: float = 1.0,
    profile: str = "default",
    **over: Any,
) -> Replica:
    """A replica on a node holding `cores` and `memory_gb` there."""
    return Replica(
        id=id,
        model=model,
        node_id=node_id,
        profile=profile,
        state=state,
        cpu_cores=cores,
        memory_gb=memory_gb,
        **over,
    )


def replica_ready(
    id: str = "rep-ready", model: str = "gemma3-270m", *, port: int = 39001, **over: Any
) -> Replica:
    """A ready replica listening on 127.0.0.1:`port`."""
    over.setdefault("endpoint", f"http://127.0.0.1:{port}/v1")
    return replica_placed(id, model, state=ReplicaState.READY, **over)


def replica_failed(
    id: str = "rep-failed",
    model: str = "gemma3-270m",
    *,
    error: str = "engine exited with code 1",
    **over: Any,
) -> Replica:
    """A placed replica whose engine died."""
    return replica_placed(id, model, state=ReplicaState.FAILED, last_error=error, **over)


# --- keys --------------------------------------------------------------------------------------


def api_key(
    *,
    scope: KeyScope = KeyScope.USER,
    models: list[str] | None = None,
    expires_at: datetime | None = None,
    revoked: bool = False,
    name: str = "test key",
    secret: bytes = KEY_SECRET,
) -> tuple[str, ApiKey]:
    """A fresh plaintext key and the record the store keeps for it."""
    plaintext = new_api_key()
    record = ApiKey(
        id="key-" + plaintext[-6:],
        name=name,
        prefix=key_prefix(plaintext),
        last4=plaintext[-4:],
        hash=hash_key(secret, plaintext),
        scope=scope,
        models=models or [],
        expires_at=expires_at,
        revoked=revoked,
    )
    return plaintext, record


def user_key(**over: Any) -> tuple[str, ApiKey]:
    return api_key(scope=KeyScope.USER, **over)


def admin_key(**over: Any) -> tuple[str, ApiKey]:
    return api_key(scope=KeyScope.ADMIN, **over)


def upstream_call(route: Any, body: bytes, api: Any = None, **over: Any) -> Any:
    """An UpstreamCall for `route` carrying `body` (parsed by the dialect of `api`, chat by default)."""
    import time

    import orjson

    from llmgw.gateway.call import UpstreamCall
    from llmgw.gateway.service import WIRES
    from llmgw.gateway.wire.dialect import Api

    api = api or Api.CHAT
    payload = over.pop("payload", None) or orjson.loads(body)
    wire = WIRES[api]
    values: dict[str, Any] = dict(route=route, body=body, payload=payload, api=api, wire=wire,
                                  request_id="req-test", key=user_key()[1], started=time.monotonic())
    if "ask" not in over:
        values["ask"] = wire.read(payload)
    return UpstreamCall(**{**values, **over})


def stdio_server(name: str, *command: str, **over: Any) -> McpServer:
    """A stdio MCP server (its command `true` unless given)."""
    return McpServer(name=name, transport=McpTransport.STDIO, command=list(command or ["true"]),
                     **over)


def add_mcp_server(store: Store, server: McpServer) -> None:
    """Put `server` in the catalog's `mcp_servers` as it is stored (its spec less its name),
    in place of any server of its name."""
    from sqlalchemy import delete, insert

    from llmgw.store.db import bump_revision
    from llmgw.store.schema import mcp_servers

    spec = server.model_dump(mode="json", exclude={"name", "by", "created_at", "updated_at"})
    with store.engine.begin() as conn:
        conn.execute(delete(mcp_servers).where(mcp_servers.c.name == server.name))
        conn.execute(insert(mcp_servers).values(name=server.name, spec=spec, by="test",
                                                created_at=NOW, updated_at=NOW))
        bump_revision(conn)
