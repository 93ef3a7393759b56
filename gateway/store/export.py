"""Export of the store for evaluation and retraining: one row per request.

Each row joins a decision, its outcome (columns empty when the request has none yet) and
its feedback aggregated: ``feedback_count`` (rows), ``feedback_score_mean`` (mean of the
non-null scores, in [0, 1]) and ``feedback_labels`` (distinct labels, sorted). Requests
are selected by decision time, ``since <= created_at < until``; feedback counts whenever
it arrived.

Formats: ``jsonl`` (JSON columns stay nested), ``csv`` (JSON columns as JSON text, times
in ISO 8601) and ``parquet`` (needs ``pyarrow``: ``pip install 'mixroute[export]'``; JSON
columns as JSON text, ``feedback_labels`` as ``list<string>``, times as UTC timestamps).
The file is written next to ``out`` and renamed into place, so a failed export never
leaves a partial file behind.
"""

from __future__ import annotations

import csv
import json
import os
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

from sqlalchemy import Engine, func, select

from gateway.store.models import Decision, Feedback, Outcome

Format = Literal["jsonl", "csv", "parquet"]
FORMATS: tuple[str, ...] = ("jsonl", "csv", "parquet")

_SEP = "\x1f"  # ASCII unit separator: cannot appear in a label sent as JSON text by accident

DECISION_COLUMNS = ("request_id", "created_at", "tenant", "key_id", "route", "endpoint", "policy_hash", "pinned",
                    "chosen", "reason", "probability", "prefix_hash", "candidates", "fallbacks", "signals",
                    "adapter_version")
OUTCOME_COLUMNS = ("backend", "model", "status", "http_status", "error_code", "fallbacks_taken", "ttft_s",
                   "itl_s", "latency_s", "tokens_in", "tokens_out", "tokens_cached", "tokens_cache_write",
                   "tokens_cache_write_1h", "cost_usd", "streamed", "usage_estimated")
COLUMNS: dict[str, str] = {
    **{c: "str" for c in DECISION_COLUMNS},
    "created_at": "time", "pinned": "bool", "probability": "float",
    "candidates": "json", "fallbacks": "json", "signals": "json",
    **{c: "str" for c in OUTCOME_COLUMNS},
    "http_status": "int", "fallbacks_taken": "json", "ttft_s": "float", "itl_s": "float", "latency_s": "float",
    "tokens_in": "int", "tokens_out": "int", "tokens_cached": "int", "tokens_cache_write": "int",
    "tokens_cache_write_1h": "int", "cost_usd": "float", "streamed": "bool", "usage_estimated": "bool",
    "outcome_at": "time",
    "feedback_count": "int", "feedback_score_mean": "float", "feedback_labels": "labels",
}
"""Exported column -> kind (``str``, ``int``, ``float``, ``bool``, ``time``, ``json``, ``labels``), in order."""


def _statement(since: datetime, until: datetime) -> Any:
    window = (Decision.created_at >= since, Decision.created_at < until)
    fb = (select(Feedback.request_id, func.count().label("feedback_count"),
                 func.avg(Feedback.score).label("feedback_score_mean"),
                 func.aggregate_strings(Feedback.label, _SEP).label("feedback_labels"))
          .where(Feedback.request_id.in_(select(Decision.request_id).where(*window)))
          .group_by(Feedback.request_id).subquery())
    cols = [getattr(Decision, c) for c in DECISION_COLUMNS] + [getattr(Outcome, c) for c in OUTCOME_COLUMNS]
    return (select(*cols, Outcome.created_at.label("outcome_at"), fb.c.feedback_count,
                   fb.c.feedback_score_mean, fb.c.feedback_labels)
            .outerjoin(Outcome, Outcome.request_id == Decision.request_id)
            .outerjoin(fb, fb.c.request_id == Decision.request_id)
            .where(*window).order_by(Decision.created_at, Decision.request_id))


def iter_rows(engine: Engine, since: datetime, until: datetime, *, chunk: int = 5000) -> Iterator[list[dict]]:
    """The joined rows of requests decided in ``[since, until)``, ``chunk`` at a time,
    oldest first, streamed from the database (memory stays bounded).

    Raises:
        sqlalchemy.exc.SQLAlchemyError: the query failed (e.g. the database is down).
    """
    with engine.connect() as conn:
        result = conn.execution_options(stream_results=True, yield_per=chunk).execute(_statement(since, until))
        for part in result.mappings().partitions():
            out = []
            for m in part:
                row = dict(m)
                row["feedback_count"] = row["feedback_count"] or 0
                labels = row["feedback_labels"]
                row["feedback_labels"] = sorted(set(labels.split(_SEP))) if labels else []
                out.append(row)
            yield out


def _text(value: Any, kind: str) -> Any:
    if value is None:
        return ""
    if kind in ("json", "labels"):
        return json.dumps(value, separators=(",", ":"), default=str)
    if kind == "time":
        return value.isoformat()
    return value


def _write_jsonl(chunks: Iterator[list[dict]], fh_path: Path) -> int:
    n = 0
    with open(fh_path, "w", encoding="utf-8") as fh:
        for rows in chunks:
            for row in rows:
                fh.write(json.dumps({k: (v.isoformat() if isinstance(v, datetime) else v) for k, v in row.items()},
                                    separators=(",", ":"), default=str) + "\n")
            n += len(rows)
    return n


def _write_csv(chunks: Iterator[list[dict]], fh_path: Path) -> int:
    n = 0
    with open(fh_path, "w", encoding="utf-8", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(COLUMNS)
        for rows in chunks:
            writer.writerows([[_text(row[c], k) for c, k in COLUMNS.items()] for row in rows])
            n += len(rows)
    return n


def _arrow_schema(pa: Any) -> Any:
    types = {"str": pa.string(), "int": pa.int64(), "float": pa.float64(), "bool": pa.bool_(),
             "time": pa.timestamp("us", tz="UTC"), "json": pa.string(), "labels": pa.list_(pa.string())}
    return pa.schema([(c, types[k]) for c, k in COLUMNS.items()])


def _write_parquet(chunks: Iterator[list[dict]], fh_path: Path) -> int:
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError as exc:
        raise RuntimeError("parquet export needs pyarrow: pip install 'mixroute[export]'") from exc
    schema = _arrow_schema(pa)
    n = 0
    with pq.ParquetWriter(fh_path, schema, compression="zstd") as writer:
        for rows in chunks:
            cols = {c: [(None if row[c] is None else json.dumps(row[c], separators=(",", ":"), default=str))
                        if k == "json" else row[c] for row in rows] for c, k in COLUMNS.items()}
            writer.write_table(pa.table(cols, schema=schema))
            n += len(rows)
    return n


_WRITERS = {"jsonl": _write_jsonl, "csv": _write_csv, "parquet": _write_parquet}


def export(engine: Engine, since: datetime, until: datetime, fmt: Format, out: Path, *, chunk: int = 5000) -> int:
    """Write the requests decided in ``[since, until)`` to ``out``; returns rows written.

    Raises:
        ValueError: unknown ``fmt``.
        RuntimeError: ``parquet`` without pyarrow installed.
        sqlalchemy.exc.SQLAlchemyError: the database query failed.
        OSError: ``out`` cannot be written.
    """
    if fmt not in _WRITERS:
        raise ValueError(f"unknown export format {fmt!r} (known: {', '.join(FORMATS)})")
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    try:
        n = _WRITERS[fmt](iter_rows(engine, since, until, chunk=chunk), tmp)
        os.replace(tmp, out)
    finally:
        tmp.unlink(missing_ok=True)
    return n
