"""Replay calibration rows through the decision engine under a swept quality bar.

For each parametrisation of a route's bar (:data:`PARAMS`) and each threshold ``t`` of its
grid, the route's bar is replaced by ``{param: t}`` in an in-memory copy of the policy and
every row's prompt goes through :meth:`router.engine.Router.decide` (the gateway's one
decision function, not a copy) as a chat request with one user message, no tenant and no
headers. The chosen backend is mapped back to the data model it stands for, whose recorded
score and cost are then what the choice realised.

Candidate -> data model: the backend's ``quality_model`` or ``model`` (as the heads match
it: exactly, case-insensitively, or by the last ``/`` segment). A route whose candidates
are not all in the data cannot be calibrated on it (:class:`CalibrationError`).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from router.calibration.errors import CalibrationError
from router.eval.data import EvalData
from router.policy.loader import LoadedPolicy
from router.policy.models import QualityBar, RouteConfig

#: Bar parametrisations swept: the absolute ``min_quality``, the relative ``target``, the
#: cost-quality trade-off ``willingness_to_pay`` and the route-level share ``route_target``
#: (:class:`router.policy.models.QualityBar`).
PARAMS = QualityBar.KINDS
#: Thresholds swept per parametrisation (min_quality: a probability; target: a share of the
#: best predicted quality, which must be > 0; willingness_to_pay: USD per unit of quality,
#: log-spaced from 1e-6 (about always the cheapest) to 10 (about always the best predicted),
#: 24 steps per decade); route_target: as target.
GRIDS = {"min_quality": np.round(np.arange(0.0, 1.0001, 0.01), 2),
         "target": np.round(np.arange(0.50, 1.0001, 0.005), 3),
         "willingness_to_pay": np.array([float(f"{x:.4g}") for x in np.logspace(-6, 1, 7 * 24 + 1)]),
         "route_target": np.round(np.arange(0.50, 1.0001, 0.005), 3)}
#: Column index recorded for a request the engine rejected (``on_no_candidate: reject``).
REJECTED = -1

Progress = Callable[[str, int, int], None]


def _file_id(path: Path) -> object:
    """What makes two paths one file, as :func:`os.path.samefile` compares them: the device
    and inode (so a symbolic or hard link is the file it links to); the resolved path when
    the file cannot be read (loading then says why)."""
    try:
        st = os.stat(path)
        return st.st_dev, st.st_ino
    except (OSError, ValueError):
        return Path(path).resolve()


def load_parts(paths: Sequence[Path]) -> list[EvalData]:
    """The rows of each path (:func:`router.eval.data.load_eval_data`), each restricted to the
    first path's models; each part's ``dropped`` counts the rows it lost (NaN or missing
    scores, NaN costs, blank cost cells of data that records costs, contaminated prompts).

    Raises:
        CalibrationError: a path given twice, or a file also read as part of a folder given
            (its rows would count twice), also through a symbolic or hard link
            (:func:`_file_id`); a path fails to load; the paths hold different model sets.
    """
    from router.eval.data import data_files, load_eval_data
    from router.eval.errors import EvalDataError

    seen: dict[object, Path] = {}
    for p in paths:
        key = _file_id(Path(p))
        if key in seen:
            raise CalibrationError(f"{p}: given twice (as {seen[key]}); each row would count twice")
        seen[key] = p
    files = [{_file_id(f): f for f in data_files(Path(p))} for p in paths]
    for i, p in enumerate(paths):
        for q, earlier in zip(paths[:i], files[:i]):
            shared = sorted((earlier[k], files[i][k]) for k in files[i].keys() & earlier.keys())
            if shared:  # e.g. --data d --data d/x.csv, or a hard link of d/x.csv
                first, same = shared[0]
                also = f" (also as {same})" if same != first else ""
                more = f" and {len(shared) - 1} more file(s)" if len(shared) > 1 else ""
                raise CalibrationError(f"{q} and {p} both hold {first}{also}{more}; each row would count twice: "
                                       "give a folder or the files in it, not both")
    parts = []
    for p in paths:
        try:
            parts.append(load_eval_data(p))
        except EvalDataError as exc:
            raise CalibrationError(str(exc)) from None
    first = parts[0]
    for p, d in zip(paths[1:], parts[1:]):
        if set(d.models) != set(first.models):
            raise CalibrationError(f"{p}: models {sorted(d.models)} differ from {paths[0]}'s {sorted(first.models)}")
    return [d.restrict_models(first.models) for d in parts]


def join_parts(parts: Sequence[EvalData]) -> EvalData:
    """:func:`load_parts`' parts as one dataset (``dropped`` summed over the parts)."""
    from router.eval.data import summed_dropped

    first = parts[0]
    dropped = summed_dropped(parts)
    return EvalData("+".join(d.name for d in parts), ",".join(d.path for d in parts), list(first.models),
                    [t for d in parts for t in d.prompts], np.concatenate([d.scores for d in parts]),
                    np.concatenate([d.costs for d in parts]), first.price_source, dropped)


def load_rows(paths: Sequence[Path]) -> EvalData:
    """The rows of every path as one dataset (:func:`load_parts`, :func:`join_parts`).

    Raises:
        CalibrationError: as :func:`load_parts`.
    """
    return join_parts(load_parts(paths))


def _norm(name: str) -> str:
    return name.strip().lower()


def data_columns(loaded: LoadedPolicy, route: RouteConfig, models: Sequence[str]) -> dict[str, int]:
    """Backend name -> column of ``models`` it stands for, for each of the route's candidates.

    Raises:
        CalibrationError: a candidate has no column in the data.
    """
    index: dict[str, int] = {}
    for i, m in enumerate(models):
        for key in (m, _norm(m), _norm(m.rsplit("/", 1)[-1])):
            index.setdefault(key, i)
    out, missing = {}, []
    for name in route.backends:
        b = loaded.policy.backend(name)
        label = b.quality_model or b.model
        col = next((index[k] for k in (label, _norm(label), _norm(label.rsplit("/", 1)[-1])) if k in index), None)
        if col is None:
            missing.append(f"{name} ({label})")
        else:
            out[name] = col
    if missing:
        raise CalibrationError(f"route '{route.name}': backends {', '.join(missing)} have no model in the data "
                               f"(models: {', '.join(models)}); set their quality_model to a data model")
    return out


def kept_settings(param: str, window: int | None, uncertainty_z: float | None, allocation: str | None = None) -> dict:
    """The route's bar settings that a swept or written bar of kind ``param`` keeps: a
    ``route_target`` bar keeps ``window``, ``uncertainty_z`` and ``allocation`` (those set);
    others none."""
    if param != "route_target":
        return {}
    return {k: v for k, v in (("window", window), ("uncertainty_z", uncertainty_z), ("allocation", allocation))
            if v is not None}


def bar_of(param: str, threshold: float, window: int | None = None, uncertainty_z: float | None = None,
           allocation: str | None = None) -> QualityBar:
    """The bar ``{param: threshold}``, with the route's :func:`kept_settings`."""
    return QualityBar(**{param: threshold, **kept_settings(param, window, uncertainty_z, allocation)})


def with_bar(loaded: LoadedPolicy, route: str, bar: QualityBar) -> LoadedPolicy:
    """``loaded`` with route ``route``'s quality bar replaced by ``bar`` (same source and hash)."""
    policy = loaded.policy
    routes = [r.model_copy(update={"quality_bar": bar}) if r.name == route else r for r in policy.routes]
    return LoadedPolicy(policy=policy.model_copy(update={"routes": routes}), text=loaded.text, hash=loaded.hash,
                        source=loaded.source)


async def decide_rows(loaded: LoadedPolicy, route: str, prompts: Sequence[str], predictor,
                      columns: dict[str, int]) -> np.ndarray:
    """``(n,)`` data column of the backend the engine chooses per prompt (:data:`REJECTED`
    where it raises :class:`router.errors.NoCandidate` or :class:`router.errors.RequestRejected`)."""
    from router.engine import Router, RoutingRequest
    from router.errors import NoCandidate, RequestRejected

    router = Router(loaded, predictor)
    out = np.empty(len(prompts), dtype=int)
    for i, prompt in enumerate(prompts):
        body = {"model": route, "messages": [{"role": "user", "content": prompt}]}
        try:
            decision = await router.decide(RoutingRequest(endpoint="chat", body=body))
            out[i] = columns[decision.record.chosen]
        except (NoCandidate, RequestRejected):
            out[i] = REJECTED
    return out


@dataclass
class Sweep:
    """The engine's choices per threshold for one parametrisation.

    Attributes:
        param: one of :data:`PARAMS`.
        thresholds: ``(T,)`` values of ``param``.
        choices: ``(T, n)`` data column chosen per row (:data:`REJECTED`: rejected).
    """

    param: str
    thresholds: np.ndarray
    choices: np.ndarray


def sweep(loaded: LoadedPolicy, route: str, prompts: Sequence[str], predictor, columns: dict[str, int],
          grids: dict[str, np.ndarray] | None = None, progress: Progress | None = None) -> list[Sweep]:
    """Decide every prompt at every threshold of every parametrisation (:data:`GRIDS`)."""
    grids = grids or GRIDS
    window = loaded.policy.route(route).quality_bar.window
    z = loaded.policy.route(route).quality_bar.uncertainty_z
    allocation = loaded.policy.route(route).quality_bar.allocation

    async def run() -> list[Sweep]:
        out = []
        for param, grid in grids.items():
            choices = np.empty((len(grid), len(prompts)), dtype=int)
            for k, t in enumerate(grid):
                bar = bar_of(param, float(t), window, z, allocation)
                choices[k] = await decide_rows(with_bar(loaded, route, bar), route, prompts, predictor, columns)
                if progress:
                    progress(f"decide ({param})", k + 1, len(grid))
            out.append(Sweep(param, np.asarray(grid, dtype=float), choices))
        return out

    return asyncio.run(run())
