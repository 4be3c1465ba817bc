"""MCP: upstream MCP servers in the catalog, where stdio servers run, tool usage per key and day,
and each key's tool grants (none for existing keys: a user key uses no tools until granted).

Revision ID: 0021
Revises: 0020
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0021"
down_revision = "0020"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("api_keys") as batch:
        batch.add_column(sa.Column("tools", sa.JSON, nullable=False,
                                   server_default=sa.text("'{}'")))
    op.create_table(
        "mcp_servers",
        sa.Column("name", sa.String(64), primary_key=True),
        sa.Column("spec", sa.JSON, nullable=False),
        sa.Column("by", sa.String(256), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_table(
        "mcp_runs",
        sa.Column("server", sa.String(64), primary_key=True),
        sa.Column("node_id", sa.String(128), nullable=False, index=True),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("endpoint", sa.String(512), nullable=True),
        sa.Column("pid", sa.Integer, nullable=True),
        sa.Column("restarts", sa.Integer, nullable=False, server_default="0"),
        sa.Column("last_error", sa.Text, nullable=True),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_table(
        "mcp_usage",
        sa.Column("key_id", sa.String(64), primary_key=True),
        sa.Column("server", sa.String(64), primary_key=True),
        sa.Column("tool", sa.String(128), primary_key=True),
        sa.Column("day", sa.String(10), primary_key=True),
        sa.Column("calls", sa.BigInteger, nullable=False, server_default="0"),
        sa.Column("errors", sa.BigInteger, nullable=False, server_default="0"),
        sa.Column("blocked", sa.BigInteger, nullable=False, server_default="0"),
        sa.Column("cost", sa.Float, nullable=False, server_default="0"),
    )


def downgrade() -> None:
    op.drop_table("mcp_usage")
    op.drop_table("mcp_runs")
    op.drop_table("mcp_servers")
    with op.batch_alter_table("api_keys") as batch:
        batch.drop_column("tools")
