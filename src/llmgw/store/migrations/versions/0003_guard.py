"""Guard: policies, enabled judges, the verdict log and guard switches.

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "policies",
        sa.Column("name", sa.String(64), primary_key=True),
        sa.Column("spec", sa.JSON, nullable=False),
        sa.Column("by", sa.String(256), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_table(
        "enabled_judges",
        sa.Column("name", sa.String(128), primary_key=True),
        sa.Column("spec", sa.JSON, nullable=False),
        sa.Column("by", sa.String(256), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_table(
        "verdicts",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False, index=True),
        sa.Column("policy", sa.String(64), nullable=False),
        sa.Column("judge", sa.String(128), nullable=False),
        sa.Column("direction", sa.String(8), nullable=False),
        sa.Column("outcome", sa.String(24), nullable=False),
        sa.Column("categories", sa.JSON, nullable=False),
        sa.Column("let_through", sa.Boolean, nullable=False),
        sa.Column("latency_ms", sa.Float, nullable=False),
        sa.Column("model", sa.String(128), nullable=False),
        sa.Column("key", sa.String(64), nullable=False),
        sa.Column("request_id", sa.String(64), nullable=False),
        sa.Column("text", sa.Text, nullable=True),
    )
    meta = sa.table("meta", sa.column("key", sa.String), sa.column("value", sa.Integer))
    op.bulk_insert(meta, [{"key": "guard_enabled", "value": 1}, {"key": "log_prompts", "value": 0}])


def downgrade() -> None:
    for table in ("verdicts", "enabled_judges", "policies"):
        op.drop_table(table)
    op.execute("DELETE FROM meta WHERE key IN ('guard_enabled', 'log_prompts')")
