"""Teams, and each key's team (at most one) and whether it is its team's admin.

Revision ID: 0012
Revises: 0011
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "teams",
        sa.Column("name", sa.String(64), primary_key=True),
        sa.Column("spec", sa.JSON, nullable=False),
        sa.Column("by", sa.String(256), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
    )
    with op.batch_alter_table("api_keys") as batch:
        batch.add_column(sa.Column("team", sa.String(64), nullable=True))
        batch.add_column(sa.Column("team_admin", sa.Boolean, nullable=False,
                                   server_default=sa.false()))
        batch.create_index("ix_api_keys_team", ["team"])


def downgrade() -> None:
    with op.batch_alter_table("api_keys") as batch:
        batch.drop_index("ix_api_keys_team")
        batch.drop_column("team_admin")
        batch.drop_column("team")
    op.drop_table("teams")
