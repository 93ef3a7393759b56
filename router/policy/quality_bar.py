"""A route's quality bar (``RouteConfig.quality_bar`` in :mod:`router.policy.models`, which
re-exports :class:`QualityBar`) and the calibration evidence written beside it."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field, model_validator

from backends.fields import Integer, Number, Strict
from router.aggregate import ALLOCATIONS


class CalibrationEvidence(Strict):
    """How ``mixroute calibrate`` chose a route's bar (:mod:`router.calibration`). Informational:
    the engine reads only ``min_quality`` / ``target`` / ``willingness_to_pay``.

    Attributes:
        ratio_target: the realised quality ratio (routed / always-strongest) aimed at.
        confidence: one-sided confidence of ``ratio_lower_bound``.
        ratio, ratio_lower_bound: realised ratio on the calibration rows, and its bound.
        cost_ratio: routed cost / always-strongest cost on those rows.
        miss_rate: share of rows whose routed answer scored below the strongest model's.
        n: calibration rows. method, date, data: how, when (UTC, ISO) and on what.
    """

    ratio_target: Number = Field(gt=0, le=1)
    confidence: Number = Field(gt=0, lt=1)
    ratio: Number = Field(ge=0)
    ratio_lower_bound: Number = Field(ge=0)
    cost_ratio: Number = Field(ge=0)
    miss_rate: Number = Field(ge=0, le=1)
    n: Integer = Field(ge=1)
    method: str = ""
    date: str = ""
    data: list[str] = Field(default_factory=list)


#: ``uncertainty_z`` of a ``route_target`` bar that does not set one: 2.5 posterior standard
#: deviations. A lower z is cheaper but misses the bar more often when traffic arrives task by
#: task; the quality bar is the promise, so the default leans to holding it. Replays that
#: chose it (``python -m bench.replay_sensitivity``): docs/BENCHMARKS.md, "Quality bars on
#: RouterBench: calibration and the replay target".
DEFAULT_UNCERTAINTY_Z = 2.5
#: ``allocation`` of a ``route_target`` bar that does not set one (:mod:`router.aggregate`):
#: the LP optimum for the predicted qualities, which at the same bar spends less than
#: ``share`` for an equal or higher realised quality in the replays of docs/BENCHMARKS.md.
DEFAULT_ALLOCATION = "lagrangian"


class QualityBar(Strict):
    """The quality a route requires. Exactly one of:

    Attributes:
        min_quality: absolute bar, a calibrated probability of a good answer in [0, 1].
        target: relative bar, a share of the strongest allowed candidate's predicted
            quality (``0.95`` = at least 95% of the best).
        willingness_to_pay: USD the route pays per unit of predicted quality (probability
            of a good answer): the engine picks the candidate maximising
            ``willingness_to_pay x predicted quality - expected cost (USD)``, i.e. a more
            expensive candidate only when its predicted gain is worth its extra cost. This
            is the cost-quality trade-off of RouterBench's predictive routers (Hu et al.
            2024, "willingness to pay" lambda); unlike ``target``, it spends the expensive
            model where it gains most, so a route reaches an aggregate quality ratio for
            less. ``0.01`` = one cent for a sure good answer over a sure bad one.
        route_target: route-level relative bar, in (0, 1]: over the route's last ``window``
            requests, the summed predicted quality (lower bound, below) of the choices is
            held at this share of the summed predicted quality of each request's strongest
            candidate. The engine sets one price per unit of quality (or one share of each
            request's best, per ``allocation``), the lowest that keeps the route there
            (:mod:`router.aggregate`), so it holds the quantity offline evaluation reports
            (realised quality as a share of always-strongest) for less than ``target``
            spends making every single request clear it.
        allocation: how a ``route_target`` bar spends (only with ``route_target``; default
            :data:`DEFAULT_ALLOCATION`): ``lagrangian`` gives every request the candidate
            maximising ``w x quality - expected cost`` with one willingness to pay ``w``
            (USD per unit of quality) for the whole window, the smallest that keeps the
            route at its target, so the strong model goes where its predicted gain per
            dollar is largest (the LP dual of the multiple-choice knapsack); ``share``
            gives every request the cheapest candidate predicting at least ``s x`` its best,
            with one share ``s`` for the window. A change starts the route's window afresh.
        window: requests a ``route_target`` bar looks back over (1-10,000, default 512;
            only with ``route_target``).
        uncertainty_z: only with ``route_target`` (0-5, default :data:`DEFAULT_UNCERTAINTY_Z`):
            the bar is held on each candidate's lower bound ``quality - z x sd`` instead
            of its predicted quality, ``sd`` being the prediction's posterior standard
            deviation (:attr:`router.predict.Prediction.quality_sd`; 0 without an outcome
            memory). Choosing the cheap candidates whose estimates clear a bar selects
            the estimates that erred upwards, so the realised share falls short of the
            predicted one (the optimizer's curse, Smith & Winkler, Management Science
            52(3), 2006); replays with ``0`` fell short of the predicted share
            (docs/BENCHMARKS.md). ``0``: hold the predicted share. A change starts the route's window afresh.
        calibrated: evidence written by ``mixroute calibrate`` for the value set above.
    """

    min_quality: Number | None = Field(default=None, ge=0, le=1)
    target: Number | None = Field(default=None, gt=0, le=1)
    willingness_to_pay: Number | None = Field(default=None, gt=0)
    route_target: Number | None = Field(default=None, gt=0, le=1)
    window: Integer | None = Field(default=None, ge=1, le=10_000)
    uncertainty_z: Number | None = Field(default=None, ge=0, le=5)
    allocation: Literal[ALLOCATIONS] | None = None
    calibrated: CalibrationEvidence | None = None

    #: The bar kinds, one of which is set.
    KINDS: ClassVar[tuple[str, ...]] = ("min_quality", "target", "willingness_to_pay", "route_target")

    @property
    def kind(self) -> str:
        """The name of the one bar field that is set (one of :attr:`KINDS`)."""
        return next(k for k in self.KINDS if getattr(self, k) is not None)

    @model_validator(mode="after")
    def _exactly_one(self) -> "QualityBar":
        problems = []  # all of them at once: fixing one should not reveal the next
        if sum(getattr(self, k) is not None for k in self.KINDS) != 1:
            problems.append("set exactly one of 'min_quality', 'target', 'willingness_to_pay' or 'route_target'")
        if self.route_target is None:
            extras = [k for k in ("window", "uncertainty_z", "allocation") if getattr(self, k) is not None]
            if extras:
                named = " and ".join([", ".join(repr(k) for k in extras[:-1]), repr(extras[-1])] if len(extras) > 1
                                     else [repr(extras[0])])
                problems.append(f"{named} appl{'y' if len(extras) > 1 else 'ies'} "
                                "to a 'route_target' bar only")
        if problems:
            raise ValueError("; ".join(problems))
        return self

    @property
    def z(self) -> float:
        """The ``uncertainty_z`` in force: as set, else :data:`DEFAULT_UNCERTAINTY_Z` for a
        ``route_target`` bar, else 0."""
        if self.route_target is None:
            return 0.0
        return float(self.uncertainty_z) if self.uncertainty_z is not None else DEFAULT_UNCERTAINTY_Z

    @property
    def allocation_in_force(self) -> str | None:
        """The ``allocation`` in force: as set, else :data:`DEFAULT_ALLOCATION` for a
        ``route_target`` bar, else ``None``."""
        if self.route_target is None:
            return None
        return self.allocation or DEFAULT_ALLOCATION
