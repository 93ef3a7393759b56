"""Tenants: requests and tokens per minute and allowed routes, shared by all of a tenant's keys.

Revision ID: 0009_tenant_limits
Revises: 0008_usage_estimated
Create Date: 2026-12-05

Hand-written, a frozen snapshot like the others. Three nullable columns on ``tenants``
(``NULL``: no tenant limit, every route); ``ADD COLUMN`` runs as is on SQLite and
PostgreSQL. The downgrade drops them in a batch, which SQLite runs by rebuilding the table.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009_tenant_limits"
down_revision: str | Sequence[str] | None = "0008_usage_estimated"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("tenants", sa.Column("rpm", sa.Integer(), nullable=True))
    op.add_column("tenants", sa.Column("tpm", sa.Integer(), nullable=True))
    op.add_column("tenants", sa.Column("routes", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("tenants") as batch:
        batch.drop_column("routes")
        batch.drop_column("tpm")
        batch.drop_column("rpm")
