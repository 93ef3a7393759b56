"""Rows and counters of the store writer (:mod:`gateway.store.writer`): a record as a row,
the writer's row counters, error text without bound parameters, the journal's default path."""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from gateway.store.db import sqlite_path

JOURNAL_NAME = "mixroute-journal.jsonl"
log = logging.getLogger("mixroute.store")


@dataclass
class StoreStats:
    """Row counters since the store was created (rows).

    Attributes:
        written: rows committed to the database from the queue.
        overflowed: rows journaled because the queue was full (or the store stopped).
        spilled: rows journaled because their batch could not be written.
        replayed: journaled rows later committed.
        rejected: rows the database refused, kept in ``<journal>.rejected``.
        lost: rows that could be written neither to the database nor to the journal
            (includes ``capped``).
        capped: rows not journaled because the journal was at ``store_journal_max_bytes``.
        damaged: unreadable journal lines met at replay, kept in ``<journal>.rejected``.
    """

    written: int = 0
    overflowed: int = 0
    spilled: int = 0
    replayed: int = 0
    rejected: int = 0
    lost: int = 0
    capped: int = 0
    damaged: int = 0


def _utc(value: datetime) -> datetime:
    return value.replace(tzinfo=timezone.utc) if value.tzinfo is None else value.astimezone(timezone.utc)


def as_row(rec: Any) -> dict[str, Any]:
    """A record dataclass as a row, ``created_at`` in UTC.

    Not ``dataclasses.asdict``: its recursive deep copy made a decision+outcome pair of
    ``record_*`` calls cost 85 us instead of 6 us (p50, ``python -m bench.store_writer``)
    and held the writer to under 2,000 pairs/s. Containers are copied one level deep;
    records are not mutated after they are recorded.
    """
    row = {k: (v.copy() if isinstance(v, (list, dict)) else v) for k, v in vars(rec).items()}
    row["created_at"] = _utc(row["created_at"])
    return row


def error_text(err: BaseException) -> str:
    # The driver's message, not str(err): SQLAlchemy's text includes the bound parameters.
    if type(err) is KeyError and err.args:  # a row (e.g. a hand-edited journal line) without a column
        return f"row lacks column {err.args[0]!r}"
    orig = getattr(err, "orig", None)
    lines = str(orig if orig is not None else err).splitlines()
    return f"{type(err).__name__}: {lines[0][:200] if lines else ''}"


def default_journal_path(url: str, port: int | None = None) -> Path:
    """The spill journal of the store at ``url``, one per database so that rows journaled
    for one database are never replayed into another: ``<file>.journal.jsonl`` next to a
    SQLite file, else ``mixroute-journal-<12 hex>.jsonl`` in the working directory, the hex
    a SHA-256 of the URL without its password (so another host, database or
    ``search_path`` schema gets another file). With ``port`` (the gateway's), the name ends
    in ``-<port>.jsonl`` (``<file>.journal-<port>.jsonl``), so that two gateways started in
    one folder against one database each get their own journal (a journal is locked by the
    one process that uses it: :meth:`gateway.store.journal.Journal.lock`)."""
    tail = f"-{port}.jsonl" if port is not None else ".jsonl"
    db_file = sqlite_path(url)
    if db_file is not None:
        return db_file.with_name(db_file.name + ".journal" + tail)
    from sqlalchemy import URL

    from gateway.store.db import normalize_url

    u = normalize_url(url)
    key = URL.create(u.drivername, u.username, None, u.host, u.port, u.database, u.query).render_as_string()
    return Path.cwd() / f"mixroute-journal-{hashlib.sha256(key.encode()).hexdigest()[:12]}{tail}"


def legacy_journal(url: str) -> Path | None:
    """A non-empty journal (or half-replayed ``.replaying`` file) where earlier versions of
    mixroute kept the journal of ``url``, one file name for every database
    (``mixroute-journal.jsonl`` next to a SQLite file or in the working directory); ``None``
    when there is none."""
    from gateway.store.journal import replaying_path

    db_file = sqlite_path(url)
    old = (db_file.parent if db_file is not None else Path.cwd()) / JOURNAL_NAME
    return next((p for p in (old, replaying_path(old)) if p.is_file() and p.stat().st_size > 0), None)


def warn_old_journals(url: str, journal: Path) -> None:
    """Log a warning for each journal an earlier release kept the rows of ``url`` in, which
    the store using the default ``journal`` does not replay: the one shared by every
    database (:func:`legacy_journal`; it may hold another database's rows), and the
    database's own without the port (before journals were per gateway)."""
    from gateway.store.db import safe_url
    from gateway.store.journal import replaying_path

    legacy = legacy_journal(url)
    if legacy is not None:
        log.warning("store: %s is a journal from an older mixroute, shared by every database; it is not "
                    "replayed. If its rows belong to %s, move it to %s (rows already stored are "
                    "not doubled)", legacy, safe_url(url), journal)
    unported = default_journal_path(url)
    if unported != journal and any(p.is_file() and p.stat().st_size > 0 for p in (unported, replaying_path(unported))):
        log.warning("store: %s holds rows journaled before journals were per gateway port; it is not "
                    "replayed by this gateway. Stop the gateway and move it to %s, or serve once with "
                    "MIXROUTE_STORE_JOURNAL_PATH=%s to replay it", unported, journal, unported)
