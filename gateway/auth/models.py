"""The ``api_keys`` table (migration ``0002``)."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import JSON, Float, Index, Integer, String
from sqlalchemy.orm import Mapped, mapped_column

from gateway.store.models import Base, UTCDateTime


class ApiKey(Base):
    """A hashed API key of a tenant, with its limits."""

    __tablename__ = "api_keys"

    key_id: Mapped[str] = mapped_column(String, primary_key=True)
    key_hash: Mapped[str] = mapped_column(String(64), unique=True)
    prefix: Mapped[str] = mapped_column(String(16))
    tenant: Mapped[str] = mapped_column(String)
    budget_usd: Mapped[float | None] = mapped_column(Float, nullable=True)
    period: Mapped[str] = mapped_column(String(8), default="month")
    rpm: Mapped[int | None] = mapped_column(Integer, nullable=True)
    tpm: Mapped[int | None] = mapped_column(Integer, nullable=True)
    routes: Mapped[list] = mapped_column(JSON, default=list)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())
    revoked_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)

    __table_args__ = (Index("ix_api_keys_tenant", "tenant"),)


class Tenant(Base):
    """A tenant's own limits, shared by all its keys (``mixroute tenants set``, the admin API):
    USD budget per period (migration ``0004``), requests and tokens per minute and allowed
    routes (``0009_tenant_limits``; ``NULL``: no limit, every route)."""

    __tablename__ = "tenants"

    name: Mapped[str] = mapped_column(String, primary_key=True)
    budget_usd: Mapped[float | None] = mapped_column(Float, nullable=True)
    period: Mapped[str] = mapped_column(String(8), default="month")
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime())
    rpm: Mapped[int | None] = mapped_column(Integer, nullable=True)
    tpm: Mapped[int | None] = mapped_column(Integer, nullable=True)
    routes: Mapped[list | None] = mapped_column(JSON, nullable=True)
