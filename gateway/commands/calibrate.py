"""``mixroute calibrate``: pick a route's quality bar on outcome data so that the realised
quality ratio (routed / always-strongest) meets ``--target`` with ``--confidence``
(:mod:`router.calibration`; method and numbers in docs/CALIBRATION.md).

Without ``--policy`` the route is ``auto`` over one ``fake`` backend per model of the data
priced at the model's mean recorded USD per call (the policy ``mixroute eval`` uses), and
only the snippet can be printed. With ``--policy``, ``--write`` replaces the route's
``quality_bar`` in the file (other lines kept); without it the YAML snippet is printed.

Rows the data loading drops (a missing or NaN score or cost, a contaminated prompt) are
counted per ``--data`` path on stderr, as ``mixroute eval`` counts them; ``missing_cost``
counts rows with a blank cost cell of a model whose cost the data records in other rows
(the cell is not filled in). A file given both on its own and inside a ``--data`` folder
is refused, as is a path given twice (also through a symbolic or hard link, or another
spelling of the path): its rows would count twice. A ``--json`` that is one of the input
files (a data file, also one inside a ``--data`` folder, the ``--policy`` file, a heads
file) is refused before any work.

Exit status: 0; 1 when no threshold meets the target; 2 for bad input (data, policy,
route, heads, an empty path such as ``--data ''``, which typer would read as the current
folder, a policy file that cannot be written; a route whose backends all stand for one
data model, such as a route with one backend, which has nothing to calibrate) and for
``--write`` on fewer than :data:`MIN_ROWS` calibration rows (nothing is written; the
snippet is printed).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from gateway.commands import require_modules
from gateway.commands.output import (check_not_input, check_not_repeated, check_output, data_inputs, folder_inputs,
                                     path_of, paths_of, write_output)


def _load_heads(adapters: Path | None) -> Any:
    """The shipped (or ``adapters``) heads as a ``ClassifierPredictor``; replaced in tests."""
    from router.classify import load_predictor
    from router.classify.memory import settings_from_env

    # Benchmark rows: no long-prompt pii/injection scan; the outcome memory may hold these
    # very rows, so a row never counts as its own neighbour. MIXROUTE_CLASSIFIER_MEMORY=off
    # calibrates the head alone, as the gateway with that setting decides (and as replay does);
    # MIXROUTE_CLASSIFIER_MEMORY_SMOOTHING as the gateway reads it, for the same reason.
    memory, smoothing = settings_from_env()
    return load_predictor(adapters, scan_chars=0, exclude_exact=True, memory=memory, memory_smoothing=smoothing)


def _default_policy(data: Any) -> Any:
    from backends.replay.plan import backend_name
    from router.eval.routers.mixroute import policy_text
    from router.policy import parse_policy

    names: dict[str, str] = {}
    for m in data.models:
        names[backend_name(m, set(names))] = m
    return parse_policy(policy_text(data, names, 0.95), source="<policy of the data>")


def split_rows(rows: Any, split: str) -> Any:
    """The rows whose prompt is in the classifier's ``split`` (``train``, ``calib``, ``test``).

    Raises:
        CalibrationError: an unknown split, or no row in it.
    """
    import numpy as np

    from router.calibration import CalibrationError
    from router.classify.data import split_of

    if split not in ("train", "calib", "test"):
        raise CalibrationError(f"--split {split!r}: one of train, calib, test")
    keep = np.array([i for i, p in enumerate(rows.prompts) if split_of(p) == split], dtype=int)
    if len(keep) == 0:
        raise CalibrationError(f"no row of the data is in the classifier's {split!r} split")
    return rows.subset(keep)


def _fmt(p: Any) -> str:
    lo, hi = p.ci
    return (f"{p.param} {p.threshold:g}: realised ratio {p.ratio:.4f} ({p.confidence * 100:g}% CI {lo:.4f}-{hi:.4f}, "
            f"one-sided lower bound {p.lower:.4f}), cost ratio {p.cost_ratio:.4f}, bar missed on "
            f"{p.miss_rate:.1%} of requests, rejected {p.rejected}, n {p.n}")


def calibrate(
    # The input paths are read as text, not Path: Path("") is ".", so an empty --data (--policy,
    # --adapters) would read the current folder; paths_of refuses it.
    data: Annotated[list[str], typer.Option("--data", metavar="<list[Path]>",
                                            help="Outcome data file or folder; repeatable.")],
    route: Annotated[str, typer.Option(help="The route to calibrate.")] = "auto",
    policy: Annotated[Optional[str], typer.Option(metavar="<path>", help="Policy YAML holding the route (default: "
                                                  "one fake backend per data model, route auto).")] = None,
    target: Annotated[float, typer.Option(min=0.01, max=1.0, help="Realised quality ratio to meet.")] = 0.95,
    confidence: Annotated[float, typer.Option(min=0.5, max=0.999, help="Confidence of the lower bound.")] = 0.9,
    write: Annotated[bool, typer.Option("--write", help="Write the bar and its evidence into --policy.")] = False,
    holdout: Annotated[float, typer.Option(min=0.0, max=0.9, help="Share of rows held out to check the pick.")] = 0.0,
    resamples: Annotated[int, typer.Option(min=100, help="Bootstrap resamples.")] = 1000,
    seed: Annotated[int, typer.Option(help="Seed of the resampling and the holdout split.")] = 0,
    adapters: Annotated[Optional[str], typer.Option(metavar="<path>",
                                                    help="Heads folder (default: the shipped adapters/).")] = None,
    json_out: Annotated[Optional[Path], typer.Option("--json", help="Write every swept threshold as JSON.")] = None,
    split: Annotated[Optional[str], typer.Option(help="Keep only rows of this split of the classifier's (train, "
                                                 "calib or test, by prompt hash): `calib` rows were not used to "
                                                 "fit the shipped heads.")] = None,
) -> None:
    """Calibrate a route's quality bar so the realised quality ratio meets --target."""
    require_modules("mixroute calibrate", "eval", "numpy")
    from router.calibration import CalibrationError, TargetUnreachable, calibrate as run, evidence_bar, route_columns
    from router.calibration.predictions import cache_path
    from router.calibration.simulate import join_parts, load_parts
    from router.calibration.write import bar_block, write_policy
    from router.eval.data import dropped_text

    data = paths_of(data, "--data", "an outcome data file or folder (. for the current folder)")
    policy = path_of(policy, "--policy", "a policy file, or leave --policy out for the policy of the data")
    adapters = path_of(adapters, "--adapters", "a heads folder (. for the current folder), or leave --adapters out "
                                               "for the shipped heads")
    check_output(json_out, "--json")
    check_not_input([(json_out, "--json")], [*data_inputs(data, "--data"),
                                             *([(policy, "--policy")] if policy else []),
                                             *folder_inputs(adapters, "--adapters")])
    check_not_repeated(data, "--data", "its rows would count twice")
    from router.policy import PolicyError, load_policy

    if write and policy is None:
        typer.echo("mixroute calibrate: --write needs --policy", err=True)
        raise typer.Exit(2)
    try:
        parts = load_parts(data)
        for part in parts:  # as `mixroute eval` counts them in its dataset line
            if any(part.dropped.values()):
                typer.echo(f"mixroute calibrate: {part.path}: {part.n} rows, dropped: {dropped_text(part.dropped)}",
                           err=True)
        rows = join_parts(parts)
        if split is not None:
            rows = split_rows(rows, split)
        loaded = load_policy(policy) if policy else _default_policy(rows)
        route_columns(loaded, route, rows.models)  # before the heads load: a route with nothing to calibrate
    except (CalibrationError, PolicyError) as exc:
        typer.echo(f"mixroute calibrate: {exc}", err=True)
        raise typer.Exit(2)
    try:
        from router.classify.memory import settings_from_env

        settings_from_env()  # a bad setting is not the heads' fault: its own line, before they load
    except ValueError as exc:
        typer.echo(f"mixroute calibrate: {exc}", err=True)
        raise typer.Exit(2)
    try:
        heads = _load_heads(adapters)
    except Exception as exc:  # ClassifierUnavailable, AdapterError, missing torch
        typer.echo(f"mixroute calibrate: no usable heads: {exc}", err=True)
        raise typer.Exit(2)
    cache = cache_path(heads) if hasattr(heads, "heads") else None
    try:
        result = run(loaded, route, rows, heads, target=target, confidence=confidence, resamples=resamples,
                     seed=seed, holdout=holdout, cache=cache, progress=_progress())
    except TargetUnreachable as exc:
        typer.echo(f"mixroute calibrate: {exc}", err=True)
        if json_out is not None and exc.points:  # the curve says how far the target is
            _write_json(json_out, None, unreachable=(route, str(exc), exc.points))
            typer.echo(f"wrote the swept thresholds to {json_out}", err=True)
        raise typer.Exit(1)
    except CalibrationError as exc:
        typer.echo(f"mixroute calibrate: {exc}", err=True)
        raise typer.Exit(2)
    finally:
        if hasattr(heads, "close"):
            heads.close()
    if json_out is not None:
        _write_json(json_out, result)
    if result.chosen.n < MIN_ROWS:
        typer.echo(f"warning: the bar was picked on {result.chosen.n} calibration rows; a bootstrap bound on fewer "
                   f"than {MIN_ROWS} rows says little (add rows, or lower --holdout)", err=True)
    _report(result, rows.name, target)
    bar = evidence_bar(result, target, [str(p) + (f" (classifier split {split})" if split else "") for p in data])
    if write and result.chosen.n < MIN_ROWS:
        typer.echo(f"\n# routes[{route}] of the policy:\n{bar_block(bar)}")
        typer.echo(f"mixroute calibrate: not written: {result.chosen.n} calibration rows cannot certify a bar (at "
                   f"least {MIN_ROWS}); {policy} is unchanged (the snippet above is the bar they give)", err=True)
        raise typer.Exit(2)
    if write:
        try:
            write_policy(policy, route, bar)
        except CalibrationError as exc:
            typer.echo(f"mixroute calibrate: {exc}", err=True)
            raise typer.Exit(2)
        typer.echo(f"wrote routes[{route}].quality_bar into {policy}")
    else:
        typer.echo(f"\n# routes[{route}] of the policy:\n{bar_block(bar)}")


def _progress():
    import sys

    def tick(label: str, done: int, total: int) -> None:
        if sys.stderr.isatty():
            end = "\n" if done >= total else ""
            print(f"\r{label}: {done}/{total}", end=end, file=sys.stderr, flush=True)

    return tick


def _report(result: Any, name: str, target: float) -> None:
    typer.echo(f"route {result.route!r} on {name}: {result.chosen.n} calibration rows, always-strongest "
               f"{result.strongest}, target {target} at {result.confidence * 100:g}% confidence family-wise "
               f"(each test at {result.chosen.confidence * 100:g}%)")
    typer.echo(f"chosen   {_fmt(result.chosen)}")
    typer.echo(f"current  {_fmt(result.current)}")
    if result.holdout is not None:
        typer.echo(f"held-out chosen  {_fmt(result.holdout)}")
        typer.echo(f"held-out current {_fmt(result.holdout_current)}")


#: Calibration rows under which the command warns that the bound says little.
MIN_ROWS = 30


def _write_json(path: Path, result: Any, unreachable: tuple[str, str, list] | None = None) -> None:
    import dataclasses

    import orjson

    def dump(p: Any) -> Any:
        return dataclasses.asdict(p) if p is not None else None

    if unreachable is not None:  # no pick: the error and the curve
        route, error, points = unreachable
        doc = {"route": route, "error": error, "chosen": None, "points": [dump(p) for p in points]}
    else:
        doc = {"route": result.route, "strongest": result.strongest, "method": result.method,
               "chosen": dump(result.chosen), "current": dump(result.current), "holdout": dump(result.holdout),
               "holdout_current": dump(result.holdout_current), "points": [dump(p) for p in result.points]}
    write_output(path, "--json", lambda p: p.write_bytes(orjson.dumps(doc, option=orjson.OPT_INDENT_2) + b"\n"))
