"""``policy what-if``: re-decide logged requests under a new policy and estimate the change.

Input: rows of the store's export (``mixroute logs export``, one per request: the
decision's ``route``, ``chosen``, ``probability``, ``candidates`` with each backend's
``predicted_quality`` and ``expected_cost_usd``, ``signals``; the outcome's ``tokens_in``,
``tokens_out``, ``cost_usd``; ``feedback_score_mean``). Prompts are not stored, so:

- **Re-deciding** goes through the decision engine itself (:meth:`router.engine.Router.decide`)
  under the new policy, with a predictor that replays the logged per-backend predictions
  and signals (:class:`LoggedPredictor`; a backend matched by name, else by model; a new
  backend keeps its policy ``quality`` prior) and a placeholder prompt of the logged
  ``tokens_in`` (ceil(chars / 4) tokens, the engine's estimate), so token-priced costs come
  from the new policy's prices. Pinned requests and requests the new policy refuses are
  counted, not re-decided.
- **Model-based estimate** (direct method): mean predicted quality and expected cost
  (USD) of the chosen backend per request, logged choice vs new choice, both from the
  logged predictions; the difference with a percentile bootstrap 95% interval over requests.
  Both choices are scored in the re-decision (same placeholder prompt, the new policy's
  prices), so a request whose choice does not change contributes exactly 0; a logged
  backend the new policy no longer has keeps its logged figures.
- **Inverse propensity weighting** (Horvitz & Thompson, 1952; self-normalised, Swaminathan &
  Joachims, 2015): the feedback score of requests whose new choice equals the logged one,
  weighted by ``1 / probability``. Only where the logged policy randomised
  (some ``probability < 1``): a deterministic log says nothing about choices it never
  made, and the estimate is then reported as unavailable with that reason.
- **Realised quality and cost** (:mod:`router.eval.offpolicy`): doubly robust (Dudík et al.,
  2011) and plain IPS estimates of the new policy's mean feedback score and billed cost per
  request, with normal-approximation 95% intervals, where the logged policy randomised
  (``learning.explore``, a ``route_target`` draw).
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from router.eval import offpolicy
from router.policy.loader import LoadedPolicy

BOOTSTRAP = 200


@dataclass
class Logged:
    """One logged request, as the what-if needs it."""

    request_id: str
    route: str
    chosen: str
    probability: float
    candidates: list[dict[str, Any]]
    signals: dict[str, Any]
    tokens_in: int
    tokens_out: int
    cost_usd: float | None
    feedback: float | None
    tenant: str | None = None
    endpoint: str = "chat"
    pinned: bool = False
    refused: bool = False

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> "Logged":
        """From an export row (JSON columns nested, or as JSON text as in CSV exports).

        Raises:
            ValueError: ``request ID: ...`` for a required column (``request_id``, ``chosen``,
                ``candidates``) that is missing, or a column of the wrong shape (``candidates``
                not a list of objects with a ``backend`` name and numeric predictions,
                ``signals`` not an object, a token count not a whole number in
                0..:data:`MAX_LOGGED_TOKENS`, a probability not a number in (0, 1]: the
                chance the logged policy gave its choice, which IPW divides by). An empty
                ``probability`` means 1 (a deterministic choice). A present but empty
                ``chosen`` is a logged refusal (``refused``), not an error.
        """
        rid = row.get("request_id", "?")
        if "chosen" in row and row["chosen"] in (None, "") and row.get("request_id") not in (None, ""):
            # A request the gateway refused (no_candidate, prompt_blocked, route_saturated):
            # logged with an empty choice. Counted, not re-decided: there is no choice to compare.
            return cls(request_id=str(row["request_id"]), route=str(row.get("route") or ""), chosen="",
                       probability=1.0, candidates=[], signals={}, tokens_in=0, tokens_out=0, cost_usd=None,
                       feedback=None, refused=True)
        for key in ("request_id", "chosen", "candidates"):
            if row.get(key) in (None, ""):
                raise ValueError(f"request {rid}: no {key!r} column")
        try:
            return cls(request_id=str(row["request_id"]), route=str(row.get("route") or ""), chosen=str(row["chosen"]),
                       probability=_probability(row), candidates=_candidates(row),
                       signals=_json_column(row, "signals", dict, {}), tokens_in=_tokens(row, "tokens_in"),
                       tokens_out=_tokens(row, "tokens_out"), cost_usd=_number(row, "cost_usd"),
                       feedback=_number(row, "feedback_score_mean"), tenant=row.get("tenant") or None,
                       endpoint=str(row.get("endpoint") or "chat"),
                       pinned=str(row.get("pinned")).lower() in ("true", "1"))
        except ValueError as exc:
            raise ValueError(f"request {rid}: {exc}") from None

    def candidate(self, backend: str, model: str | None = None) -> dict[str, Any] | None:
        for c in self.candidates:
            if c.get("backend") == backend:
                return c
        for c in self.candidates:
            if model is not None and c.get("model") == model:
                return c
        return None


#: Largest token count a logged row may carry: beyond every context window (the re-decision
#: builds a placeholder prompt of 4 characters per token, so a damaged count of 1e300 asked
#: for an impossible string).
MAX_LOGGED_TOKENS = 10_000_000

_CANDIDATE_NUMBERS = ("predicted_quality", "expected_cost_usd", "expected_output_tokens")


def _json_column(row: dict[str, Any], key: str, kind: type, default: Any) -> Any:
    """Column ``key``: nested JSON, or JSON text (CSV exports); empty -> ``default``.

    Raises:
        ValueError: not JSON, or not of ``kind`` (list or dict).
    """
    value = row.get(key)
    if isinstance(value, str):
        try:
            value = json.loads(value) if value.strip() else None
        except ValueError:
            raise ValueError(f"column {key!r} is not JSON: {value[:60]!r}") from None
    if value is None:
        return default
    if not isinstance(value, kind):
        raise ValueError(f"column {key!r} must be a JSON {'list' if kind is list else 'object'}, "
                         f"not {type(value).__name__}")
    return value


def _candidates(row: dict[str, Any]) -> list[dict[str, Any]]:
    """The ``candidates`` column: objects with a ``backend`` name and numeric (or null) predictions.

    Raises:
        ValueError: any other shape, naming the candidate.
    """
    candidates = _json_column(row, "candidates", list, [])
    for i, c in enumerate(candidates):
        if not isinstance(c, dict) or not isinstance(c.get("backend"), str):
            raise ValueError(f"column 'candidates': entry {i} is not an object with a 'backend' name")
        for key in _CANDIDATE_NUMBERS:
            v = c.get(key)
            if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or not np.isfinite(v)):
                raise ValueError(f"column 'candidates': entry {i} ({c['backend']}) {key} is not a number: {v!r}")
    return candidates


def _number(row: dict[str, Any], key: str) -> float | None:
    """A numeric column (empty -> ``None``).

    Raises:
        ValueError: not a finite number.
    """
    value = row.get(key)
    if value in (None, ""):
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"column {key!r} is not a number: {str(value)[:60]!r}") from None
    if not np.isfinite(number):
        raise ValueError(f"column {key!r} is not a finite number: {value!r}")
    return number


def _probability(row: dict[str, Any]) -> float:
    """The ``probability`` column (empty -> 1.0, a deterministic choice).

    Raises:
        ValueError: not a number in (0, 1]; 0 or less would be a choice the logged policy
            could not have made, and IPW weights by its inverse.
    """
    number = _number(row, "probability")
    if number is None:
        return 1.0
    if not 0.0 < number <= 1.0:
        raise ValueError(f"column 'probability' must be in (0, 1] (the chance the logged policy gave its "
                         f"choice), not {row.get('probability')!r}")
    return number


def _tokens(row: dict[str, Any], key: str) -> int:
    """A token count column (tokens; empty -> 0).

    Raises:
        ValueError: not a whole number in 0..MAX_LOGGED_TOKENS.
    """
    number = _number(row, key) or 0.0
    if not 0 <= number <= MAX_LOGGED_TOKENS or number != int(number):
        raise ValueError(f"column {key!r} must be a whole number of tokens in 0..{MAX_LOGGED_TOKENS:,}, "
                         f"not {row.get(key)!r}")
    return int(number)


class LoggedPredictor:
    """A :class:`router.predict.Predictor` replaying one logged request's predictions."""

    def __init__(self):
        self.row: Logged | None = None
        self.unknown: Counter[str] = Counter()

    async def predict(self, text: str, backends: Sequence[Any]):
        from router.predict import DEFAULT_OUTPUT_TOKENS, UNKNOWN_QUALITY, Prediction

        quality, sd, tokens = {}, {}, None
        for b in backends:
            c = self.row.candidate(b.name, b.model)
            if c is not None and c.get("predicted_quality") is not None:
                quality[b.name] = float(c["predicted_quality"])
                if isinstance(c.get("quality_sd"), (int, float)):
                    sd[b.name] = float(c["quality_sd"])
                tokens = tokens or c.get("expected_output_tokens")
            else:
                quality[b.name] = b.quality if b.quality is not None else UNKNOWN_QUALITY
                self.unknown[b.name] += 1
        return Prediction(quality=quality, quality_sd=sd,
                          output_tokens=int(tokens or self.row.tokens_out or DEFAULT_OUTPUT_TOKENS),
                          signals=dict(self.row.signals), source="logged")


@dataclass
class WhatIf:
    """The estimate. Qualities are predicted probabilities of a good answer; costs USD per request.

    With no request re-decided (``n == 0``) every figure that needs one is ``None`` (``null``
    in JSON), not 0.

    Attributes:
        n: requests re-decided; skipped: reason -> requests not re-decided.
        old, new: ``{"quality", "cost"}`` model-based means (logged choice, new choice).
        delta_ci: ``{"quality": [lo, hi], "cost": [lo, hi]}`` 95% bootstrap of new - old.
        logged_cost: mean recorded ``cost_usd`` of the logged requests (``None`` if absent).
        ipw: self-normalised IPW estimate of the new policy's mean feedback score, or ``None``.
        ipw_note: why IPW is unavailable, or its basis.
        changed: share of requests whose backend changes; moves: ``(old, new) -> count``.
        unknown_backends: new backends with no logged prediction (prior used) -> requests.
        realised: the new policy's realised feedback score and cost (USD per request),
            doubly robust and IPS with 95% intervals (:func:`router.eval.offpolicy.realised`);
            empty when the logged policy never randomised (nothing to weigh).
    """

    n: int
    skipped: dict[str, int]
    old: dict[str, float | None]
    new: dict[str, float | None]
    delta_ci: dict[str, list[float] | None]
    logged_cost: float | None
    ipw: float | None
    ipw_ci: list[float] | None
    ipw_note: str
    changed: float | None
    moves: dict[tuple[str, str], int] = field(default_factory=dict)
    unknown_backends: dict[str, int] = field(default_factory=dict)
    realised: dict[str, dict | None] = field(default_factory=dict)

    def summary(self) -> str:
        """The change in plain language."""
        if self.n == 0 and not self.skipped:
            return "There were no logged requests to re-decide."
        if self.n == 0:
            return "\n".join(["No logged request could be re-decided under the new policy.", *self._skipped_line()])
        dq, dc = self.new["quality"] - self.old["quality"], self.new["cost"] - self.old["cost"]
        rel = f" ({dc / self.old['cost']:+.0%})" if self.old["cost"] > 0 else ""
        lines = [f"Under the new policy {self.changed:.0%} of {self.n} logged requests would go to another backend."]
        moves = sorted(self.moves.items(), key=lambda kv: -kv[1])
        for (a, b), k in moves[:5]:
            lines.append(f"  {k} request(s): {a} -> {b}")
        if len(moves) > 5:
            lines.append(f"  ... and {sum(k for _, k in moves[5:])} more request(s) in {len(moves) - 5} other "
                         "move(s) (all in --json's moves)")
        lines.append(f"Expected cost per request: ${self.old['cost']:.3g} -> ${self.new['cost']:.3g}{rel}, "
                     f"95% CI of the change [{self.delta_ci['cost'][0]:+.3g}, {self.delta_ci['cost'][1]:+.3g}] USD.")
        lines.append(f"Predicted quality: {self.old['quality']:.3f} -> {self.new['quality']:.3f} ({dq:+.3f}), "
                     f"95% CI of the change [{self.delta_ci['quality'][0]:+.3f}, {self.delta_ci['quality'][1]:+.3f}] "
                     "(model-based, from the logged predictions).")
        lines.append(f"Feedback (IPW): {self.ipw:.3f}" if self.ipw is not None else f"Feedback (IPW): {self.ipw_note}")
        lines.extend(offpolicy.lines(self.realised))
        if self.unknown_backends:
            lines.append("No logged prediction for " + ", ".join(self.unknown_backends) + ": their policy prior was used.")
        return "\n".join([*lines, *self._skipped_line()])

    def _skipped_line(self) -> list[str]:
        """``Not re-decided: 4 pinned, ...`` (empty when nothing was skipped)."""
        if not self.skipped:
            return []
        return ["Not re-decided: " + ", ".join(f"{v} {k}" for k, v in self.skipped.items()) + "."]


async def _redecide(policy: LoadedPolicy, rows: list[Logged], predictor: LoggedPredictor):
    from router.engine import Router, RoutingRequest
    from router.errors import NoCandidate, UnknownModel

    router = Router(policy, predictor)
    out: list[tuple[Logged, Any] | None] = []
    skipped: Counter[str] = Counter()
    for row in rows:
        if row.pinned:
            skipped["pinned"] += 1
            continue
        if row.refused:
            skipped["refused when logged"] += 1
            continue
        if row.endpoint == "embeddings":  # no quality to compare: the cheapest embedding backend answers
            skipped["embeddings"] += 1
            continue
        if not policy.policy.route(row.route):
            # A client that named the route gets 404 model_not_found under the new policy
            # (one that named no model would reach its default route: the log cannot tell).
            skipped["route not in the new policy (404 for clients that name it)"] += 1
            continue
        body = {"model": row.route, "messages": [{"role": "user", "content": "x" * (4 * max(row.tokens_in, 1))}]}
        predictor.row = row
        try:
            d = await router.decide(RoutingRequest(endpoint="chat", body=body, tenant=row.tenant))
        except (NoCandidate, UnknownModel):
            skipped["refused by the new policy"] += 1
            continue
        except Exception as exc:  # e.g. a block rule (prompt_blocked): counted by kind
            skipped[getattr(exc, "code", None) or type(exc).__name__] += 1
            continue
        out.append((row, d))
    return out, skipped


def what_if(policy: LoadedPolicy, rows: list[Logged], *, bootstrap: int = BOOTSTRAP, seed: int = 0) -> WhatIf:
    """Re-decide ``rows`` under ``policy`` and estimate the change (see the module docstring)."""
    predictor = LoggedPredictor()
    decided, skipped = asyncio.run(_redecide(policy, rows, predictor))
    oq, oc, nq, nc, same, fb, prob, moves = [], [], [], [], [], [], [], Counter()
    for row, d in decided:
        new = next(c for c in d.candidates if c.backend == d.record.chosen)
        again = next((c for c in d.candidates if c.backend == row.chosen), None)
        if again is not None:
            # The logged choice re-scored on the same basis as the new one (placeholder
            # prompt, the new policy's prices): an unchanged choice changes nothing.
            oq.append(again.predicted_quality or 0.0)
            oc.append(again.expected_cost_usd)
        else:
            old = row.candidate(row.chosen) or {}
            oq.append(float(old.get("predicted_quality") or 0.0))
            oc.append(float(old.get("expected_cost_usd") or 0.0))
        nq.append(new.predicted_quality)
        nc.append(new.expected_cost_usd)
        same.append(d.record.chosen == row.chosen)
        fb.append(np.nan if row.feedback is None else row.feedback)
        prob.append(row.probability)
        if d.record.chosen != row.chosen:
            moves[(row.chosen, d.record.chosen)] += 1
    n = len(decided)
    if n == 0:  # no data: no figure (None, null in JSON), rather than a 0 that reads as a measurement
        return WhatIf(0, dict(skipped), {"quality": None, "cost": None}, {"quality": None, "cost": None},
                      {"quality": None, "cost": None}, None, None, None, "no request re-decided", None)
    oq, oc, nq, nc = map(np.array, (oq, oc, nq, nc))
    same, fb, prob = np.array(same), np.array(fb), np.array(prob)
    rng = np.random.default_rng(seed)
    # bootstrap 0: the observed rows only, so every interval is the point estimate.
    idx = rng.integers(0, n, size=(bootstrap, n)) if bootstrap > 0 else np.arange(n)[None, :]
    dq = (nq[idx] - oq[idx]).mean(1)
    dc = (nc[idx] - oc[idx]).mean(1)
    ipw, ipw_ci, note = _ipw(same, fb, prob, idx)
    real = {} if np.all(prob >= 1.0 - 1e-9) else offpolicy.realised(
        same, prob, fb, np.array([np.nan if r.cost_usd is None else r.cost_usd for r, _ in decided]),
        {"quality_new": nq, "quality_logged": oq, "cost_new": nc, "cost_logged": oc})
    costs = [r.cost_usd for r, _ in decided if r.cost_usd is not None]
    return WhatIf(n=n, skipped=dict(skipped), old={"quality": float(oq.mean()), "cost": float(oc.mean())},
                  new={"quality": float(nq.mean()), "cost": float(nc.mean())},
                  delta_ci={"quality": _pct(dq), "cost": _pct(dc)},
                  logged_cost=float(np.mean(costs)) if costs else None, ipw=ipw, ipw_ci=ipw_ci, ipw_note=note,
                  changed=float(1 - same.mean()), moves=dict(moves), unknown_backends=dict(predictor.unknown),
                  realised=real)


def _pct(x: np.ndarray) -> list[float]:
    return [float(np.percentile(x, 2.5)), float(np.percentile(x, 97.5))]


def _snips(same: np.ndarray, fb: np.ndarray, prob: np.ndarray) -> float | None:
    has = ~np.isnan(fb)
    w = np.where(same & has, 1.0 / np.clip(prob, 1e-6, 1.0), 0.0)
    den = w.sum()
    return None if den <= 0 else float((w * np.nan_to_num(fb)).sum() / den)


def _ipw(same: np.ndarray, fb: np.ndarray, prob: np.ndarray, idx: np.ndarray):
    has = ~np.isnan(fb)
    if not has.any():
        return None, None, "unavailable: no feedback scores in the logs"
    if np.all(prob[has] >= 1.0 - 1e-9):
        return None, None, ("unavailable: the logged policy was deterministic (probability 1.0), so the log "
                            "says nothing about choices it did not make")
    est = _snips(same, fb, prob)
    if est is None:
        return None, None, "unavailable: no request with feedback where the new choice equals the logged one"
    draws = [v for i in idx if (v := _snips(same[i], fb[i], prob[i])) is not None]
    return est, _pct(np.array(draws)) if draws else None, f"self-normalised IPW over {int((same & has).sum())} requests"
