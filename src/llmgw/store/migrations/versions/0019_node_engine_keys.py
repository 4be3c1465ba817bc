"""Engine keys per node: every placed replica is stopped once, to be replaced.

Until now every engine ran with the install's one engine key; from now on servers call each
replica with its own node's key (`core.engine_keys`), which a running engine would refuse. So
each replica placed before the upgrade is marked stopping: its node's agent (of this version or
an earlier one) stops the engine, the replica keeper places a new one, and the agent starts it
with the key it was handed at its last report, its node's own. Capacity dips as at a restart.

Revision ID: 0019
Revises: 0018
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None


def upgrade() -> None:
    replicas = sa.table("replicas", sa.column("node_id", sa.String), sa.column("state", sa.String))
    op.execute(replicas.update()
               .where(replicas.c.node_id.is_not(None), replicas.c.state != "stopping")
               .values(state="stopping"))


def downgrade() -> None:
    pass  # an earlier version's engines start with the install's key again as they are replaced
