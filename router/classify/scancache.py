"""Per-window outputs of the scan heads, remembered across requests.

A session sends its system prompt and earlier turns again on every turn, so the scan
windows inside that prefix are the same token ids each time (the windows start at fixed
offsets from the prompt's start, :func:`router.classify.text.scan_windows`). Their scan-head
outputs depend only on those ids, so they are kept here and only the new windows of a turn
run through the encoder. An ``OrderedDict`` LRU under a lock is enough: entries are a few
floats, lookups are per window, and ``functools.lru_cache`` cannot be filled from a batch.
Entries are kept as float32 bytes rather than tensors: a small tensor object costs several
times the memory of its few floats.
"""

from __future__ import annotations

import hashlib
import threading
from array import array
from collections import OrderedDict

import numpy as np
import torch

#: Windows remembered by default: a 100,000-character prompt is about 250 windows, so this
#: holds the long prefixes of a few hundred sessions (about 250 bytes a window when full).
DEFAULT_SCAN_CACHE_WINDOWS = 65_536


def window_key(ids: list[int]) -> bytes:
    """A 16-byte digest of a window's token ids (blake2b; collisions are negligible)."""
    return hashlib.blake2b(array("i", ids).tobytes(), digest_size=16).digest()


class ScanCache:
    """Bounded LRU of ``window key -> raw outputs of each scan head`` (thread-safe).

    Args:
        capacity: most windows kept (0: remember nothing).
    """

    def __init__(self, capacity: int = DEFAULT_SCAN_CACHE_WINDOWS):
        self.capacity = max(0, int(capacity))
        self._rows: OrderedDict[bytes, bytes] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def __getstate__(self) -> dict:  # a copy (copy.deepcopy of an encoder) starts empty, with its own lock
        return {"capacity": self.capacity}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["capacity"])

    def __len__(self) -> int:
        return len(self._rows)

    def get(self, key: bytes) -> torch.Tensor | None:
        """The stored outputs (one row per scan head, concatenated; float32) or ``None``."""
        with self._lock:
            row = self._rows.get(key)
            if row is None:
                self.misses += 1
                return None
            self._rows.move_to_end(key)
            self.hits += 1
        return torch.from_numpy(np.frombuffer(row, dtype=np.float32).copy())

    def put(self, key: bytes, row: torch.Tensor) -> None:
        if self.capacity == 0:
            return
        data = row.detach().to("cpu", torch.float32).numpy().tobytes()
        with self._lock:
            self._rows[key] = data
            self._rows.move_to_end(key)
            while len(self._rows) > self.capacity:
                self._rows.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._rows.clear()
            self.hits = self.misses = 0
