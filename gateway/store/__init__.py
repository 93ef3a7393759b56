"""The decision/outcome store: models, migrations helpers and the batched writer.

``Store`` is the runtime entry point (see :mod:`gateway.store.writer`); ``upgrade`` and
``current`` drive the Alembic migrations (see :mod:`gateway.store.db`); export and
retention are in :mod:`gateway.store.export` and :mod:`gateway.store.retention`.
See docs/STORE.md.
"""

from gateway.store.db import current, head, normalize_url, upgrade
from gateway.store.feedback import FeedbackRecord
from gateway.store.writer import Store, StoreStats

__all__ = ["FeedbackRecord", "Store", "StoreStats", "current", "head", "normalize_url", "upgrade"]
