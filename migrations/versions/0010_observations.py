"""Observations: outcome signals (feedback, retries, a judge) as scores per backend.

Revision ID: 0010_observations
Revises: 0009_tenant_limits
Create Date: 2026-12-05

Hand-written, a frozen snapshot like the others: one new table, the same operations on
SQLite and PostgreSQL. A row is one signal about one answer: the backend that answered,
its score in [0, 1], the signal's source and time (:mod:`gateway.store.observations`).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0010_observations"
# Follows the newest revision of this branch; revisions 0008/0009 of other branches go
# before it when they are merged (this line is then their head).
down_revision: str | Sequence[str] | None = "0009_tenant_limits"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "observations",
        sa.Column("id", sa.String(), primary_key=True),
        sa.Column("request_id", sa.String(), nullable=False),
        sa.Column("created_at", _TS, nullable=False),
        sa.Column("backend", sa.String(), nullable=False),
        sa.Column("route", sa.String(), nullable=True),
        sa.Column("tenant", sa.String(), nullable=True),
        sa.Column("score", sa.Double(), nullable=False),
        sa.Column("predicted", sa.Double(), nullable=True),
        sa.Column("probability", sa.Double(), nullable=True),
        sa.Column("source", sa.String(), nullable=False),
    )
    op.create_index("ix_observations_created_at", "observations", ["created_at"])


def downgrade() -> None:
    op.drop_index("ix_observations_created_at", table_name="observations")
    op.drop_table("observations")
