"""Key limits and notes, settings, usage per key/model/day, shared rate windows.

Revision ID: 0004
Revises: 0003
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("api_keys") as batch:
        batch.add_column(sa.Column("limits", sa.JSON, nullable=False, server_default="{}"))
        batch.add_column(sa.Column("note", sa.Text, nullable=False, server_default=""))
        batch.add_column(sa.Column("minted_by", sa.String(64), nullable=True))
    op.create_table(
        "settings",
        sa.Column("name", sa.String(64), primary_key=True),
        sa.Column("value", sa.JSON, nullable=False),
    )
    op.create_table(
        "usage",
        sa.Column("key_id", sa.String(64), primary_key=True),
        sa.Column("model", sa.String(128), primary_key=True),
        sa.Column("day", sa.String(10), primary_key=True),
        sa.Column("requests", sa.BigInteger, nullable=False),
        sa.Column("prompt_tokens", sa.BigInteger, nullable=False),
        sa.Column("completion_tokens", sa.BigInteger, nullable=False),
        sa.Column("errors", sa.BigInteger, nullable=False),
        sa.Column("blocked", sa.BigInteger, nullable=False),
    )
    op.create_table(
        "rate_windows",
        sa.Column("key_id", sa.String(64), primary_key=True),
        sa.Column("minute", sa.BigInteger, primary_key=True),
        sa.Column("requests", sa.BigInteger, nullable=False),
        sa.Column("tokens", sa.BigInteger, nullable=False),
    )


def downgrade() -> None:
    for table in ("rate_windows", "usage", "settings"):
        op.drop_table(table)
    with op.batch_alter_table("api_keys") as batch:
        for column in ("minted_by", "note", "limits"):
            batch.drop_column(column)
