"""GPUs one by one: a node's GPUs as devices (index, UUID, class, memory), and the devices a
replica runs on. Existing rows have none: a node's agent reports its GPUs at its next report,
and replicas placed before the upgrade keep running as they were placed.

Revision ID: 0020
Revises: 0019
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0020"
down_revision = "0019"
branch_labels = None
depends_on = None


def upgrade() -> None:
    for table in ("nodes", "replicas"):
        with op.batch_alter_table(table) as batch:
            batch.add_column(sa.Column("devices", sa.JSON, nullable=False,
                                       server_default=sa.text("'[]'")))


def downgrade() -> None:
    for table in ("nodes", "replicas"):
        with op.batch_alter_table(table) as batch:
            batch.drop_column("devices")
