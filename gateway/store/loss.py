"""Whether the store can keep a new request's records: the database takes rows, or the
journal has room for them. While it cannot, the gateway refuses new requests
(``store_on_loss: refuse``) rather than answer requests whose records it would lose."""

from __future__ import annotations

import logging

from gateway.settings import Settings
from gateway.store.journal import Journal

log = logging.getLogger("mixroute.store")

RESERVE_BYTES = 1 << 20
"""Journal room kept for the records of requests already admitted when the gateway starts
refusing (bytes; at most a quarter of ``store_journal_max_bytes``): a decision and outcome
pair is about 1.5 KB, so this covers several hundred requests in flight."""

ROW_BYTES = 1024
"""Journal bytes counted for each row still queued for the database (a decision or outcome
row is about 750 bytes; counted generously): while the database is down those rows are on
their way to the journal, so its room must hold them too."""


class LossGuard:
    """Tracks whether the journal can still take rows while the database is down.

    Args:
        settings: uses ``store_journal_max_bytes`` and ``store_on_loss`` (for the log line).
        journal: the store's journal.
        where: the database URL without its password, for the log line.
    """

    def __init__(self, settings: Settings, journal: Journal, where: str) -> None:
        self.settings = settings
        self.journal = journal
        self.where = where
        self.reserve = min(RESERVE_BYTES, settings.store_journal_max_bytes // 4)
        self._failed = False  # an append failed or hit the cap since the database went down
        self._refusing = False  # for the log line when keeps() changes

    def journal_failed(self) -> None:
        """A row could not be journaled (its cap, or an error)."""
        self._failed = True

    def database_back(self) -> None:
        """The database took rows again: the journal is only needed at the next outage."""
        self._failed = False

    def keeps(self, database_down: bool, unwritten_rows: int = 0) -> bool:
        """Whether a new request's records can be kept: the database is up, or the journal has
        more than :attr:`reserve` bytes of room (under its cap and on its disk) besides what
        the ``unwritten_rows`` still queued will take (:data:`ROW_BYTES` each: a writer slowed
        down by the outage spills many at once), and no append failed since the database
        went down. Once refusing, twice :attr:`reserve` is needed to accept again, so that
        the answer does not flip as queued rows reach the journal. Logs when it changes."""
        need = self.reserve * (2 if self._refusing else 1)
        keeps = not database_down or (not self._failed
                                      and self.journal.room() - unwritten_rows * ROW_BYTES >= need)
        if keeps == self._refusing:
            self._refusing = not keeps
            if keeps:
                log.warning("store: records can be kept again")
            else:
                log.error("store: database %s down and journal %s full or unwritable: new requests %s",
                          self.where, self.journal.path,
                          "are refused (503 store_unavailable)" if self.settings.store_on_loss == "refuse"
                          else "are served and their records lost (MIXROUTE_STORE_ON_LOSS=serve)")
        return keeps
