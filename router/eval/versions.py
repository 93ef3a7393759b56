"""``mixroute eval --adapters-version``: an adapter version against the live one, off-policy.

Each held-out logged request is re-decided twice by the decision engine under one policy
(:meth:`router.engine.Router.decide`, a dry run: no exploration): once as **logged** (the
router's logged estimates, blended with the memory it had: its greedy choice) and once
per **version** (the estimates before own traffic counted, ``signals.learning.before``,
blended with the version's outcome correction aged to the request's time and shifted by
its offset for the request's ``domain`` signal, :mod:`router.learning.baked`). The
realised feedback score and cost of each set of choices are estimated from the log by doubly robust and IPS estimates
(:func:`router.eval.offpolicy.realised`; the reward model is each arm's own predicted
quality), with 95% intervals; these are unbiased where the log randomised
(``learning.explore``): a deterministic log only scores choices it made.

The counts a blended estimate started from are recovered from the log: a logged
candidate's ``quality_sd`` is ``sqrt(q' (1 - q') / (n0 + n + 1))`` with ``n`` its
``signals.learning.observations``, so ``n0 = q' (1 - q') / sd^2 - 1 - n``; the version's
blend starts from the same ``n0``. Prompts are not stored, so a version's own classifier
heads cannot be evaluated on logs; its outcome correction can.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from math import sqrt
from typing import Any

import numpy as np

from router.eval import offpolicy
from router.eval.whatif import Logged
from router.learning.baked import Baked
from router.policy.loader import LoadedPolicy

#: The arm that replays the logged decisions' own estimates.
LOGGED = "logged"


class _Replay:
    """A :class:`router.predict.Predictor` replaying one logged request: its blended
    estimates (``before=False``) or the ones before own traffic counted (``before=True``)."""

    def __init__(self, before: bool) -> None:
        self.before = before
        self.row: Logged | None = None

    async def predict(self, text: str, backends: Sequence[Any]):
        from router.predict import DEFAULT_OUTPUT_TOKENS, UNKNOWN_QUALITY, Prediction

        row = self.row
        learning = row.signals.get("learning") or {}
        before, seen = learning.get("before") or {}, learning.get("observations") or {}
        quality, sd, tokens = {}, {}, None
        for b in backends:
            c = row.candidate(b.name, b.model) or {}
            q, s = c.get("predicted_quality"), c.get("quality_sd")
            if q is None:
                quality[b.name] = b.quality if b.quality is not None else UNKNOWN_QUALITY
                continue
            tokens = tokens or c.get("expected_output_tokens")
            if self.before and b.name in before:
                n0 = _start_count(float(q), s, seen.get(b.name, 0.0))
                q = float(before[b.name])
                s = sqrt(q * (1 - q) / (n0 + 1)) if n0 is not None and 0 < q < 1 else None
            quality[b.name] = float(q)
            if isinstance(s, (int, float)) and s > 0:
                sd[b.name] = float(s)
        return Prediction(quality=quality, quality_sd=sd,
                          output_tokens=int(tokens or row.tokens_out or DEFAULT_OUTPUT_TOKENS),
                          signals=dict(row.signals), source="logged")


def _start_count(q: float, sd: Any, n: Any) -> float | None:
    """``n0`` of a blended estimate (module docstring); ``None`` when it cannot be recovered."""
    if not isinstance(sd, (int, float)) or not sd > 0 or not 0 < q < 1:
        return None
    return max(q * (1 - q) / (sd * sd) - 1 - float(n or 0.0), 0.0)


@dataclass
class Arm:
    """One set of choices: its name, and the version's correction (``None``: none)."""

    name: str
    baked: Baked | None = None
    choices: list[str] = field(default_factory=list)


@dataclass
class Comparison:
    """Per arm: re-decided requests, the share whose choice differs from the logged one,
    the model-based mean predicted quality and expected cost, and the realised estimates."""

    n: int
    skipped: int
    arms: dict[str, dict[str, Any]]
    randomised: bool
    notes: list[str]

    def summary(self) -> str:
        lines = [f"{self.n} held-out logged request(s) re-decided ({self.skipped} skipped: pinned, refused, "
                 "embeddings, or their route is not in the policy)."]
        for name, a in self.arms.items():
            lines.append(f"{name}: {a['changed']:.0%} of choices differ from the logged ones; predicted quality "
                         f"{a['predicted_quality']:.3f}, expected cost ${a['expected_cost_usd']:.3g}")
            lines.extend("  " + line for line in offpolicy.lines(a["realised"]))
        if not self.randomised:
            lines.append("The log never randomised (no exploration): realised figures score only the choices it "
                         "made, so they are left out; run with learning.explore to compare versions on feedback.")
        return "\n".join(lines + self.notes)


async def _decide_all(policy: LoadedPolicy, rows: Sequence[Logged], times: Sequence[datetime], arm: Arm):
    from router.engine import Router
    from router.decision import RoutingRequest
    from router.live import LiveState

    predictor, live = _Replay(before=arm.name != LOGGED), LiveState()
    live.outcomes.offsets = arm.baked.offsets if arm.baked is not None else {}
    router = Router(policy, predictor, live)
    half_life = (policy.policy.learning.half_life_hours if policy.policy.learning else 168.0)
    out = []
    for row, at in zip(rows, times):
        predictor.row = row
        live.outcomes.replace(arm.baked.aged(at, half_life) if arm.baked is not None else {})
        body = {"model": row.route, "messages": [{"role": "user", "content": "x" * (4 * max(row.tokens_in, 1))}]}
        try:
            d = await router.decide(RoutingRequest(endpoint="chat", body=body, tenant=row.tenant, dry_run=True))
        except Exception:  # refused under this policy (a rule, no candidate): not comparable
            out.append(None)
            continue
        out.append(d)
    return out


def compare(policy: LoadedPolicy, rows: Sequence[Logged], times: Sequence[datetime], arms: Sequence[Arm]) -> Comparison:
    """Re-decide ``rows`` (decided at ``times``) for every arm and estimate each (module docstring)."""
    usable = [(r, t) for r, t in zip(rows, times)
              if not (r.pinned or r.refused or r.endpoint == "embeddings" or not policy.policy.route(r.route))]
    decided = {a.name: asyncio.run(_decide_all(policy, [r for r, _ in usable], [t for _, t in usable], a))
               for a in arms}
    keep = [i for i in range(len(usable)) if all(decided[a.name][i] is not None for a in arms)]
    rows_kept = [usable[i][0] for i in keep]
    prob = np.array([r.probability for r in rows_kept])
    fb = np.array([np.nan if r.feedback is None else r.feedback for r in rows_kept])
    cost = np.array([np.nan if r.cost_usd is None else r.cost_usd for r in rows_kept])
    randomised = bool(len(prob)) and not np.all(prob >= 1.0 - 1e-9)
    out: dict[str, dict[str, Any]] = {}
    for a in arms:
        ds = [decided[a.name][i] for i in keep]
        new = [next(c for c in d.candidates if c.backend == d.record.chosen) for d in ds]
        logged = [next((c for c in d.candidates if c.backend == r.chosen), None) for d, r in zip(ds, rows_kept)]
        same = np.array([d.record.chosen == r.chosen for d, r in zip(ds, rows_kept)], dtype=bool)
        model = {"quality_new": np.array([c.predicted_quality for c in new]),
                 "quality_logged": np.array([c.predicted_quality if c else 0.0 for c in logged]),
                 "cost_new": np.array([c.expected_cost_usd for c in new]),
                 "cost_logged": np.array([c.expected_cost_usd if c else 0.0 for c in logged])}
        out[a.name] = {
            "changed": float(1 - same.mean()) if len(same) else 0.0,
            "predicted_quality": float(model["quality_new"].mean()) if len(new) else float("nan"),
            "expected_cost_usd": float(model["cost_new"].mean()) if len(new) else float("nan"),
            "realised": offpolicy.realised(same, prob, fb, cost, model) if randomised else {},
            "choices": {b: int(k) for b, k in zip(*np.unique([d.record.chosen for d in ds], return_counts=True))},
        }
    notes = []
    if policy.policy.learning is None:
        notes.append("note: the policy has no learning block, so gateways apply no outcome correction and the "
                     "versions decide alike; add `learning: {}` to use them.")
    return Comparison(n=len(keep), skipped=len(rows) - len(keep), arms=out, randomised=randomised, notes=notes)
