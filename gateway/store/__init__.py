"""The decision/outcome store: models, migrations helpers and the batched writer.

``Store`` is the runtime entry point (see :mod:`gateway.store.writer`); ``upgrade`` and
``current`` drive the Alembic migrations (see :mod:`gateway.store.db`).
"""

from gateway.store.db import current, head, normalize_url, upgrade
from gateway.store.writer import Store, StoreStats

__all__ = ["Store", "StoreStats", "current", "head", "normalize_url", "upgrade"]
