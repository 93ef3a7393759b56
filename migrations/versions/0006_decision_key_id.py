"""Decisions: the id of the API key that sent the request.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-04

Hand-written, a frozen snapshot like the others. One nullable column added to
``decisions`` (``NULL``: auth off, the admin key, and every row written before this
revision), so a key budget's counter can start from the spend the store recorded for the
key (docs/LIMITS.md). ``ADD COLUMN`` runs as is on SQLite and PostgreSQL; the downgrade
drops it in a batch, which SQLite runs by rebuilding the table.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | Sequence[str] | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("decisions", sa.Column("key_id", sa.String(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("decisions") as batch:
        batch.drop_column("key_id")
