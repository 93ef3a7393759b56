"""Outcome data: which public LLMs answered which prompts how well, at what cost.

Formats (detected from content, see :mod:`backends.data.detect`): RouteLLM CSV, RouterBench
wide CSV, RouterDC JSON and RouteLLM's MT-Bench folder, all loaded into
:class:`OutcomeRow` / :class:`Dataset` by :func:`load`.
"""

from backends.data.detect import detect
from backends.data.loader import load
from backends.data.types import DataFormatError, Dataset, OutcomeRow, normalise_prompt

__all__ = ["DataFormatError", "Dataset", "OutcomeRow", "detect", "load", "normalise_prompt"]
