"""SQLite files that are not mixroute stores, for the tests that check the offline
commands refuse them and leave them as they were."""

from __future__ import annotations

import sqlite3
from pathlib import Path


def foreign_sqlite(db: Path, content: str) -> Path:
    """Create ``db``: ``content`` ``"tables"`` is another program's database (one table,
    ``notes``), ``"empty"`` an empty file (an empty database to SQLite). Returns ``db``."""
    if content == "tables":
        conn = sqlite3.connect(db)
        conn.execute("CREATE TABLE notes (x)")
        conn.commit()
        conn.close()
    else:
        db.touch()
    return db
