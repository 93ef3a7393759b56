"""The dashboard's numbers, computed from the store (synchronous: run them in a thread).

One query reads the decisions of the time range joined with their outcomes (at most
:data:`MAX_ROWS`, newest first; ``truncated`` says when more exist), and everything else is
aggregated here in Python, the same way on SQLite and PostgreSQL.

Savings (USD), per request with an outcome that is not an error or a refusal (``rejected``)::

    counterfactual = cost_usd(prices of X, tokens_in, tokens_out, tokens_cached,
                              tokens_cache_write, tokens_cache_write_1h)
    saving         = counterfactual - actual cost_usd

where X is the *strongest allowed* candidate of the request's decision (highest predicted
quality among the candidates the rules allowed; ties: higher expected cost), or the chosen
*reference* backend. The outcome's real token counts are repriced at X's prices from the
live policy (prompt-cache writes at X's write prices, plain input prices when X has none;
outcomes that recorded no writes, ``NULL``, count none); when the policy no longer has X, the
candidate's ``expected_cost_usd`` from the decision stands in. Pinned requests (one
candidate) save nothing by construction.

Quality-bar compliance: a feedback row is *good* when ``score >= 0.5`` (or, with no score,
its label is in :data:`GOOD_LABELS`), else *bad* (a quality-bar miss). A route complies
when its good rate is at least the mean quality bar its decisions had (``signals.bar``).
"""

from __future__ import annotations

import logging
import math
from collections import Counter, defaultdict
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

import sqlalchemy as sa
from sqlalchemy import Engine, select

from backends.config import Pricing
from backends.pricing import cost_usd
from gateway.store.models import Decision, Outcome

log = logging.getLogger("mixroute.dashboard")

MAX_ROWS = 200_000
"""Most requests one summary reads (newest first)."""
BUCKETS_S = (60, 300, 900, 3600, 3 * 3600, 6 * 3600, 86400, 7 * 86400)
"""Bucket widths of the spend chart (seconds): the smallest giving at most :data:`MAX_BUCKETS`."""
MAX_BUCKETS = 120
TOP_SERIES = 8
"""Series per spend chart; the rest are summed into ``other``."""
GOOD_LABELS = frozenset({"good", "correct", "pass", "passed", "positive", "thumbs_up", "helpful", "accepted"})
GOOD_SCORE = 0.5

_FEEDBACK = sa.table("feedback", sa.column("request_id"), sa.column("score"), sa.column("label"))


@dataclass(frozen=True)
class Window:
    """A time range ``[since, until)`` (UTC) and the tenant it is limited to (``None``: all)."""

    since: datetime
    until: datetime
    tenant: str | None = None


def _row_query(w: Window):
    q = (select(Decision.created_at, Decision.tenant, Decision.route, Decision.pinned, Decision.candidates,
                Decision.signals, Outcome.backend, Outcome.status, Outcome.ttft_s, Outcome.itl_s, Outcome.tokens_in,
                Outcome.tokens_out, Outcome.tokens_cached, Outcome.tokens_cache_write, Outcome.tokens_cache_write_1h,
                Outcome.cost_usd)
         .join(Outcome, Outcome.request_id == Decision.request_id)
         .where(Decision.created_at >= w.since, Decision.created_at < w.until))
    if w.tenant is not None:
        q = q.where(Decision.tenant == w.tenant)
    return q.order_by(Decision.created_at.desc()).limit(MAX_ROWS + 1)


def summary(engine: Engine, w: Window, pricing: dict[str, Pricing], reference: str | None = None) -> dict[str, Any]:
    """Everything the dashboard draws for ``w``.

    Args:
        engine: the store's engine.
        w: time range and tenant.
        pricing: backend name -> prices of the live policy (USD per 1M tokens).
        reference: backend to compare against (default: the one with the highest output price).

    Returns:
        A JSON-ready dict: ``totals``, ``spend`` (series per backend/route/tenant),
        ``savings``, ``mix``, ``quality`` (``None`` without a feedback table), ``prefix_cache``,
        ``latency``, ``top_tenants``, ``top_routes``, ``empty`` and ``truncated``.
    """
    with engine.connect() as conn:
        rows = conn.execute(_row_query(w)).mappings().all()
        quality = _quality(conn, w)
    truncated = len(rows) > MAX_ROWS
    rows = rows[:MAX_ROWS]
    if reference is None and pricing:
        reference = max(pricing, key=lambda b: (pricing[b].output_per_1m, pricing[b].input_per_1m))
    width = next((b for b in BUCKETS_S if (w.until - w.since).total_seconds() / b <= MAX_BUCKETS), BUCKETS_S[-1])
    return {
        "window": {"since": _iso(w.since), "until": _iso(w.until), "tenant": w.tenant, "bucket_s": width},
        "empty": not rows,
        "truncated": truncated,
        "totals": _totals(rows),
        "spend": _spend(rows, w, width),
        "savings": _savings(rows, pricing, reference),
        "mix": _mix(rows),
        "quality": quality,
        "prefix_cache": _prefix(rows),
        "latency": _latency(rows),
        "top_tenants": _top(rows, "tenant"),
        "top_routes": _top(rows, "route"),
        "backends": sorted(pricing),
    }


def _iso(t: datetime) -> str:
    return t.astimezone(timezone.utc).isoformat().replace("+00:00", "Z")


def _totals(rows) -> dict[str, Any]:
    return {
        "requests": len(rows),
        "errors": sum(1 for r in rows if r["status"] == "error"),
        "rejected": sum(1 for r in rows if r["status"] == "rejected"),
        "spend_usd": sum(r["cost_usd"] for r in rows),
        "tokens_in": sum(r["tokens_in"] for r in rows),
        "tokens_out": sum(r["tokens_out"] for r in rows),
        "tokens_cached": sum(r["tokens_cached"] for r in rows),
    }


def _spend(rows, w: Window, width: int) -> dict[str, Any]:
    start = w.since.timestamp()
    n = max(1, math.ceil((w.until.timestamp() - start) / width))
    series: dict[str, dict[str, list[float]]] = {"backend": {}, "route": {}, "tenant": {}}
    for r in rows:
        i = min(n - 1, max(0, int((r["created_at"].timestamp() - start) // width)))
        for dim in series:
            key = (r["backend"] if dim == "backend" else r[dim]) or "-"
            series[dim].setdefault(key, [0.0] * n)[i] += r["cost_usd"]
    return {"buckets": [_iso(datetime.fromtimestamp(start + i * width, timezone.utc)) for i in range(n)],
            **{dim: _top_series(s, n) for dim, s in series.items()}}


def _top_series(series: dict[str, list[float]], n: int) -> dict[str, list[float]]:
    ranked = sorted(series, key=lambda k: -sum(series[k]))
    out = {k: series[k] for k in ranked[:TOP_SERIES]}
    if len(ranked) > TOP_SERIES:
        out["other"] = [sum(series[k][i] for k in ranked[TOP_SERIES:]) for i in range(n)]
    return out


def strongest(candidates: list[dict]) -> dict | None:
    """The strongest allowed candidate: highest predicted quality, ties by higher expected cost."""
    scored = [c for c in candidates if c.get("predicted_quality") is not None]
    if not scored:
        return None
    return max(scored, key=lambda c: (c["predicted_quality"], c.get("expected_cost_usd") or 0.0))


def _counterfactual(r, backend: str | None, pricing: dict[str, Pricing], fallback: float | None) -> float | None:
    if backend in pricing:
        return cost_usd(pricing[backend], r["tokens_in"], r["tokens_out"], r["tokens_cached"],
                        tokens_cache_write=r["tokens_cache_write"] or 0,
                        tokens_cache_write_1h=r["tokens_cache_write_1h"] or 0)
    return fallback


def _savings(rows, pricing: dict[str, Pricing], reference: str | None) -> dict[str, Any]:
    actual = vs_strongest = vs_reference = 0.0
    counted = 0
    for r in rows:
        if r["status"] in ("error", "rejected"):  # nothing served: a refusal is not a routing saving
            continue
        best = strongest(r["candidates"] or [])
        if best is None:
            continue
        cf = _counterfactual(r, best["backend"], pricing, best.get("expected_cost_usd"))
        if cf is None:
            continue
        counted += 1
        actual += r["cost_usd"]
        vs_strongest += cf
        vs_reference += _counterfactual(r, reference, pricing, 0.0) or 0.0
    return {
        "requests": counted, "actual_usd": actual,
        "strongest_usd": vs_strongest, "saved_vs_strongest_usd": vs_strongest - actual,
        "saved_vs_strongest_pct": 100.0 * (vs_strongest - actual) / vs_strongest if vs_strongest else None,
        "reference": reference, "reference_usd": vs_reference if reference else None,
        "saved_vs_reference_usd": vs_reference - actual if reference else None,
        "saved_vs_reference_pct": (100.0 * (vs_reference - actual) / vs_reference) if reference and vs_reference
        else None,
    }


def _mix(rows) -> dict[str, Any]:
    by_route: dict[str, Counter] = defaultdict(Counter)
    for r in rows:
        by_route[r["route"]][r["backend"] or "-"] += 1
    overall = Counter(r["backend"] or "-" for r in rows)
    return {"overall": dict(overall.most_common()), "by_route": {k: dict(v.most_common()) for k, v in by_route.items()}}


def _prefix(rows) -> dict[str, Any]:
    acc: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for r in rows:
        a = acc[r["backend"] or "-"]
        a[0] += r["tokens_cached"]
        a[1] += r["tokens_in"]
    total_c, total_i = sum(a[0] for a in acc.values()), sum(a[1] for a in acc.values())
    return {"overall": total_c / total_i if total_i else None,
            "by_backend": {b: (c / i if i else None) for b, (c, i) in sorted(acc.items())}}


def percentile(values: list[float], q: float) -> float | None:
    """Nearest-rank percentile (``q`` in [0, 100]) of ``values``; ``None`` when empty."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]


def _latency(rows) -> dict[str, dict[str, float | int | None]]:
    ttft: dict[str, list[float]] = defaultdict(list)
    itl: dict[str, list[float]] = defaultdict(list)
    for r in rows:
        if r["status"] == "error" or not r["backend"]:
            continue
        if r["ttft_s"] is not None:
            ttft[r["backend"]].append(r["ttft_s"])
        if r["itl_s"] is not None:
            itl[r["backend"]].append(r["itl_s"])
    return {b: {"ttft_p50": percentile(ttft[b], 50), "ttft_p99": percentile(ttft[b], 99),
                "itl_p50": percentile(itl[b], 50), "itl_p99": percentile(itl[b], 99), "n": len(ttft[b])}
            for b in sorted(set(ttft) | set(itl))}


def _top(rows, dim: str, n: int = 10) -> list[dict[str, Any]]:
    spend: dict[str, list[float]] = defaultdict(lambda: [0.0, 0])
    for r in rows:
        acc = spend[r[dim] or "-"]
        acc[0] += r["cost_usd"]
        acc[1] += 1
    ranked = sorted(spend.items(), key=lambda kv: -kv[1][0])[:n]
    return [{"name": k, "spend_usd": v[0], "requests": v[1]} for k, v in ranked]


def has_feedback(conn) -> bool:
    return sa.inspect(conn).has_table("feedback")


def _verdict():
    good = sa.or_(_FEEDBACK.c.score >= GOOD_SCORE,
                  sa.and_(_FEEDBACK.c.score.is_(None), sa.func.lower(_FEEDBACK.c.label).in_(sorted(GOOD_LABELS))))
    return sa.case((good, "good"), else_="bad")


def _quality(conn, w: Window) -> dict[str, Any] | None:
    if not has_feedback(conn):
        return None
    verdict = _verdict().label("verdict")
    q = (select(Decision.route, Decision.signals, verdict)
         .join(_FEEDBACK, _FEEDBACK.c.request_id == Decision.request_id)
         .where(Decision.created_at >= w.since, Decision.created_at < w.until).limit(MAX_ROWS))
    if w.tenant is not None:
        q = q.where(Decision.tenant == w.tenant)
    per: dict[str, dict[str, Any]] = defaultdict(lambda: {"good": 0, "bad": 0, "bars": []})
    for route, signals, v in conn.execute(q):
        p = per[route]
        p[v] += 1
        bar = (signals or {}).get("bar")
        if isinstance(bar, (int, float)):
            p["bars"].append(float(bar))
    routes = {}
    for route, p in sorted(per.items()):
        n = p["good"] + p["bad"]
        bar = sum(p["bars"]) / len(p["bars"]) if p["bars"] else None
        rate = p["good"] / n
        routes[route] = {"feedback": n, "good": p["good"], "misses": p["bad"], "good_rate": rate, "bar": bar,
                         "complies": None if bar is None else rate + 1e-9 >= bar}
    n = sum(r["feedback"] for r in routes.values())
    return {"feedback": n, "good_rate": sum(r["good"] for r in routes.values()) / n if n else None, "routes": routes}


def feedback_verdicts(engine: Engine) -> list[tuple[str, str, int]] | None:
    """``(route, verdict, count)`` over all feedback, for ``mixroute_feedback_total``;
    ``None`` when the store has no feedback table (or cannot be read)."""
    try:
        with engine.connect() as conn:
            if not has_feedback(conn):
                return None
            verdict = _verdict().label("verdict")
            q = (select(Decision.route, verdict, sa.func.count())
                 .join(_FEEDBACK, _FEEDBACK.c.request_id == Decision.request_id)
                 .group_by(Decision.route, verdict))
            return [(route, v, int(n)) for route, v, n in conn.execute(q)]
    except sa.exc.SQLAlchemyError as exc:
        log.warning("feedback counts unavailable (%s)", type(exc).__name__)
        return None


def default_window(now: datetime | None = None, hours: float = 24.0) -> tuple[datetime, datetime]:
    now = now or datetime.now(timezone.utc)
    return now - timedelta(hours=hours), now + timedelta(seconds=1)
