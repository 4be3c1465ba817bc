"""Users: whether the provider verified the stored email (only a verified one finds a user).

A row from before is marked unverified, as nothing said otherwise: its email stays on show but
finds nobody until its person signs in again and the provider says it is verified.

Revision ID: 0018
Revises: 0017
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("users", sa.Column("email_verified", sa.Boolean, nullable=False,
                                     server_default=sa.false()))


def downgrade() -> None:
    with op.batch_alter_table("users") as batch:
        batch.drop_column("email_verified")
