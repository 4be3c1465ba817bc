"""Teams get an id that is never reused, and keys name their team by it.

Before this revision a team was its name: a team removed and made again under the same name
took over the old one's cached answers, limit counters, keys and usage. Each existing team gets
a new id. A key belongs to the team of its name only if it was made once that team was: a key
made before it belongs to an earlier team of the same name, long removed, and keeps no team id
(it stays in no team, as a key whose team was removed always did).

Revision ID: 0017
Revises: 0016
"""

from __future__ import annotations

import secrets

import sqlalchemy as sa
from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("teams") as batch:
        batch.add_column(sa.Column("id", sa.String(64), nullable=True))
    with op.batch_alter_table("api_keys") as batch:
        batch.add_column(sa.Column("team_id", sa.String(64), nullable=True))
        batch.create_index("ix_api_keys_team_id", ["team_id"])
    teams = sa.table("teams", sa.column("name", sa.String), sa.column("id", sa.String),
                     sa.column("created_at", sa.DateTime(timezone=True)))
    keys = sa.table("api_keys", sa.column("team", sa.String), sa.column("team_id", sa.String),
                    sa.column("created_at", sa.DateTime(timezone=True)))
    conn = op.get_bind()
    for name, created_at in conn.execute(sa.select(teams.c.name, teams.c.created_at)).all():
        team_id = f"team-{secrets.token_hex(5)}"  # as llmgw.core.ids.new_id("team") makes them
        conn.execute(sa.update(teams).where(teams.c.name == name).values(id=team_id))
        conn.execute(sa.update(keys).where(keys.c.team == name, keys.c.created_at >= created_at)
                     .values(team_id=team_id))
    with op.batch_alter_table("teams") as batch:
        batch.alter_column("id", existing_type=sa.String(64), nullable=False)
        batch.create_index("ix_teams_id", ["id"], unique=True)


def downgrade() -> None:
    with op.batch_alter_table("api_keys") as batch:
        batch.drop_index("ix_api_keys_team_id")
        batch.drop_column("team_id")
    with op.batch_alter_table("teams") as batch:
        batch.drop_index("ix_teams_id")
        batch.drop_column("id")
