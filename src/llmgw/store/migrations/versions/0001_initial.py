"""Initial schema: catalog, replicas, nodes, keys and the revision counter.

Revision ID: 0001
Revises:
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    meta = op.create_table(
        "meta",
        sa.Column("key", sa.String(64), primary_key=True),
        sa.Column("value", sa.Integer, nullable=False),
    )
    op.bulk_insert(meta, [{"key": "revision", "value": 0}])
    op.create_table(
        "models",
        sa.Column("name", sa.String(128), primary_key=True),
        sa.Column("spec", sa.JSON, nullable=False),
        sa.Column("by", sa.String(256), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_table(
        "replicas",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("model", sa.String(128), nullable=False, index=True),
        sa.Column("node_id", sa.String(128), nullable=True, index=True),
        sa.Column("profile", sa.String(128), nullable=True),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("endpoint", sa.String(256), nullable=True),
        sa.Column("pid", sa.Integer, nullable=True),
        sa.Column("restarts", sa.Integer, nullable=False),
        sa.Column("last_error", sa.Text, nullable=True),
        sa.Column("cpu_cores", sa.Integer, nullable=False),
        sa.Column("memory_gb", sa.Float, nullable=False),
        sa.Column("gpu_class", sa.String(64), nullable=True),
        sa.Column("gpus", sa.Integer, nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_table(
        "nodes",
        sa.Column("id", sa.String(128), primary_key=True),
        sa.Column("address", sa.String(256), nullable=False),
        sa.Column("labels", sa.JSON, nullable=False),
        sa.Column("cores", sa.Integer, nullable=False),
        sa.Column("memory_gb", sa.Float, nullable=False),
        sa.Column("gpus", sa.JSON, nullable=False),
        sa.Column("heartbeat_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("cordoned", sa.Boolean, nullable=False),
    )
    op.create_table(
        "api_keys",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("name", sa.String(128), nullable=False),
        sa.Column("prefix", sa.String(32), nullable=False),
        sa.Column("last4", sa.String(8), nullable=False),
        sa.Column("hash", sa.String(128), nullable=False, unique=True),
        sa.Column("scope", sa.String(16), nullable=False),
        sa.Column("models", sa.JSON, nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("revoked", sa.Boolean, nullable=False),
        sa.Column("by", sa.String(256), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )


def downgrade() -> None:
    for table in ("api_keys", "nodes", "replicas", "models", "meta"):
        op.drop_table(table)
