"""Recorded outcome rows indexed by prompt text, shared by every replay backend of a
process and by ``mixroute replay`` (which scores answers with the same lookup).

Rows are keyed by :func:`backends.data.normalise_prompt` text; when a prompt occurs more
than once in the data the first row wins, for the backend and the scorer alike.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Sequence
from pathlib import Path

from backends.data import DataFormatError, Dataset, OutcomeRow, load, normalise_prompt
from backends.openai_shapes import prompt_text

_CACHE: dict[tuple, "ReplayIndex"] = {}
_LOCK = threading.Lock()


class ReplayIndex:
    """Outcome rows of one or more datasets, looked up by prompt.

    Args:
        datasets: the loaded datasets, in order (earlier rows win on duplicate prompts).

    Attributes:
        models: every model of the datasets, first-seen order.
        datasets: the datasets given.
    """

    def __init__(self, datasets: Sequence[Dataset]):
        self.datasets = list(datasets)
        self.models: list[str] = []
        self._rows: dict[str, OutcomeRow] = {}
        for ds in self.datasets:
            self.models += [m for m in ds.models if m not in self.models]
            for row in ds.rows:
                self._rows.setdefault(normalise_prompt(row.prompt), row)

    def __len__(self) -> int:
        return len(self._rows)

    def lookup(self, prompt: str) -> OutcomeRow | None:
        """The recorded row for ``prompt`` (whitespace-insensitive), or ``None``."""
        return self._rows.get(normalise_prompt(prompt))

    def find(self, endpoint: str, body: dict) -> OutcomeRow | None:
        """The row for a request body: its last user message, else all its prompt text.

        Args:
            endpoint: ``"chat"`` or ``"completions"``.
            body: the OpenAI request body.
        """
        if endpoint == "chat":
            row = self.lookup(last_user_text(body))
            if row is not None:
                return row
        return self.lookup(prompt_text(endpoint, body))

    def score(self, prompt: str, model: str) -> float | None:
        """Recorded score in [0, 1] of ``model`` on ``prompt``; ``None`` if not recorded."""
        row = self.lookup(prompt)
        return None if row is None else row.scores.get(model)

    def cost(self, prompt: str, model: str) -> float | None:
        """Recorded USD cost of ``model`` answering ``prompt``; ``None`` if not recorded."""
        row = self.lookup(prompt)
        return None if row is None else row.costs.get(model)


def last_user_text(body: dict) -> str:
    """Text of the last ``user`` message of a chat body ("" when there is none)."""
    for m in reversed(body.get("messages") or []):
        if isinstance(m, dict) and m.get("role") == "user":
            content = m.get("content")
            if isinstance(content, str):
                return content
            if isinstance(content, list):
                return "\n".join(p.get("text", "") for p in content if isinstance(p, dict))
    return ""


def load_index(paths: Iterable[str | Path]) -> ReplayIndex:
    """The :class:`ReplayIndex` of ``paths``, loaded once per process.

    The cache key is each path's resolved name, size and modification time, so several
    backends naming the same files share one index and an edited file is reloaded.
    Thread-safe (backends load it with :func:`asyncio.to_thread`).

    Raises:
        backends.data.DataFormatError: a path is missing or of no known format.
    """
    resolved = [Path(p).resolve() for p in paths]
    key = tuple((str(p), *_stamp(p)) for p in resolved)
    with _LOCK:
        index = _CACHE.get(key)
        if index is None:
            index = _CACHE[key] = ReplayIndex([load(p) for p in resolved])
        return index


class ModelNotInData(DataFormatError):
    """A replay backend's ``model`` is not a model of its data.

    Attributes:
        model: the backend's model; models: the data's.
    """

    def __init__(self, path: str | Path, backend: str, model: str, models: Iterable[str]):
        self.model, self.models = model, list(models)
        super().__init__(path, f"backend {backend!r}: model {model!r} is not in the data "
                               f"(models: {', '.join(self.models)})")


def load_model_index(paths: list[str | Path], backend: str, model: str) -> ReplayIndex:
    """:func:`load_index` of ``paths``, checked to hold ``model`` (what a replay backend
    named ``backend`` answers for).

    Raises:
        ModelNotInData: ``model`` is not in the data.
        backends.data.DataFormatError: as :func:`load_index`.
    """
    index = load_index(paths)
    if model not in index.models:
        raise ModelNotInData(paths[0], backend, model, index.models)
    return index


def _stamp(path: Path) -> tuple[int, int]:
    try:
        st = path.stat()
    except OSError:
        return (0, 0)
    return (st.st_size, st.st_mtime_ns)
