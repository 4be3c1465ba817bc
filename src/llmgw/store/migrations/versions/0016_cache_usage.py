"""Usage counts answers served from the response cache, and the tokens they saved.

Revision ID: 0016
Revises: 0015
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("usage", sa.Column("cache_hits", sa.BigInteger, nullable=False,
                                     server_default="0"))
    op.add_column("usage", sa.Column("saved_tokens", sa.BigInteger, nullable=False,
                                     server_default="0"))


def downgrade() -> None:
    with op.batch_alter_table("usage") as batch:
        batch.drop_column("saved_tokens")
        batch.drop_column("cache_hits")
