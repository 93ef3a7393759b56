"""Outcomes: prompt tokens written to the provider's prompt cache (all, and the 1-hour part).

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-04

Hand-written, a frozen snapshot like the others. Two nullable columns added to
``outcomes`` (``NULL``: the backend does not report cache writes, and every row written
before this revision); ``ADD COLUMN`` runs as is on SQLite and PostgreSQL, including a
PostgreSQL ``outcomes`` table partitioned by time (docs/STORE.md), where it reaches every
partition. The downgrade drops them in a batch, which SQLite runs by rebuilding the table.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | Sequence[str] | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_COLUMNS = ("tokens_cache_write", "tokens_cache_write_1h")


def upgrade() -> None:
    for name in _COLUMNS:
        op.add_column("outcomes", sa.Column(name, sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("outcomes") as batch:
        for name in reversed(_COLUMNS):
            batch.drop_column(name)
