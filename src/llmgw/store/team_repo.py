"""Teams in the database; every write bumps the revision, so every server's limits follow."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import Engine, delete, select

from llmgw.core.audit import AuditKind
from llmgw.core.errors import Conflict, NotFound
from llmgw.core.ids import new_id
from llmgw.core.types import Team
from llmgw.store.audit_repo import record
from llmgw.store.db import bump_revision, utc
from llmgw.store.schema import api_keys, teams
from llmgw.store.upsert import upsert

_SPEC_FIELDS = {"models", "limits", "note", "tools", "weight"}


def _to_team(row: Any) -> Team:
    return Team.model_validate({"name": row.name, "id": row.id, **row.spec, "by": row.by,
                                "created_at": utc(row.created_at),
                                "updated_at": utc(row.updated_at)})


class TeamRepo:
    """Reads and writes teams."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    def list(self) -> list[Team]:
        with self._engine.connect() as conn:
            rows = conn.execute(select(teams).order_by(teams.c.name)).all()
        return [_to_team(r) for r in rows]

    def get(self, name: str) -> Team:
        with self._engine.connect() as conn:
            row = conn.execute(select(teams).where(teams.c.name == name)).one_or_none()
        if row is None:
            raise NotFound(f"team {name!r} does not exist", param="team")
        return _to_team(row)

    def put(self, team: Team, by: str, now: datetime, *, replace: bool) -> Team:
        """Add a team (Conflict when the name is taken) under a new id, or with `replace` change
        one (its id stays)."""
        spec = team.model_dump(mode="json", include=_SPEC_FIELDS)
        with self._engine.begin() as conn:
            upsert(conn, teams, team.name, spec, write="update" if replace else "insert",
                   kind=AuditKind.TEAM, action="set" if replace else "add", by=by, now=now,
                   taken=Conflict(f"team {team.name!r} already exists", param="name"),
                   missing=NotFound(f"team {team.name!r} does not exist", param="team"),
                   fixed={"id": new_id("team")})
        return self.get(team.name)

    def remove(self, name: str) -> None:
        """Remove a team that no live key belongs to (Conflict otherwise: revoke them first).
        Its id goes with it: a team made later under its name is another team."""
        with self._engine.begin() as conn:
            bump_revision(conn)  # first: a key being made for the team meanwhile waits
            old = conn.execute(select(teams.c.id, teams.c.spec)
                               .where(teams.c.name == name)).one_or_none()
            if old is None:
                raise NotFound(f"team {name!r} does not exist", param="team")
            live = conn.execute(select(api_keys.c.id).where(
                api_keys.c.team_id == old.id, api_keys.c.revoked.is_(False))).first()
            if live is not None:
                raise Conflict(f"team {name!r} still has keys; revoke them first", param="name")
            conn.execute(delete(teams).where(teams.c.name == name))
            record(conn, AuditKind.TEAM, "remove", name, old.spec, None)
