"""The store: one object bundling the engine and the repositories."""

from __future__ import annotations

from sqlalchemy import Engine

from llmgw.store.audit_repo import AuditRepo
from llmgw.store.catalog_repo import CatalogRepo
from llmgw.store.db import migrate, open_engine, read_revision
from llmgw.store.guard_repo import GuardRepo
from llmgw.store.install_repo import InstallRepo
from llmgw.store.job_repo import JobRepo
from llmgw.store.key_repo import KeyRepo
from llmgw.store.lease_repo import LeaseRepo
from llmgw.store.mcp_repo import McpRepo
from llmgw.store.node_repo import NodeRepo
from llmgw.store.replica_repo import ReplicaRepo
from llmgw.store.route_repo import RouteRepo
from llmgw.store.server_repo import ServerRepo
from llmgw.store.session_repo import SessionRepo
from llmgw.store.signin_repo import SigninRepo
from llmgw.store.team_repo import TeamRepo
from llmgw.store.usage_repo import UsageRepo
from llmgw.store.user_repo import UserRepo


class Store:
    """Synchronous repositories over one engine; async callers run them in a worker thread."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.catalog = CatalogRepo(engine)
        self.replicas = ReplicaRepo(engine)
        self.nodes = NodeRepo(engine)
        self.keys = KeyRepo(engine)
        self.jobs = JobRepo(engine)
        self.guard = GuardRepo(engine)
        self.usage = UsageRepo(engine)
        self.leases = LeaseRepo(engine)
        self.servers = ServerRepo(engine)
        self.install = InstallRepo(engine)
        self.routes = RouteRepo(engine)
        self.teams = TeamRepo(engine)
        self.audit = AuditRepo(engine)
        self.users = UserRepo(engine)
        self.sessions = SessionRepo(engine)
        self.signins = SigninRepo(engine)
        self.mcp = McpRepo(engine)

    @classmethod
    def open(cls, url: str, *, migrate_schema: bool = True) -> Store:
        """Open the database at `url`, migrating it to the newest schema first."""
        engine = open_engine(url)
        if migrate_schema:
            migrate(engine)
        return cls(engine)

    def revision(self) -> int:
        return read_revision(self.engine)

    def close(self) -> None:
        self.engine.dispose()
