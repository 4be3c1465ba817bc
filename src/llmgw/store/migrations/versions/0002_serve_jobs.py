"""Serve jobs.

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "serve_jobs",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("model", sa.String(128), nullable=False, index=True),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("request", sa.JSON, nullable=False),
        sa.Column("bytes_done", sa.BigInteger, nullable=False),
        sa.Column("bytes_total", sa.BigInteger, nullable=False),
        sa.Column("rate_bps", sa.Float, nullable=False),
        sa.Column("error", sa.Text, nullable=True),
        sa.Column("estimate", sa.Text, nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("serve_jobs")
