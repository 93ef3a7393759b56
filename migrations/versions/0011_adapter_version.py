"""Decisions: the adapter version that made each one.

Revision ID: 0011_adapter_version
Revises: 0010_observations
Create Date: 2026-12-06

Hand-written, a frozen snapshot like the others. One nullable column added to
``decisions`` (``NULL``: refused before the router decided, and every row written before
this revision), so that logs say which adapter set (classifier heads and outcome
correction, docs/LEARNING.md "Adapter versions") decided, and a promoted version's bar
compliance can be measured on its own decisions. ``ADD COLUMN`` runs as is on SQLite and
PostgreSQL; the downgrade drops it in a batch, which SQLite runs by rebuilding the table.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0011_adapter_version"
down_revision: str | Sequence[str] | None = "0010_observations"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("decisions", sa.Column("adapter_version", sa.String(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("decisions") as batch:
        batch.drop_column("adapter_version")
