"""The policy's ``rewrite`` settings: volatile patterns and retrieved documents
(:mod:`router.rewrite`); re-exported by :mod:`router.policy.models`."""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import AfterValidator, Field, model_validator

from backends.fields import Strict


_TAG_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.:-]{0,63}")
_RESERVED = ("[document-", "[mixroute:")


def _tag_name(value: str) -> str:
    if not _TAG_NAME.fullmatch(value):
        raise ValueError(f"{value!r} is not a tag name (a letter or '_', then letters, digits, '_', '.', ':', '-'; "
                         "at most 64 characters; no '<' or '>')")
    return value


def _marker(value: str) -> str:
    if not value.strip():
        raise ValueError("a marker must contain a non-space character")
    if any(r in value for r in _RESERVED):
        raise ValueError(f"{value!r} contains text the rewriter itself writes ({', '.join(_RESERVED)})")
    return value


class DocumentMarker(Strict):
    """A literal delimiter pair around a document (``start`` ... ``end``, both included)."""

    start: Annotated[str, Field(max_length=200), AfterValidator(_marker)]
    end: Annotated[str, Field(max_length=200), AfterValidator(_marker)]


class DocumentsConfig(Strict):
    """Where the rewriter finds retrieved documents and how it orders them
    (:mod:`router.rewrite.documents`).

    Attributes:
        enabled: move documents before the conversation (the route's ``rewrite`` switch
            still turns the whole rewrite off).
        order: ``sorted`` (by content hash: the same documents in any order share a
            prefix) or ``as_sent`` (order of appearance; retrieval rank kept).
        tags: tag names whose ``<tag ...>...</tag>`` blocks are documents; an earlier tag
            wins an overlap, so list the inner tag first.
        markers: literal ``start``/``end`` pairs, tried after the tags.
    """

    enabled: bool = True
    order: Literal["sorted", "as_sent"] = "sorted"
    tags: list[Annotated[str, AfterValidator(_tag_name)]] = Field(default_factory=lambda: ["document", "documents"],
                                                                  max_length=32)
    markers: list[DocumentMarker] = Field(default_factory=list, max_length=32)

    @model_validator(mode="after")
    def _unique(self) -> "DocumentsConfig":
        for what, items in (("tags", self.tags), ("markers", [(m.start, m.end) for m in self.markers])):
            dupes = sorted({str(x) for x in items if items.count(x) > 1})
            if dupes:
                raise ValueError(f"{what}: duplicates {', '.join(dupes)}")
        return self


class RewriteConfig(Strict):
    """Policy-wide settings of the prompt rewriter (:mod:`router.rewrite`).

    Attributes:
        volatile_patterns: extra regexes (Python ``re`` syntax) whose matches in system
            prompts are volatile and moved after the stable prefix; a named group
            ``value`` limits the move to that group.
        documents: retrieved documents (RAG context) moved before the conversation.
    """

    volatile_patterns: list[str] = Field(default_factory=list)
    documents: DocumentsConfig = DocumentsConfig()

    @model_validator(mode="after")
    def _compiles(self) -> "RewriteConfig":
        import regex  # what the rewriter runs them with (router.rewrite.volatile)

        for i, pattern in enumerate(self.volatile_patterns):
            try:
                if regex.compile(pattern).match(""):
                    raise ValueError(f"volatile_patterns[{i}] {pattern!r} matches the empty string")
            except regex.error as exc:
                raise ValueError(f"volatile_patterns[{i}] {pattern!r} is not a valid regex: {exc}") from None
        return self
