"""Domain types shared by every layer: catalog models, profiles, replicas, nodes and how a
model fits them, keys and their usage."""

from __future__ import annotations

import fnmatch
from datetime import UTC, datetime
from enum import StrEnum
from typing import Annotated, Literal
from urllib.parse import urlsplit

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)

from llmgw.core import engine_command, names, redact
from llmgw.core.cache import CacheSpec
from llmgw.core.ids import new_id
from llmgw.core.names import _REPO_RE, NAME_PATTERN

__all__ = ["NAME_PATTERN", "_REPO_RE"]  # the API document shows the name rules


def as_utc(value: datetime) -> datetime:
    """`value` in UTC; a time without a zone is taken as UTC (as the docs promise). A ValueError
    (a client's 400) for a time whose UTC falls outside the calendar (years 1 to 9999), as
    `0001-01-01T00:00:00+14:00` does."""
    if value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    try:
        return value.astimezone(UTC)
    except OverflowError as exc:
        raise ValueError("the time in UTC falls outside years 1 to 9999") from exc


# A datetime from a client: naive means UTC, so comparing it with the clock never raises.
UtcDatetime = Annotated[datetime, AfterValidator(as_utc)]


# The validation context of what the store reads back: rules added since it was written are not
# applied to it again (`RemoteSource`'s port).
STORED = {"stored": True}


class Engine(StrEnum):
    """Which engine serves a profile."""

    LLAMACPP = "llamacpp"
    REMOTE = "remote"
    # Any OpenAI-compatible server started from the profile's `command` (vLLM, SGLang, another
    # llama-server build), supervised like llama-server.
    COMMAND = "command"


class Frozen(BaseModel):
    """Immutable, and strict about unknown fields: the base of domain and wire types."""

    # Errors never quote the input: a logged one must not show a URL's credential.
    model_config = ConfigDict(frozen=True, extra="forbid", hide_input_in_errors=True)


class LocalSource(Frozen):
    """A GGUF file already on the node's disk."""

    kind: Literal["local"] = "local"
    path: str


class HubSource(Frozen):
    """A file in a Hugging Face repo, fetched into the node's model-file cache."""

    kind: Literal["hf"] = "hf"
    repo: str
    file: str
    revision: str = "main"

    _repo = field_validator("repo")(names.check_repo)
    _file = field_validator("file")(names.check_file)
    _revision = field_validator("revision")(names.check_revision)


class ProviderApi(StrEnum):
    """Which dialect a remote provider speaks."""

    # Chat completions, completions and embeddings: what OpenAI-compatible providers speak.
    OPENAI = "openai"
    # Anthropic's Messages API (`/messages`, `/messages/count_tokens`) and nothing else.
    ANTHROPIC = "anthropic"


class RemoteSource(Frozen):
    """A remote provider; its API key is read from an env var on the server."""

    kind: Literal["remote"] = "remote"
    base_url: str
    api_key_env: str | None = None
    # The provider's own name for the model, when it differs from the catalog name.
    model: str | None = None
    # The dialect decides the path, the auth header and whether a request must be translated.
    # Entries stored before it existed were all OpenAI-compatible, hence the default.
    api: ProviderApi = ProviderApi.OPENAI

    @field_validator("base_url")
    @classmethod
    def _http_url(cls, v: str, info: ValidationInfo) -> str:
        v = v.rstrip("/")
        parts = urlsplit(v)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError("base_url must be an http:// or https:// URL with a host")
        if info.context == STORED:
            # An entry an earlier version took stays readable (listed, removable); its requests
            # answer the transport's 502.
            return v
        # A port that does not parse would fail every request to the model; the message never
        # echoes the URL, which may carry a credential.
        try:
            port = parts.port
        except ValueError:
            port = 0
        if port == 0:
            raise ValueError("base_url's port must be a number from 1 to 65535")
        return v

    def shown(self) -> RemoteSource:
        """This source as readers of the catalog see it: the URL without its credentials and
        query values (`core.redact.url`); the upstream call uses the stored one."""
        return self.model_copy(update={"base_url": redact.url(self.base_url)})


Source = Annotated[LocalSource | HubSource | RemoteSource, Field(discriminator="kind")]


class Profile(Frozen):
    """One way to run a model; the keeper places by profile, in order."""

    name: str = "default"
    engine: Engine = Engine.LLAMACPP
    args: list[str] = Field(default_factory=list)
    cpu_cores: int = Field(default=1, ge=0, le=1024)
    min_memory_gb: float = Field(default=1.0, ge=0)
    gpu_class: str | None = None
    gpu: int = Field(default=0, ge=0)
    # Whether its replicas may share their devices with other sharing replicas, by memory;
    # otherwise each of its replicas has its devices to itself.
    gpu_share: bool = False
    # The GPU memory one replica needs across its devices, GB; None: not known, and devices fit
    # by count alone. Serving a GGUF sizes it (weights, KV cache and compute buffers).
    gpu_memory_gb: float | None = Field(default=None, ge=0)
    # The layers llama-server offloads to the GPU (partial offload); None: all of them.
    gpu_layers: int | None = Field(default=None, ge=0)
    node_selector: dict[str, str] = Field(default_factory=dict)
    # The `command` engine's template (`core.engine_command`).
    command: list[str] = Field(default_factory=list, description=(
        "Engine command only: the program and its arguments, run without a shell; placeholders "
        "{model_path} {model} {host} {port} {devices} {threads}; {port} is required."))
    env: dict[str, str] = Field(default_factory=dict, description=(
        "Engine command only: variables added to the engine's environment; the placeholders of "
        "command but {port}, and {api_key} (the engine key, never allowed in command)."))
    ready_path: str | None = Field(default=None, max_length=512, description=(
        "Engine command only: the path that answers 200 once the engine serves; null: "
        "/v1/models."))

    @model_validator(mode="after")
    def _engine_fields(self) -> Profile:
        if self.engine != Engine.COMMAND:
            given = [n for n in ("command", "env", "ready_path") if getattr(self, n)]
            if given:
                raise ValueError(f"profile {self.name!r}: {', '.join(given)} are for engine "
                                 f"'command', not {self.engine.value!r}")
            return self
        if self.args:
            raise ValueError(f"profile {self.name!r}: a command engine takes its arguments in "
                             "command, not args")
        try:
            engine_command.check(self.command, self.env)
        except ValueError as exc:
            raise ValueError(f"profile {self.name!r}: {exc}") from None
        if self.ready_path is not None and not self.ready_path.startswith("/"):
            raise ValueError(f"profile {self.name!r}: ready_path must be a path starting with /")
        return self


class Scaling(Frozen):
    """How many replicas the keeper keeps ready."""

    min: int = Field(default=1, ge=0, le=64)
    max: int = Field(default=1, ge=0, le=64)
    # Replicas above `min` that served nothing for this long are stopped (None: they stay).
    # With `min` 0 the model is on demand: its first request starts it, and it goes when idle.
    idle_s: float | None = Field(default=None, gt=0, le=30 * 86400)

    @property
    def on_demand(self) -> bool:
        """Whether the model may have no replica at all (scale to zero)."""
        return self.min == 0

    @model_validator(mode="after")
    def _ordered(self) -> Scaling:
        if self.max < self.min:
            raise ValueError(f"scaling.max ({self.max}) is below scaling.min ({self.min})")
        return self


class Model(Frozen):
    """A catalog entry."""

    name: str
    source: Source
    profiles: list[Profile] = Field(default_factory=list)
    scaling: Scaling = Field(default_factory=Scaling)
    guard: bool = False
    # Its own response cache setting; None: the install's `[cache]`.
    cache: CacheSpec | None = None
    by: str = ""
    created_at: datetime | None = None
    updated_at: datetime | None = None

    _valid_name = field_validator("name")(names.check_model_name)

    @model_validator(mode="after")
    def _consistent(self) -> Model:
        remote = isinstance(self.source, RemoteSource)
        for p in self.profiles:
            if remote != (p.engine == Engine.REMOTE):
                raise ValueError(
                    f"profile {p.name!r}: engine {p.engine.value!r} does not serve a "
                    f"{self.source.kind} source"
                )
        if not remote and not self.profiles:
            raise ValueError("a local model needs at least one profile")
        return self

    @property
    def is_remote(self) -> bool:
        """True when the model is proxied to a remote provider rather than run on a node."""
        return isinstance(self.source, RemoteSource)

    def shown(self) -> Model:
        """This entry as the admin API, the console and `ctl` show it: a remote provider's URL
        without the credentials and query values it may carry."""
        if not isinstance(self.source, RemoteSource):
            return self
        return self.model_copy(update={"source": self.source.shown()})


class ReplicaState(StrEnum):
    """Lifecycle of one engine process."""

    PENDING = "pending"
    STARTING = "starting"
    READY = "ready"
    FAILED = "failed"
    STOPPING = "stopping"


class Gpu(Frozen):
    """One GPU of a node: found by its agent (NVML), or declared (`--gpu CLASS=COUNT`), when
    what is known of it is its class alone."""

    index: int = Field(ge=0)
    # NVML's "GPU-…" UUID, which `CUDA_VISIBLE_DEVICES` takes; a declared GPU's is "CLASS-N".
    uuid: str = Field(min_length=1, max_length=128)
    name: str = Field(default="", max_length=128)  # e.g. "NVIDIA H200"
    gpu_class: str = Field(min_length=1, max_length=64)  # e.g. "h200", "a100-80gb"
    memory_gb: float = Field(default=0.0, ge=0)  # total; 0 when not known (declared)
    free_gb: float | None = Field(default=None, ge=0)  # at the node's last report
    compute_capability: str | None = None  # e.g. "9.0"
    # What the node's last report measured (None: declared, or NVML cannot tell on this GPU).
    memory_used_gb: float | None = Field(default=None, ge=0)
    utilization: float | None = Field(default=None, ge=0, le=1)  # busy share of the last sample
    temperature_c: float | None = Field(default=None, ge=-100, le=300)

    @property
    def declared(self) -> bool:
        """Whether only its class is known (`--gpu`), not its memory."""
        return self.memory_gb == 0


class Replica(Frozen):
    """One engine process for a model on a node (or waiting for one)."""

    id: str
    model: str
    node_id: str | None = None
    profile: str | None = None
    state: ReplicaState = ReplicaState.PENDING
    endpoint: str | None = None
    pid: int | None = None
    restarts: int = 0
    last_error: str | None = None
    # What the replica holds on its node, copied from its profile at placement.
    cpu_cores: int = 0
    memory_gb: float = 0.0
    gpu_class: str | None = None
    gpus: int = 0
    # The UUIDs of the node's GPUs it runs on (`Gpu.uuid`), `gpus` of them; empty on a CPU.
    devices: list[str] = Field(default_factory=list)
    updated_at: datetime | None = None


class Node(Frozen):
    """A machine that runs replicas."""

    id: str = Field(min_length=1, max_length=128)
    address: str = Field(default="127.0.0.1", min_length=1, max_length=253)
    labels: dict[str, str] = Field(default_factory=dict)
    cores: int = Field(ge=0, le=1_000_000)
    memory_gb: float = Field(ge=0, le=1e9)
    gpus: dict[str, int] = Field(default_factory=dict)
    # Its GPUs one by one, where they are known (NVML): `gpus` counts them by class.
    devices: list[Gpu] = Field(default_factory=list, max_length=1024)
    heartbeat_at: datetime | None = None
    # Cordoned: no new replicas. Draining: cordoned, and its replicas move to other nodes.
    cordoned: bool = False
    draining: bool = False


class Fit(Frozen):
    """One profile of a model on one node, as an operator asks about it: does the model fit
    there, does it run there, and would one more replica fit there now."""

    profile: str
    node_id: str
    # Whether the model fits the node with its own replicas not counted against it: a node
    # that runs it fits it. `reason` says why not.
    fits: bool
    reason: str | None
    # Replicas of the model on the node, stopping ones aside.
    running: int
    # Whether one more replica fits now, everything counted: the scheduler's answer for a
    # pending replica. `one_more_reason` says why not.
    one_more: bool
    one_more_reason: str | None


class KeyScope(StrEnum):
    """What a key may do."""

    ADMIN = "admin"
    USER = "user"
    # A node agent's join token: the agent API only, never the data plane or the admin API.
    NODE = "node"
    # A Prometheus scraper's key: `/metrics` only.
    METRICS = "metrics"


class Limits(Frozen):
    """Per-key limits; None means no limit of that kind."""

    rpm: int | None = Field(default=None, ge=1)  # requests per minute
    tpm: int | None = Field(default=None, ge=1)  # tokens per minute (prompt + completion)
    concurrent: int | None = Field(default=None, ge=1)  # requests in flight
    tokens_per_day: int | None = Field(default=None, ge=1)
    tokens_per_month: int | None = Field(default=None, ge=1)
    # MCP tool calls (`tools/call`), counted apart from model requests.
    tool_calls_per_minute: int | None = Field(default=None, ge=1)
    tool_concurrent: int | None = Field(default=None, ge=1)  # tool calls in flight

    def within(self, other: Limits) -> list[str]:
        """The fields where these limits exceed `other`'s (None is unlimited)."""
        over = []
        for name in Limits.model_fields:
            mine, theirs = getattr(self, name), getattr(other, name)
            if theirs is not None and (mine is None or mine > theirs):
                over.append(name)
        return over

    def merged(self, default: Limits) -> Limits:
        """These limits, with `default`'s where these set none."""
        return Limits(**{n: getattr(self, n) if getattr(self, n) is not None else getattr(default, n)
                         for n in Limits.model_fields})


class ToolGrants(Frozen):
    """Which MCP servers' tools are allowed and denied, as patterns over `SERVER/TOOL`; a deny wins."""

    allow: list[str] = Field(default_factory=list, max_length=256)
    deny: list[str] = Field(default_factory=list, max_length=256)

    @property
    def empty(self) -> bool:
        return not self.allow and not self.deny

    def allows(self, server: str, tool: str) -> bool:
        """Whether a pattern of `allow` matches and none of `deny` does."""
        return tool_matches(self.allow, server, tool) and not self.denies(server, tool)

    def denies(self, server: str, tool: str) -> bool:
        return tool_matches(self.deny, server, tool)


def tool_matches(patterns: list[str], server: str, tool: str) -> bool:
    """Whether a pattern over `SERVER/TOOL` matches (grants and guard policies read them alike)."""
    target = f"{server}/{tool}"
    # `github` alone grants the whole server, as `github/*` does.
    return any(fnmatch.fnmatchcase(target, p if "/" in p or p == "*" else f"{p}/*")
               for p in patterns)


class KeyInfo(Frozen):
    """A key as it may be shown: everything stored about it but its hash (`ApiKey` adds that;
    the admin API's `KeyOut` adds how logs name it)."""

    id: str
    name: str
    prefix: str
    last4: str
    scope: KeyScope
    models: list[str] = Field(default_factory=list)
    expires_at: datetime | None = None
    revoked: bool = False
    by: str = ""
    created_at: datetime | None = None
    limits: Limits = Field(default_factory=Limits)
    note: str = ""
    # The key that minted this one (None for keys an admin or init created).
    minted_by: str | None = None
    # A node join token's node: the only one it may report as (None until its first report).
    node_id: str | None = None
    # The team the key belongs to (at most one): the team's limits and budgets hold on top of
    # the key's own, and a key may call only the team's models. `team` is its name, as shown;
    # `team_id` is the team itself (`Team.id`): a team removed and made again under the same
    # name is another team, and this key is none of its.
    team: str | None = None
    team_id: str | None = None
    # A user key that may mint keys for its team, and see its team's keys and usage.
    team_admin: bool = False
    # MCP tools this key may use (none when empty, for a user key; see `gateway.mcp` for how a
    # team's grants and a minter's apply).
    tools: ToolGrants = Field(default_factory=ToolGrants)


class ApiKey(KeyInfo):
    """A stored key: never the key itself, only its hash and a visible prefix."""

    hash: str

    @property
    def label(self) -> str:
        """How logs and lists name the key: prefix and last four characters."""
        return f"{self.prefix}…{self.last4}"


class UsageRow(Frozen):
    """One key's use of one model on one UTC day: the usage meter's counts, as the store adds
    them up and the admin API shows them."""

    key_id: str
    model: str
    day: str  # YYYY-MM-DD
    requests: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    errors: int = 0
    blocked: int = 0
    cache_hits: int = 0  # answered from the response cache
    saved_tokens: int = 0  # what those answers would have taken


TEAM_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,47}$"
# Teams share the per-minute store rows and the shared limit store with keys, under "team:" +
# the team's id.
TEAM_KEY_PREFIX = "team:"


class Team(Frozen):
    """A group of keys with its own limits and token budgets, on top of each key's."""

    name: str = Field(pattern=TEAM_NAME_PATTERN)
    # The team itself, never reused: what keys, limit counters and cached answers name it by.
    # The store gives each team it adds one of its own (this default is for teams not stored).
    id: str = Field(default_factory=lambda: new_id("team"))
    # Models (names or patterns) the team's keys may call; empty: any the key may.
    models: list[str] = Field(default_factory=list)
    limits: Limits = Field(default_factory=Limits)
    # MCP tools the team's keys may use: a key without grants of its own gets the team's, and a
    # key's own grants stay within them.
    tools: ToolGrants = Field(default_factory=ToolGrants)
    # The team's share of a busy model against other teams' (fair queueing); 1 is an even share.
    weight: float = Field(default=1.0, gt=0, le=1000)
    note: str = Field(default="", max_length=1000)
    by: str = ""
    created_at: datetime | None = None
    updated_at: datetime | None = None

    @property
    def limiter_id(self) -> str:
        """The id the limiter counts the team's requests and tokens under."""
        return TEAM_KEY_PREFIX + self.id
