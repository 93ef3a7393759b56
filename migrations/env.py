"""Alembic environment of the store, configured programmatically.

No ``alembic.ini`` is needed: :func:`gateway.store.db.alembic_config` sets
``script_location`` to this package's directory and passes either an open SQLAlchemy
``connection`` or a ``url`` through ``config.attributes`` (attributes, not main options,
so a ``%`` in a password survives ConfigParser interpolation).
"""

from __future__ import annotations

import importlib

from alembic import context
from sqlalchemy import create_engine, pool

from gateway.store.models import Base

# Every module that declares tables on ``Base`` is imported here, so that
# ``alembic revision --autogenerate`` sees all tables and never proposes dropping one.
MODEL_MODULES = ("gateway.store.models", "gateway.auth.models")
for _name in MODEL_MODULES:
    try:
        importlib.import_module(_name)
    except ModuleNotFoundError as _err:  # an optional package left out; a broken import still fails
        if _err.name != _name:
            raise

config = context.config
target_metadata = Base.metadata


def _url() -> str:
    url = config.attributes.get("url") or config.get_main_option("sqlalchemy.url")
    if not url:
        raise RuntimeError("migrations: no database URL (pass url= or connection= in config.attributes)")
    return str(url)


def run_migrations_offline() -> None:
    """Emit SQL to stdout instead of executing it (``alembic upgrade --sql``)."""
    context.configure(url=_url(), target_metadata=target_metadata, literal_binds=True,
                      render_as_batch=True)
    with context.begin_transaction():
        context.run_migrations()


def _run(connection) -> None:
    # render_as_batch: SQLite cannot ALTER most things; batch mode rebuilds the table.
    context.configure(connection=connection, target_metadata=target_metadata, render_as_batch=True)
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    """Run against ``config.attributes["connection"]``, or a fresh engine on the URL."""
    connection = config.attributes.get("connection")
    if connection is not None:
        _run(connection)
        return
    engine = create_engine(_url(), poolclass=pool.NullPool)
    try:
        with engine.begin() as conn:
            _run(conn)
    finally:
        engine.dispose()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
