"""Outcomes: whether the token counts are the gateway's estimate (the upstream sent no usage).

Revision ID: 0008_usage_estimated
Revises: 0007
Create Date: 2026-12-05

Hand-written, a frozen snapshot like the others. One nullable boolean column on
``outcomes`` (``NULL`` for every row written before this revision: unknown); ``ADD COLUMN``
runs as is on SQLite and PostgreSQL, a partitioned ``outcomes`` table included. The
downgrade drops it in a batch, which SQLite runs by rebuilding the table.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008_usage_estimated"
down_revision: str | Sequence[str] | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("outcomes", sa.Column("usage_estimated", sa.Boolean(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("outcomes") as batch:
        batch.drop_column("usage_estimated")
