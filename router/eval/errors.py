"""Errors of offline evaluation.

    EvalError                 anything that stops an evaluation
    ├── EvalDataError         a test/train/exclude path is unusable (names the path and the problem)
    └── RouterUnavailable     a router cannot run here (e.g. no trained heads); others still run

:class:`backends.data.DataFormatError` (unknown format, malformed file) is re-raised as
:class:`EvalDataError` with the same path and reason.
"""

from __future__ import annotations

from pathlib import Path


class EvalError(Exception):
    """Base class of evaluation errors."""


class EvalDataError(EvalError):
    """An input path cannot be evaluated.

    Args:
        path: the file or folder at fault.
        reason: what is wrong, e.g. ``"single-model dataset"``.
    """

    def __init__(self, path: str | Path, reason: str):
        self.path = str(path)
        self.reason = reason
        super().__init__(f"{self.path}: {reason}")


class RouterUnavailable(EvalError):
    """A router cannot run in this environment; the reason says what is missing."""
