"""Outcome data: which public LLMs answered which prompts how well, at what cost.

Formats (detected from content, see :mod:`router.data.detect`): RouteLLM CSV, RouterBench
wide CSV, RouterDC JSON and RouteLLM's MT-Bench folder, all loaded into
:class:`OutcomeRow` / :class:`Dataset` by :func:`load`.
"""

from router.data.detect import detect
from router.data.loader import load
from router.data.types import DataFormatError, Dataset, OutcomeRow, normalise_prompt

__all__ = ["DataFormatError", "Dataset", "OutcomeRow", "detect", "load", "normalise_prompt"]
