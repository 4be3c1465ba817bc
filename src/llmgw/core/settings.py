"""The install's configuration: where its data lives and how the server listens."""

from __future__ import annotations

import os
import tomllib
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from llmgw.core import names
from llmgw.core.errors import ConfigError

CONFIG_FILE = "config.toml"


def default_data_dir() -> Path:
    """`$LLMGW_DATA_DIR`, else `~/.local/share/llmgw`."""
    env = os.environ.get("LLMGW_DATA_DIR")
    if env:
        return Path(env).expanduser()
    return Path.home() / ".local" / "share" / "llmgw"


class ServerSettings(BaseModel):
    """What `server init` writes to `config.toml` and `server run` reads."""

    model_config = ConfigDict(extra="forbid")

    host: str = "127.0.0.1"
    port: int = Field(default=8080, ge=0, le=65535)
    database: str = ""
    # Hex secret keying the API-key hashes; a leaked database alone does not reveal usable keys.
    key_secret: str
    node_id: str = "local"
    # Run a node agent inside the server (one machine). HA servers usually leave replicas to
    # `llmgw node run` agents on other machines.
    embedded_node: bool = True
    # How often caches check the store's revision; also the bound on how long a change takes
    # to reach the request path.
    refresh_interval_s: float = Field(default=1.0, gt=0, le=60)
    # How long an engine may take to answer /health with 200 before it counts as failed.
    engine_start_timeout_s: float = Field(default=120.0, gt=0)
    # Timeout for one upstream call (connect to last byte) when the request sets none.
    upstream_timeout_s: float = Field(default=600.0, gt=0)
    max_body_bytes: int = Field(default=8 * 1024 * 1024, gt=0)
    # The judge keeper serves no judge itself this long after it starts: `server init` adds its
    # own judge just after the control plane starts, sized and placed as the install says.
    judge_grace_s: float = Field(default=600.0, ge=0)
    # A node whose agent has not reported for this long is lost: its replicas go elsewhere.
    node_timeout_s: float = Field(default=30.0, gt=0)
    # How often the leader's keepers look even when nothing woke them (changes wake them).
    keeper_interval_s: float = Field(default=5.0, gt=0, le=300)
    # Leader election on PostgreSQL (ttl > renew deadline > 1.2 × retry; checked at start).
    leader_ttl_s: float = Field(default=15.0, gt=0)
    leader_renew_deadline_s: float = Field(default=10.0, gt=0)
    leader_retry_s: float = Field(default=2.0, gt=0)
    # Where local GGUF files (`ctl model add --path`) may live besides DATA_DIR/models.
    model_roots: list[str] = Field(default_factory=list)
    # Variables a remote model's `api_key_env` may name besides LLMGW_PROVIDER_*.
    provider_key_env: list[str] = Field(default_factory=list)

    @field_validator("model_roots")
    @classmethod
    def _absolute(cls, v: list[str]) -> list[str]:
        if not all(Path(r).is_absolute() for r in v):
            raise ValueError("model_roots must be absolute directories")
        return v

    @field_validator("provider_key_env")
    @classmethod
    def _env_names(cls, v: list[str]) -> list[str]:
        return [names.check_env_name(n) for n in v]

    def model_dirs(self, data_dir: Path) -> list[Path]:
        """The directories local model files may be in: DATA_DIR/models, then `model_roots`."""
        return [data_dir / "models", *(Path(r) for r in self.model_roots)]
    # The HTTP edge: a client has this long from connecting (or from a request's first byte)
    # to send the request's headers; an idle kept-alive connection is closed after
    # keepalive_timeout_s; one client address holds at most max_connections_per_client
    # connections (0: no bound; raise it behind a proxy, where every client has its address).
    header_timeout_s: float = Field(default=10.0, gt=0)
    keepalive_timeout_s: float = Field(default=75.0, gt=0)
    max_connections_per_client: int = Field(default=256, ge=0)
    # On SIGTERM the control loops stop at once; requests in flight get this long to finish.
    drain_timeout_s: float = Field(default=30.0, ge=0)
    # A server whose heartbeat is older than this is listed as gone, never as the leader.
    server_timeout_s: float = Field(default=30.0, gt=0)
    # Whether `/metrics` answers without a key; otherwise it takes an admin or metrics key.
    metrics_public: bool = False

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
        return ServerSettings.model_validate(raw.get("server", {}))
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
    lines = ["# llmgw install configuration, written by `llmgw server init`.", "[server]"]
    for name, value in settings.model_dump().items():
        if isinstance(value, bool):
            text = "true" if value else "false"
        elif isinstance(value, int | float):
            text = repr(value)
        elif isinstance(value, list):
            text = "[" + ", ".join(_quoted(v) for v in value) + "]"
        else:
            text = _quoted(value)
        lines.append(f"{name} = {text}")
    return "\n".join(lines) + "\n"


def _quoted(value: object) -> str:
    return '"' + str(value).replace("\\", "\\\\").replace('"', '\\"') + '"'
