"""Draining nodes, and the servers of an install.

Revision ID: 0006
Revises: 0005
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("nodes") as batch:
        batch.add_column(
            sa.Column("draining", sa.Boolean, nullable=False, server_default=sa.false())
        )
    op.create_table(
        "servers",
        sa.Column("id", sa.String(128), primary_key=True),
        sa.Column("url", sa.String(256), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("heartbeat_at", sa.DateTime(timezone=True), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("servers")
    with op.batch_alter_table("nodes") as batch:
        batch.drop_column("draining")
