"""The database schema. Alembic migrations under `migrations/` create exactly these tables."""

from __future__ import annotations

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Column,
    DateTime,
    Float,
    ForeignKey,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
)

metadata = MetaData()

# One row per counter; `revision` is bumped in the same transaction as every change to the
# catalog, replicas, nodes or keys so caches can notice a change with one cheap read.
meta = Table(
    "meta",
    metadata,
    Column("key", String(64), primary_key=True),
    Column("value", Integer, nullable=False),
)

models = Table(
    "models",
    metadata,
    Column("name", String(128), primary_key=True),
    Column("spec", JSON, nullable=False),
    Column("by", String(256), nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("updated_at", DateTime(timezone=True), nullable=False),
)

replicas = Table(
    "replicas",
    metadata,
    Column("id", String(64), primary_key=True),
    Column("model", String(128), nullable=False, index=True),
    Column("node_id", String(128), nullable=True, index=True),
    Column("profile", String(128), nullable=True),
    Column("state", String(16), nullable=False),
    Column("endpoint", String(256), nullable=True),
    Column("pid", Integer, nullable=True),
    Column("restarts", Integer, nullable=False, default=0),
    Column("last_error", Text, nullable=True),
    Column("cpu_cores", Integer, nullable=False, default=0),
    Column("memory_gb", Float, nullable=False, default=0.0),
    Column("gpu_class", String(64), nullable=True),
    Column("gpus", Integer, nullable=False, default=0),
    Column("devices", JSON, nullable=False, default=list),
    Column("updated_at", DateTime(timezone=True), nullable=False),
)

nodes = Table(
    "nodes",
    metadata,
    Column("id", String(128), primary_key=True),
    Column("address", String(256), nullable=False),
    Column("labels", JSON, nullable=False),
    Column("cores", Integer, nullable=False),
    Column("memory_gb", Float, nullable=False),
    Column("gpus", JSON, nullable=False),
    Column("devices", JSON, nullable=False, default=list),
    Column("heartbeat_at", DateTime(timezone=True), nullable=True),
    Column("cordoned", Boolean, nullable=False, default=False),
    Column("draining", Boolean, nullable=False, default=False),
    # The agent (an id it keeps in its data dir) that reports as this node; NULL for a
    # server's own embedded node, which no join token may report as.
    Column("agent", String(64), nullable=True),
)

api_keys = Table(
    "api_keys",
    metadata,
    Column("id", String(64), primary_key=True),
    Column("name", String(128), nullable=False),
    Column("prefix", String(32), nullable=False),
    Column("last4", String(8), nullable=False),
    Column("hash", String(128), nullable=False, unique=True),
    Column("scope", String(16), nullable=False),
    Column("models", JSON, nullable=False),
    Column("expires_at", DateTime(timezone=True), nullable=True),
    Column("revoked", Boolean, nullable=False, default=False),
    Column("by", String(256), nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("limits", JSON, nullable=False, default=dict),
    Column("note", Text, nullable=False, default=""),
    Column("minted_by", String(64), nullable=True),
    # A node join token's node: given at creation or bound by the token's first report.
    Column("node_id", String(128), nullable=True),
    Column("team", String(64), nullable=True, index=True),
    Column("team_admin", Boolean, nullable=False, default=False),
    # The team itself (teams.id): its name alone could be a later team's.
    Column("team_id", String(64), nullable=True, index=True),
    # MCP tool grants (`ToolGrants`: allow and deny patterns).
    Column("tools", JSON, nullable=False, default=dict),
)

serve_jobs = Table(
    "serve_jobs",
    metadata,
    Column("id", String(64), primary_key=True),
    Column("model", String(128), nullable=False, index=True),
    Column("state", String(16), nullable=False),
    Column("request", JSON, nullable=False),
    Column("bytes_done", BigInteger, nullable=False, default=0),
    Column("bytes_total", BigInteger, nullable=False, default=0),
    Column("rate_bps", Float, nullable=False, default=0.0),
    Column("error", Text, nullable=True),
    Column("estimate", Text, nullable=True),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("updated_at", DateTime(timezone=True), nullable=False),
)

policies = Table(
    "policies",
    metadata,
    Column("name", String(64), primary_key=True),
    Column("spec", JSON, nullable=False),
    Column("by", String(256), nullable=False),
    Column("updated_at", DateTime(timezone=True), nullable=False),
)

# Judges llmgw does not know by name, enabled by an operator with `ctl guard judge enable`.
enabled_judges = Table(
    "enabled_judges",
    metadata,
    Column("name", String(128), primary_key=True),
    Column("spec", JSON, nullable=False),
    Column("by", String(256), nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
)

verdicts = Table(
    "verdicts",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("at", DateTime(timezone=True), nullable=False, index=True),
    Column("policy", String(64), nullable=False),
    Column("judge", String(128), nullable=False),
    Column("direction", String(8), nullable=False),
    Column("outcome", String(24), nullable=False),
    Column("categories", JSON, nullable=False),
    Column("let_through", Boolean, nullable=False),
    Column("latency_ms", Float, nullable=False),
    Column("model", String(128), nullable=False),
    Column("key", String(64), nullable=False),
    Column("request_id", String(64), nullable=False),
    Column("text", Text, nullable=True),
)

# Install-wide settings changed through the admin API (e.g. the default key limits).
settings = Table(
    "settings",
    metadata,
    Column("name", String(64), primary_key=True),
    Column("value", JSON, nullable=False),
)

# Usage per key, model and day; written in batches by every server (additive upserts).
usage = Table(
    "usage",
    metadata,
    Column("key_id", String(64), primary_key=True),
    Column("model", String(128), primary_key=True),
    Column("day", String(10), primary_key=True),  # YYYY-MM-DD, UTC
    Column("requests", BigInteger, nullable=False, default=0),
    Column("prompt_tokens", BigInteger, nullable=False, default=0),
    Column("completion_tokens", BigInteger, nullable=False, default=0),
    Column("errors", BigInteger, nullable=False, default=0),
    Column("blocked", BigInteger, nullable=False, default=0),
    # Answers served from the response cache, and the tokens they would have taken.
    Column("cache_hits", BigInteger, nullable=False, default=0, server_default="0"),
    Column("saved_tokens", BigInteger, nullable=False, default=0, server_default="0"),
)

# Request and token counts per key and minute, shared by every server for rate limits.
rate_windows = Table(
    "rate_windows",
    metadata,
    Column("key_id", String(64), primary_key=True),
    Column("minute", BigInteger, primary_key=True),  # unix time // 60
    Column("requests", BigInteger, nullable=False, default=0),
    Column("tokens", BigInteger, nullable=False, default=0),
)

# Leader election: one row per lease; `epoch` is the fencing token, bumped on every takeover.
leases = Table(
    "leases",
    metadata,
    Column("name", String(64), primary_key=True),
    Column("holder", String(128), nullable=False),
    Column("epoch", BigInteger, nullable=False),
    Column("renewed_at", DateTime(timezone=True), nullable=False),
    Column("expires_at", DateTime(timezone=True), nullable=False),
)

# Every running server says it is alive here, so `cluster status` can list them all.
servers = Table(
    "servers",
    metadata,
    Column("id", String(128), primary_key=True),
    Column("url", String(256), nullable=False),
    Column("started_at", DateTime(timezone=True), nullable=False),
    Column("heartbeat_at", DateTime(timezone=True), nullable=False),
    # The server's demand as JSON (llmgw.core.demand.Activity), written about once a second.
    Column("activity", Text, nullable=True),
)

# Routes: a public model name in front of catalog models (llmgw.core.routes.RouteSpec as JSON).
routes = Table(
    "routes",
    metadata,
    Column("name", String(128), primary_key=True),
    Column("spec", JSON, nullable=False),
    Column("by", String(256), nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("updated_at", DateTime(timezone=True), nullable=False),
)

# Teams: keys belong to at most one; limits and budgets on top of each key's (core.types.Team).
teams = Table(
    "teams",
    metadata,
    Column("name", String(64), primary_key=True),
    # Never reused: a team removed and made again under its name gets a new one.
    Column("id", String(64), nullable=False, unique=True, index=True),
    Column("spec", JSON, nullable=False),
    Column("by", String(256), nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("updated_at", DateTime(timezone=True), nullable=False),
)

# Upstream MCP servers in the catalog (`McpServer`, less its name, in `spec`).
mcp_servers = Table(
    "mcp_servers",
    metadata,
    Column("name", String(64), primary_key=True),
    Column("spec", JSON, nullable=False),
    Column("by", String(256), nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("updated_at", DateTime(timezone=True), nullable=False),
)

# Where each stdio MCP server runs: written by its node's agent (`McpRun`).
mcp_runs = Table(
    "mcp_runs",
    metadata,
    Column("server", String(64), primary_key=True),
    Column("node_id", String(128), nullable=False, index=True),
    Column("state", String(16), nullable=False),
    Column("endpoint", String(512), nullable=True),
    Column("pid", Integer, nullable=True),
    Column("restarts", Integer, nullable=False, default=0),
    Column("last_error", Text, nullable=True),
    Column("updated_at", DateTime(timezone=True), nullable=False),
)

# Tool calls per key, server, tool and day; written in batches by every server (additive upserts).
mcp_usage = Table(
    "mcp_usage",
    metadata,
    Column("key_id", String(64), primary_key=True),
    Column("server", String(64), primary_key=True),
    Column("tool", String(128), primary_key=True),
    Column("day", String(10), primary_key=True),  # YYYY-MM-DD, UTC
    Column("calls", BigInteger, nullable=False, default=0),
    Column("errors", BigInteger, nullable=False, default=0),
    Column("blocked", BigInteger, nullable=False, default=0),
    Column("cost", Float, nullable=False, default=0.0),
)

# Every change made through the admin API, written in the change's own transaction (see
# audit_repo); pruned by the leader after `[control] audit_days`.
audit_log = Table(
    "audit_log",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("at", DateTime(timezone=True), nullable=False, index=True),
    Column("by", String(256), nullable=False),
    Column("kind", String(16), nullable=False),
    Column("action", String(32), nullable=False),
    Column("target", String(256), nullable=False),
    Column("before", JSON, nullable=True),
    Column("after", JSON, nullable=True),
    Column("address", String(64), nullable=True),
)

# People signed in through the identity provider (`[sso]`): one row per issuer + subject.
users = Table(
    "users",
    metadata,
    Column("id", String(40), primary_key=True),
    Column("issuer", String(512), nullable=False),
    Column("subject", String(255), nullable=False),
    Column("email", String(320), nullable=True),
    Column("email_verified", Boolean, nullable=False, default=False),
    Column("name", String(256), nullable=True),
    Column("role", String(16), nullable=True),
    Column("team", String(64), nullable=True),
    Column("role_source", String(8), nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("signed_in_at", DateTime(timezone=True), nullable=False),
    UniqueConstraint("issuer", "subject", name="uq_users_issuer_subject"),
)

# The console's server-side sessions: the browser holds a random token, this its SHA-256.
console_sessions = Table(
    "console_sessions",
    metadata,
    Column("token_hash", String(64), primary_key=True),
    Column("id", String(40), nullable=False, unique=True),
    Column("user_id", String(40), ForeignKey("users.id", ondelete="CASCADE"), nullable=False,
           index=True),
    Column("address", String(64), nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("last_seen_at", DateTime(timezone=True), nullable=False),
    Column("expires_at", DateTime(timezone=True), nullable=False),
    Column("refresh_at", DateTime(timezone=True), nullable=True),
    Column("ended_at", DateTime(timezone=True), nullable=True),
    Column("end_reason", String(32), nullable=True),
)

signin_attempts = Table(
    "signin_attempts",
    metadata,
    Column("address", String(64), primary_key=True),
    Column("window_start", DateTime(timezone=True), nullable=False),
    Column("count", Integer, nullable=False),
)
