"""Responses kept for ``previous_response_id`` (the OpenAI Responses door).

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-05

Hand-written, a frozen snapshot like the others: one new table, the same operations on
SQLite and PostgreSQL. A row holds one response the gateway served with ``store`` on: the
input items of its request (without the chain before it), its output items, the id of
the response it continued, and the response object ``GET /v1/responses/{id}`` returns.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | Sequence[str] | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "responses",
        sa.Column("id", sa.String(), primary_key=True),
        sa.Column("tenant", sa.String(), nullable=True),
        sa.Column("request_id", sa.String(), nullable=True),
        sa.Column("created_at", _TS, nullable=False),
        sa.Column("previous_response_id", sa.String(), nullable=True),
        sa.Column("input_items", sa.JSON(), nullable=False),
        sa.Column("output_items", sa.JSON(), nullable=False),
        sa.Column("body", sa.JSON(), nullable=False),
    )
    op.create_index("ix_responses_created_at", "responses", ["created_at"])


def downgrade() -> None:
    op.drop_index("ix_responses_created_at", table_name="responses")
    op.drop_table("responses")
