"""Initial store schema: decisions, outcomes, policies.

Revision ID: 0001
Revises:
Create Date: 2026-11-30

Hand-written; a frozen snapshot (it does not import the application models, so later
model changes never rewrite history).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0001"
down_revision: str | Sequence[str] | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "decisions",
        sa.Column("request_id", sa.String(), primary_key=True),
        sa.Column("created_at", _TS, nullable=False),
        sa.Column("tenant", sa.String(), nullable=True),
        sa.Column("route", sa.String(), nullable=False),
        sa.Column("endpoint", sa.String(), nullable=False),
        sa.Column("policy_hash", sa.String(), nullable=False),
        sa.Column("pinned", sa.Boolean(), nullable=False),
        sa.Column("chosen", sa.String(), nullable=False),
        sa.Column("reason", sa.String(), nullable=False),
        sa.Column("probability", sa.Double(), nullable=False),
        sa.Column("prefix_hash", sa.String(), nullable=True),
        sa.Column("candidates", sa.JSON(), nullable=False),
        sa.Column("fallbacks", sa.JSON(), nullable=False),
        sa.Column("signals", sa.JSON(), nullable=False),
    )
    op.create_index("ix_decisions_created_at", "decisions", ["created_at"])
    op.create_table(
        "outcomes",
        sa.Column("request_id", sa.String(), primary_key=True),
        sa.Column("created_at", _TS, nullable=False),
        sa.Column("backend", sa.String(), nullable=True),
        sa.Column("model", sa.String(), nullable=True),
        sa.Column("status", sa.String(), nullable=False),
        sa.Column("http_status", sa.Integer(), nullable=False),
        sa.Column("error_code", sa.String(), nullable=True),
        sa.Column("fallbacks_taken", sa.JSON(), nullable=False),
        sa.Column("ttft_s", sa.Double(), nullable=True),
        sa.Column("itl_s", sa.Double(), nullable=True),
        sa.Column("latency_s", sa.Double(), nullable=True),
        sa.Column("tokens_in", sa.Integer(), nullable=False),
        sa.Column("tokens_out", sa.Integer(), nullable=False),
        sa.Column("tokens_cached", sa.Integer(), nullable=False),
        sa.Column("cost_usd", sa.Double(), nullable=False),
        sa.Column("streamed", sa.Boolean(), nullable=False),
    )
    op.create_index("ix_outcomes_created_at", "outcomes", ["created_at"])
    op.create_table(
        "policies",
        sa.Column("hash", sa.String(), primary_key=True),
        sa.Column("text", sa.Text(), nullable=False),
        sa.Column("first_seen", _TS, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("policies")
    op.drop_index("ix_outcomes_created_at", table_name="outcomes")
    op.drop_table("outcomes")
    op.drop_index("ix_decisions_created_at", table_name="decisions")
    op.drop_table("decisions")
