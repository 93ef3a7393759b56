"""Reading every part of a long prompt for the scan heads (``pii``, ``injection``).

Every head reads a prompt's main window (its head and tail tokens,
:func:`router.classify.text.head_tail`). A prompt of up to ``scan_chars`` characters is
also tiled whole into overlapping windows of the same size the heads were trained on
(:func:`router.classify.text.scan_windows` with no limit), so an attack padded into the
middle is read in a window of the size it would be read alone in; a scan head reports, per
output, its most alarming window. How much is read depends only on the prompt, never on the
machine or its load, so every replica reads a prompt the same way.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from router.classify.text import CHAR_WINDOW, clean, head_tail, scan_windows

#: Characters of a prompt read whole by default (a longer one keeps its first and last
#: half of this, and ``scan_coverage`` says what share that was).
DEFAULT_SCAN_CHARS = 100_000


@dataclass
class Tiled:
    """A batch of prompts cut into encoder rows (token ids with ``[CLS]``/``[SEP]``).

    Attributes:
        mains: the main (head + tail) window of each prompt, what every head reads.
        windows: per prompt, the extra windows tiling the rest of it (empty for a prompt
            within one window, or with scanning off).
        coverage: per prompt, the share of its characters some window read.
    """

    mains: list[list[int]]
    windows: list[list[list[int]]]
    coverage: list[float]


def tile(tokenizer: Any, texts: list[str], *, budget: int, head: int, scan_chars: int) -> Tiled:
    """Tokenise ``texts`` into main windows of ``budget`` tokens (``head`` from the start)
    and, when ``scan_chars > 0``, every extra window of the first and last ``scan_chars / 2``
    characters (all of a prompt within ``scan_chars``).

    ``coverage`` is exact for tokens and approximate for characters cut before tokenising.
    """
    window = max(CHAR_WINDOW, scan_chars // 2) if scan_chars > 0 else CHAR_WINDOW
    enc = tokenizer([clean(t, window=window) for t in texts], add_special_tokens=False)["input_ids"]
    cls_id, sep_id = tokenizer.cls_token_id, tokenizer.sep_token_id
    out = Tiled([], [], [])
    for text, ids in zip(texts, enc):
        extra, seen = scan_windows(ids, budget, head, None if scan_chars > 0 else 0)
        out.mains.append([cls_id, *head_tail(ids, budget, head), sep_id])
        out.windows.append([[cls_id, *w, sep_id] for w in extra])
        n = len(text) if isinstance(text, str) else len(str(text))
        kept = min(1.0, 2 * window / n) if n else 1.0
        out.coverage.append(round(kept * (seen / len(ids) if ids else 1.0), 4))
    return out
