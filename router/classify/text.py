"""Bounding and cleaning raw prompt text before tokenisation (no torch here).

Behaviour for bad input, relied on by the runtime and documented in docs/CLASSIFIER.md:

- any ``str`` is accepted; lone surrogates (text decoded with ``surrogateescape`` from
  non-UTF-8 bytes) become U+FFFD; NUL and other control characters are left to the
  tokenizer, which drops them;
- text longer than ``2 * window`` characters keeps its first and last ``window``
  characters (joined by `` … ``), so tokenisation time is bounded whatever the length
  and an instruction at the end of a long prompt is still seen;
- empty or whitespace-only text is classified as the empty prompt (``[CLS] [SEP]``).
"""

from __future__ import annotations

#: Characters kept from each end of a long prompt before tokenisation. At least 4
#: characters per token for English, so 2,048 characters cover any 512-token window.
CHAR_WINDOW = 2048

#: Tokens two neighbouring scan windows share, so a phrase of up to this many tokens that
#: crosses a window boundary is still read whole by one window (an instruction sentence
#: is 10-30 WordPiece tokens).
SCAN_OVERLAP = 32


def clean(text: str, *, window: int = CHAR_WINDOW) -> str:
    """A bounded, encodable version of ``text`` (see the module docstring)."""
    if not isinstance(text, str):
        text = str(text)
    if len(text) > 2 * window:
        text = text[:window] + " … " + text[-window:]
    return text.encode("utf-8", "replace").decode("utf-8", "replace")


def head_tail(ids: list[int], budget: int, head: int) -> list[int]:
    """Token ids cut to ``budget``: the first ``head`` and the last ``budget - head``.

    Prompts in the shared data put few-shot examples first and the question last, and an
    injection can sit at either end, so both ends are kept rather than only the start.
    """
    if len(ids) <= budget:
        return ids
    return ids[:head] + ids[len(ids) - (budget - head):]


def scan_windows(ids: list[int], budget: int, head: int, max_windows: int | None,
                 overlap: int = SCAN_OVERLAP) -> tuple[list[list[int]], int]:
    """Extra windows over the middle of a long prompt that :func:`head_tail` does not see.

    The middle ``ids[head : len(ids) - (budget - head)]`` is cut into windows of ``budget``
    tokens that overlap by ``overlap`` tokens (so a phrase across a boundary is still seen
    whole in one of them). The windows start at fixed offsets from the prompt's start, so
    two prompts sharing a prefix share the windows inside it (the scan cache relies on it).
    ``max_windows=None`` keeps every window (the whole prompt is read). If it needs more
    than ``max_windows`` windows, half of them cover the start of the middle and half its
    end; the centre stays unseen.

    Returns:
        ``(windows, scanned)``: the extra windows (none for a prompt within ``budget``) and
        how many of ``len(ids)`` tokens the main window and the extra windows see together.
    """
    n, tail = len(ids), budget - head
    if n <= budget or (max_windows is not None and max_windows <= 0):
        return [], min(n, budget)
    lo, hi = head, n - tail  # the unseen middle
    stride = max(1, budget - overlap)
    starts = list(range(max(0, lo - overlap), hi, stride))
    if max_windows is None:
        return [ids[a:a + budget] for a in starts], n  # overlapping tiles from lo - overlap past hi
    if len(starts) > max_windows:
        front = (max_windows + 1) // 2
        back = max_windows - front
        ends = [hi - k * stride for k in range(back - 1, -1, -1)]
        starts = starts[:front] + [max(0, e - budget + overlap) for e in ends]
    windows = [ids[a:a + budget] for a in starts]
    seen = [False] * (hi - lo)
    for a in starts:
        for j in range(max(a, lo), min(a + budget, hi)):
            seen[j - lo] = True
    return windows, head + tail + sum(seen)


def pad_batch(rows: list[list[int]]):
    """Right-pad token-id rows into ``(input_ids (B, T), attention_mask (B, T))`` long tensors
    (pad id 0, mask 1 on real tokens). Imports torch."""
    import torch

    width = max(len(r) for r in rows)
    ids = torch.zeros(len(rows), width, dtype=torch.long)
    mask = torch.zeros(len(rows), width, dtype=torch.long)
    for i, r in enumerate(rows):
        ids[i, : len(r)] = torch.tensor(r)
        mask[i, : len(r)] = 1
    return ids, mask
