"""Keys minted by a key that was later rotated belong to its successor.

Before this revision a rotation left the keys a key had minted pointing at the old, revoked key.
Keys whose minter is revoked are now refused, so without this they would stop working on
upgrade. The successor is the key whose `by` says it rotated the old one (the only record of a
rotation); a chain of rotations resolves to its last key.

Revision ID: 0009
Revises: 0008
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

_ROTATING = ", rotating "


def upgrade() -> None:
    keys = sa.table("api_keys", sa.column("id", sa.String), sa.column("prefix", sa.String),
                    sa.column("last4", sa.String), sa.column("by", sa.String),
                    sa.column("revoked", sa.Boolean), sa.column("minted_by", sa.String))
    conn = op.get_bind()
    rows = conn.execute(sa.select(keys.c.id, keys.c.prefix, keys.c.last4, keys.c.by,
                                  keys.c.revoked)).all()
    # A label (prefix…last4) names one key in practice; an ambiguous one is left alone.
    labels: dict[str, list[str]] = {}
    for r in rows:
        if r.revoked:
            labels.setdefault(f"{r.prefix}…{r.last4}", []).append(r.id)
    successor: dict[str, str] = {}
    for r in rows:
        if _ROTATING in r.by:
            rotated = labels.get(r.by.rsplit(_ROTATING, 1)[1], [])
            if len(rotated) == 1:
                successor[rotated[0]] = r.id
    for old, new in successor.items():
        seen = {old}
        while new in successor and new not in seen:
            seen.add(new)
            new = successor[new]
        conn.execute(sa.update(keys).where(keys.c.minted_by == old).values(minted_by=new))


def downgrade() -> None:
    pass  # the old minters are revoked: pointing back at them would only lose keys
