"""Feedback: scores and labels for requests, many per request.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-30

Hand-written, like 0001: a frozen snapshot that does not import the application models.
The same operations run on SQLite and PostgreSQL (no ALTER of existing tables).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | Sequence[str] | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "feedback",
        sa.Column("id", sa.String(), primary_key=True),
        sa.Column("request_id", sa.String(), nullable=False),
        sa.Column("created_at", _TS, nullable=False),
        sa.Column("score", sa.Double(), nullable=True),
        sa.Column("label", sa.String(), nullable=True),
        sa.Column("comment", sa.Text(), nullable=True),
        sa.Column("source", sa.String(), nullable=False),
        sa.Column("tenant", sa.String(), nullable=True),
    )
    op.create_index("ix_feedback_request_id", "feedback", ["request_id"])
    op.create_index("ix_feedback_created_at", "feedback", ["created_at"])


def downgrade() -> None:
    op.drop_index("ix_feedback_created_at", table_name="feedback")
    op.drop_index("ix_feedback_request_id", table_name="feedback")
    op.drop_table("feedback")
