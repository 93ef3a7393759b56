"""Off-policy estimates of another policy's realised quality and cost from logged decisions.

A log row ``i`` holds the context ``x_i`` (the logged predictions), the action ``a_i`` the
logging policy took with probability ``p_i`` (the decision's ``probability``), and the
realised reward ``r_i`` (a feedback score, or the billed cost in USD). For the evaluated
policy's action ``pi(x_i)`` (its re-decision) and a reward model ``r_hat(x, a)`` (the
logged predicted quality, or the expected cost under the evaluated policy's prices):

- inverse propensity (Horvitz & Thompson, JASA 47(260), 1952):
  ``V_IPS = mean_i [pi(x_i) = a_i] r_i / p_i``
- doubly robust (Dudík, Langford & Li, "Doubly robust policy evaluation and learning",
  ICML 2011, eq. 2):
  ``V_DR = mean_i r_hat(x_i, pi(x_i)) + [pi(x_i) = a_i] (r_i - r_hat(x_i, a_i)) / p_i``

Both are unbiased when every ``p_i`` is the true probability of ``a_i`` and positive
wherever the evaluated policy acts (exploration gives that); DR is also unbiased when the
reward model is right, and its variance is lower when the model is close. Intervals are
the normal approximation over the i.i.d. per-row terms, ``mean +- 1.96 sd / sqrt(n)``
(the per-term central limit theorem; Dudík et al. 2011, section 3, analyse the same terms).
Rows without a reward (no feedback, no outcome) are left out, which assumes they are
missing independently of the action taken.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

#: Two-sided 95% normal quantile.
Z95 = 1.959964


@dataclass
class Estimate:
    """One estimate: ``value`` with a 95% interval ``ci``, over ``n`` rows, by ``method``."""

    value: float
    ci: list[float]
    n: int
    method: str


def _interval(terms: np.ndarray, method: str) -> Estimate | None:
    n = len(terms)
    if n == 0:
        return None
    mean = float(terms.mean())
    half = Z95 * float(terms.std(ddof=1)) / np.sqrt(n) if n > 1 else 0.0
    return Estimate(value=mean, ci=[float(mean - half), float(mean + half)], n=n, method=method)


def ips(reward: np.ndarray, same: np.ndarray, prob: np.ndarray) -> Estimate | None:
    """``V_IPS`` (module docstring) over the rows whose ``reward`` is not NaN."""
    has = ~np.isnan(reward)
    terms = np.where(same[has], np.nan_to_num(reward[has]) / prob[has], 0.0)
    return _interval(terms, "ips")


def doubly_robust(reward: np.ndarray, same: np.ndarray, prob: np.ndarray, model_new: np.ndarray,
                  model_logged: np.ndarray) -> Estimate | None:
    """``V_DR`` (module docstring) over the rows whose ``reward`` is not NaN.

    Args:
        reward: ``(n,)`` realised rewards, NaN where none was recorded.
        same: ``(n,)`` whether the evaluated policy takes the logged action.
        prob: ``(n,)`` the logged action's probability, in (0, 1].
        model_new, model_logged: ``(n,)`` the reward model at the evaluated policy's action
            and at the logged action.
    """
    has = ~np.isnan(reward)
    r, s, p = np.nan_to_num(reward[has]), same[has], prob[has]
    terms = model_new[has] + np.where(s, (r - model_logged[has]) / p, 0.0)
    return _interval(terms, "doubly_robust")


def realised(same: np.ndarray, prob: np.ndarray, feedback: np.ndarray, cost: np.ndarray,
             model: dict[str, np.ndarray]) -> dict[str, dict | None]:
    """The evaluated policy's realised quality (feedback score) and cost (USD per request),
    each by DR and IPS: ``{"quality_dr", "quality_ips", "cost_dr", "cost_ips"}`` ->
    :class:`Estimate` as a dict, ``None`` where no row has that reward.

    Args:
        same, prob: as :func:`doubly_robust`.
        feedback, cost: ``(n,)`` realised rewards (NaN: none recorded).
        model: ``quality_new``, ``quality_logged``, ``cost_new``, ``cost_logged``: the reward
            models at the evaluated and the logged action.
    """
    out: dict[str, dict | None] = {}
    for name, reward in (("quality", feedback), ("cost", cost)):
        dr = doubly_robust(reward, same, prob, model[f"{name}_new"], model[f"{name}_logged"])
        ip = ips(reward, same, prob)
        out[f"{name}_dr"] = None if dr is None else vars(dr)
        out[f"{name}_ips"] = None if ip is None else vars(ip)
    return out


def lines(estimates: dict[str, dict | None]) -> list[str]:
    """The realised estimates in plain language (one line per reward)."""
    out = []
    for name, unit in (("quality", "feedback score"), ("cost", "USD per request")):
        dr, ip = estimates.get(f"{name}_dr"), estimates.get(f"{name}_ips")
        if dr is None:
            continue
        fmt = ".3f" if name == "quality" else ".3g"
        out.append(f"Realised {name} ({unit}), doubly robust: {dr['value']:{fmt}}, 95% CI "
                   f"[{dr['ci'][0]:{fmt}}, {dr['ci'][1]:{fmt}}] over {dr['n']} requests; "
                   f"IPS {ip['value']:{fmt}} [{ip['ci'][0]:{fmt}}, {ip['ci'][1]:{fmt}}].")
    return out
