"""An on-disk cache of arrays keyed by text, shared by the eval embeddings and the trunk
features of ``mixroute``'s heads fitted on ``--train`` rows.

Layout: ``$MIXROUTE_CACHE_DIR/<kind>/<tag>/shard-<hash>.npz`` (default
``~/.cache/mixroute``), each shard holding ``keys`` (SHA-256 of ``tag + NUL + text``),
``lengths`` (first-axis length of each array) and ``data`` (the arrays concatenated along
their first axis), so variable-length arrays (per-token hidden states) and fixed-size ones
(embedding vectors) share one format. A shard is written to a temporary name and renamed,
so an interrupted run leaves no torn shard; an unreadable shard is skipped and its texts
are recomputed. The cache is an optimisation: an unwritable directory only costs time.
"""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path

import numpy as np


def cache_dir() -> Path:
    """``$MIXROUTE_CACHE_DIR`` or ``~/.cache/mixroute``."""
    return Path(os.environ.get("MIXROUTE_CACHE_DIR") or Path.home() / ".cache" / "mixroute")


class ShardStore:
    """Text -> array cache under ``root/kind/tag`` (see the module docstring).

    Args:
        kind: sub-folder per cached quantity (``embeddings``, ``trunk``).
        tag: the model and settings that produced the arrays; part of every key.
        root: cache root (default :func:`cache_dir`).
    """

    def __init__(self, kind: str, tag: str, root: Path | None = None):
        self.tag = tag
        self.dir = (root or cache_dir()) / kind / re.sub(r"[^A-Za-z0-9._-]", "_", tag)
        self._mem: dict[str, np.ndarray] = {}
        self._index: dict[Path, set[str]] = {}  # keys of each shard read so far
        self._loaded: set[Path] = set()

    def key(self, text: str) -> str:
        return hashlib.sha256((self.tag + "\0" + text).encode("utf-8", "replace")).hexdigest()

    def get(self, keys: list[str]) -> dict[str, np.ndarray]:
        """The cached arrays of ``keys`` that exist (in memory, else read from the shards)."""
        want = {k for k in keys if k not in self._mem}
        if want and self.dir.is_dir():
            for shard in sorted(self.dir.glob("shard-*.npz")):
                if shard in self._loaded or want.isdisjoint(self._index.get(shard, want)):
                    continue
                try:
                    with np.load(shard) as z:
                        names = z["keys"].tolist()
                        self._index[shard] = set(names)
                        if want.isdisjoint(names):
                            continue  # only the keys were read
                        parts = np.split(z["data"], np.cumsum(z["lengths"])[:-1])
                        self._mem.update(zip(names, parts))
                        self._loaded.add(shard)
                except (OSError, ValueError, KeyError):
                    self._loaded.add(shard)  # a torn or foreign shard: its texts are recomputed
        return {k: self._mem[k] for k in keys if k in self._mem}

    def put(self, new: dict[str, np.ndarray]) -> None:
        """Keep ``new`` in memory and write it as one shard (errors writing are ignored)."""
        if not new:
            return
        self._mem.update(new)
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
            name = hashlib.sha256("".join(sorted(new)).encode()).hexdigest()[:16]
            tmp = self.dir / f".tmp-{name}-{os.getpid()}.npz"
            arrays = list(new.values())
            np.savez(tmp, keys=np.array(list(new)), lengths=np.array([len(a) for a in arrays]),
                     data=np.concatenate(arrays))
            shard = self.dir / f"shard-{name}.npz"
            tmp.replace(shard)
            self._loaded.add(shard)
        except OSError:
            pass  # the cache is an optimisation; a read-only home still evaluates
