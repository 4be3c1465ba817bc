"""Join tokens bound to one node, so a token cannot report as another machine.

Revision ID: 0008
Revises: 0007
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Tokens made before this revision bind to the node of their next report.
    with op.batch_alter_table("api_keys") as batch:
        batch.add_column(sa.Column("node_id", sa.String(128), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("api_keys") as batch:
        batch.drop_column("node_id")
