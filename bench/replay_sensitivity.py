"""How much of a ``mixroute replay`` result is the row order, the sample and the exact
estimator: the replay's decisions, re-made offline for many orders and settings at once.

    python -m bench.replay_sensitivity ../shared/data/routerbench [--split heldout] [--seeds 8]
        [--k 40,100] [--bars route_target=0.95,route_target=0.95:z=1:share,...]
        [--cross-fit 5 [--fold-seed 0] --samples 40 [--sample-size 454] [--samples-order random|data|interleaved]]
        [--dtype auto|float32|bfloat16] [--linear auto|int8|onednn|default] [--json OUT]

``mixroute replay`` sends each row through a real gateway, one order per run (about a
minute for 454 rows). This bench makes the same decisions without HTTP: the shipped heads
run once per prompt, the outcome memory blends them with ``k`` neighbours
(:class:`router.classify.memory.OutcomeMemory`, every other setting as shipped), and each
row goes through :meth:`router.engine.Router.decide` (the gateway's one decision function,
via :func:`router.calibration.simulate.decide_rows`) under the policy ``mixroute replay``
generates, with the row's bar replaced. Rows are picked and ordered as ``mixroute replay
--split S [--order data|--seed N]`` picks and orders them
(:func:`gateway.commands.replay.prepare`), so with the shipped ``k`` and bar each line
reproduces the replay command's quality and cost ratios (against always-strongest: the
model with the highest mean score over the data).

It answers: is a replay figure a property of the router, or of one order of a few hundred
rows and one value of ``k``? Each line prints the mean, min and max realised quality ratio
and cost ratio over the data's order, the interleaved one and ``--seeds`` shuffles, and how
many of them meet issue 4's target (quality >= 0.95 at cost <= 0.35). First it prints, per source file and
model, how well the first ``k``'s estimate ranks that file's rows (AUC of the predicted
quality for the recorded outcome), and the per-file ceiling (:func:`per_file_ceiling`):
what any router that knows each row's file but nothing else about the row could reach on
these rows, in hindsight.

``--cross-fit F`` replays every row of the data instead, each estimated from an outcome
memory of the rows in the other folds (:func:`crossfit_predictions`): 2,205 RouterBench
rows as new ones rather than the 454 held out of the shipped memory. ``--samples N`` adds N
random samples of ``--sample-size`` rows, each replayed as its own run (a fresh route
window; ``--samples-order``: in a random order, the default, the data's or interleaved):
how often a sample of that size from the same sources meets the target. The samples are
drawn from one cross-fitted estimate of every row, so their counts share its luck:
``--fold-seed S`` assigns the rows to folds with another permutation, a fresh estimate of
every row (the same estimator), and the spread over fold seeds is how much of a count is
that luck (docs/CALIBRATION.md, "The replay's order").

The encoder runs as the gateway's would on this machine (``dtype``/``linear`` ``auto``,
:mod:`router.classify.precision`; the line ``encoder: ...`` says which ran); ``--dtype`` and
``--linear`` force another path, as ``MIXROUTE_CLASSIFIER_DTYPE`` /
``MIXROUTE_CLASSIFIER_LINEAR`` do for the gateway.

No timing is measured; figures are counts over recorded scores and costs.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path

import numpy as np

from bench.replay_estimates import ENCODER, RESOLVED, crossfit_predictions, predictions, source_means
from router.classify.memory import DEFAULT_K
from router.predict import Prediction

TARGET_QUALITY, TARGET_COST = 0.95, 0.35


def parse_bar(text: str) -> tuple[str, float, float | None, str | None]:
    """``route_target=0.95:z=1:share`` -> ``("route_target", 0.95, 1.0, "share")`` (z and the
    allocation only for route_target; either left out is ``None``, the default in force)."""
    from router.aggregate import ALLOCATIONS

    try:
        head, *opts = text.split(":")
        kind, _, value = head.partition("=")
        z, allocation = None, None
        for opt in opts:
            if opt.startswith("z=") and z is None:
                z = float(opt[2:])
            elif opt in ALLOCATIONS and allocation is None:
                allocation = opt
            else:
                raise ValueError  # unknown, or given twice
        if kind not in ("route_target", "target") or not 0 < float(value) <= 1 or not 0 <= (z or 0) <= 5 or (
                kind == "target" and opts):
            raise ValueError
        return kind, float(value), z, allocation
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: give route_target=T[:z=Z][:{'|'.join(ALLOCATIONS)}] or "
                                         "target=T, 0 < T <= 1, 0 <= Z <= 5, each option once")


class TablePredictor:
    """Predictions looked up by prompt: ``quality`` and ``sd`` are ``(n, M)`` over ``columns``;
    ``output_tokens`` ``(n,)`` the ``output_length`` head's estimate (tokens), rounded as the
    gateway's predictor rounds it."""

    def __init__(self, prompts: list[str], quality: np.ndarray, sd: np.ndarray, columns: dict[str, int],
                 output_tokens: np.ndarray | None = None):
        self.row = {p: i for i, p in enumerate(prompts)}
        self.quality, self.sd, self.columns, self.output_tokens = quality, sd, columns, output_tokens

    async def predict(self, text, backends):
        i = self.row[text]
        extra = {} if self.output_tokens is None else {"output_tokens": max(1, int(round(self.output_tokens[i])))}
        return Prediction(quality={b.name: round(float(self.quality[i, self.columns[b.name]]), 4) for b in backends},
                          quality_sd={b.name: round(float(self.sd[i, self.columns[b.name]]), 4) for b in backends},
                          source="classifier", **extra)


def per_file_ceiling(score: np.ndarray, cost: np.ndarray, sources: np.ndarray, strong: int,
                     budget: float = TARGET_COST) -> tuple[float, float]:
    """What a router that knows each row's source file but nothing else about the row can
    reach on these rows: the highest quality ratio against always-``strong`` at a cost
    ratio of at most ``budget``, giving each file a mix of models (any fractions), with
    every file's per-model means taken from these very rows (an in-sample ceiling, not an
    estimate). The LP relaxation of the multiple-choice knapsack: per file, the upper
    concave hull of the models' (summed cost, summed score); the hull segments of all files
    bought greedily by gain per dollar until the budget is spent (Sinha & Zoltners 1979).

    Args:
        score, cost: ``(n, M)`` recorded scores and USD per call. sources: ``(n,)`` file names.

    Returns:
        ``(quality ratio, cost ratio)`` at the budget (at the top of every hull if that
        costs less; at the cheapest models if even they cost more)."""
    from router.aggregate import hull_steps

    base_q = base_c = 0.0
    segments = []
    for src in sorted(set(sources)):
        rows = sources == src
        points = list(zip(cost[rows].sum(0).tolist(), score[rows].sum(0).tolist()))
        cheapest = min(points, key=lambda p: (p[0], -p[1]))
        base_q, base_c = base_q + cheapest[1], base_c + cheapest[0]
        _, _, steps = hull_steps(points)
        segments += [(usd_per_q * gain, gain) for usd_per_q, gain in steps]  # (extra cost, extra score)
    total_q, total_c = score[:, strong].sum(), cost[:, strong].sum()
    q, c = base_q, base_c
    for extra_c, extra_q in sorted(segments, key=lambda s: s[0] / s[1]):
        room = budget * total_c - c
        if room <= 0:
            break
        take = min(1.0, room / extra_c) if extra_c > 0 else 1.0
        q, c = q + take * extra_q, c + take * extra_c
    return float(q / total_q), float(c / total_c)


def auc(pred: np.ndarray, outcome: np.ndarray) -> float | None:
    """Area under the ROC curve of ``pred`` for ``outcome > 0.5`` (Mann-Whitney U, ties
    counted half); ``None`` when every outcome is on one side."""
    pos, neg = pred[outcome > 0.5], pred[outcome <= 0.5]
    if not len(pos) or not len(neg):
        return None
    greater = (pos[:, None] > neg[None, :]).sum() + 0.5 * (pos[:, None] == neg[None, :]).sum()
    return float(greater / (len(pos) * len(neg)))


def within_source_auc(rows: list, quality: np.ndarray, score: np.ndarray, models: list[str]) -> dict:
    """Per source file and model: how well the estimate ranks that file's rows (:func:`auc`)."""
    sources = np.array([r.source for r in rows])
    return {src: {m: auc(quality[sources == src, j], score[sources == src, j]) for j, m in enumerate(models)}
            for src in sorted(set(sources))}


def run(data: Path, split: str | None, seeds: int, ks: list[int], bars: list[tuple[str, float, float, str | None]],
        n: int | None = None, cross_fit: int = 0, subsets: int = 0, subset_size: int = 454,
        samples_order: str = "random", fold_seed: int = 0, task_means: bool = False,
        domain_means: float = 0.0, smoothing: float = 0.0) -> dict:
    """Every (``k``, bar) line over the data's order and seeds ``1..seeds`` (module docstring);
    ``n``: the first ``n`` rows of each order, as ``mixroute replay --n``.

    ``cross_fit`` > 1: every row of the data (``split`` ignored) with
    :func:`crossfit_predictions` in place of the shipped memory; ``subsets``: also that many
    random samples of ``subset_size`` rows, each replayed as its own run (a fresh route
    window), as a new sample from the same sources would be, in the order
    ``samples_order`` names: ``random``, ``data`` (file by file, as ``mixroute replay
    --order data``) or ``interleaved`` (as ``mixroute replay`` sends rows by default).
    ``fold_seed``: the permutation that assigns rows to the cross-fitting folds;
    ``task_means``: decide on :func:`source_means` of the estimates (a diagnostic);
    ``domain_means``, ``smoothing``: as :func:`crossfit_predictions` (with ``cross_fit``
    only; the groups of ``smoothing`` are the rows' files).

    Raises:
        ReplayFailed: unreadable data, an unknown split, or ``subset_size`` over the rows."""
    if cross_fit:
        split = None
    from gateway.commands.replay import interleave, prepare
    from gateway.commands.replay_gateway import ReplayFailed
    from router.calibration.simulate import bar_of, data_columns, decide_rows, with_bar
    from router.policy import parse_policy
    from router.policy.quality_bar import QualityBar

    plan, rows = prepare([data], split=split)
    orders = {"data order": rows[:n] if n else rows, "interleaved": interleave(rows)[:n] if n else interleave(rows)}
    orders |= {f"seed {s}": prepare([data], split=split, seed=s, n=n)[1] for s in range(1, seeds + 1)}
    if subsets and subset_size > len(rows):
        raise ReplayFailed(f"--sample-size {subset_size}: more than the {len(rows)} rows of the data")
    draw = np.random.default_rng(12345)
    pick = {"random": lambda idx: [rows[i] for i in idx],
            "data": lambda idx: [rows[i] for i in sorted(idx)],
            "interleaved": lambda idx: interleave([rows[i] for i in sorted(idx)])}[samples_order]
    sample_rows = [draw.choice(len(rows), subset_size, replace=False) for _ in range(subsets)]
    orders |= {f"sample {s}": pick(idx) for s, idx in enumerate(sample_rows, 1)}
    models = list(plan.dataset.models)
    prompts = [r.prompt for r in rows]
    sources = np.array([r.source for r in rows])
    index = {p: i for i, p in enumerate(prompts)}
    strong = plan.dataset.strongest()
    recorded = np.array([[np.nan if r.scores.get(m) is None else r.scores[m] for m in models] for r in rows])
    score = np.nan_to_num(recorded)  # a score not recorded counts 0
    cost = np.array([[r.costs.get(m) if r.costs.get(m) is not None else plan.prices[m] for m in models] for r in rows])
    import yaml

    loaded = parse_policy(yaml.safe_dump(plan.policy()), source="<replay policy>")
    columns = data_columns(loaded, loaded.policy.route("auto"), models)
    if cross_fit:
        preds, lengths = crossfit_predictions(prompts, recorded, models, ks, cross_fit, seed=fold_seed,
                                              domain_means=domain_means, smoothing=smoothing, groups=sources)
    else:
        preds, lengths = predictions(prompts, models, ks)
    g = models.index(strong)
    print(f"encoder: {RESOLVED.get('dtype')}, linear maps {RESOLVED.get('linear')}"
          + (f"; cross-fit fold seed {fold_seed}" if cross_fit else "")
          + ("; deciding on each file's mean estimate (--task-means)" if task_means else "")
          + (f"; blended with the domain's mean scores at {domain_means:g} (--domain-means)" if domain_means else "")
          + (f"; neighbour outcomes shrunk {smoothing:g} to their file's mean (--task-smoothing)" if smoothing else ""))
    aucs = within_source_auc(rows, preds[ks[0]][0], score, models)
    for src, per in aucs.items():
        shown = [f"{m.rsplit('/', 1)[-1][:14]} {a:.2f}" for m, a in per.items() if a is not None]
        print(f"within-{src} AUC (k {ks[0]}): " + ", ".join(shown))
    if task_means:  # after the AUCs: those are of the row's own estimates
        preds = {k: (source_means(q, sources), sd) for k, (q, sd) in preds.items()}
    ceiling = per_file_ceiling(score, cost, sources, g)
    print(f"per-file ceiling on these {len(rows)} rows (each file's best mix of models, known in hindsight): "
          f"quality {ceiling[0]:.3f} at cost {ceiling[1]:.3f}")
    sample_ceilings = [per_file_ceiling(score[idx], cost[idx], sources[idx], g)[0] for idx in sample_rows]
    if sample_ceilings:
        print(f"per-file ceiling of each sample of {subset_size}: meets quality {TARGET_QUALITY} at cost {TARGET_COST} "
              f"on {sum(c >= TARGET_QUALITY for c in sample_ceilings)} of {len(sample_ceilings)} "
              f"(mean {np.mean(sample_ceilings):.3f})")
    lines = []
    for k in ks:
        table = TablePredictor(prompts, *preds[k], columns, lengths)
        for kind, value, z, allocation in bars:
            bar = bar_of(kind, value, None, z, allocation) if kind == "route_target" else QualityBar(**{kind: value})
            policy = with_bar(loaded, "auto", bar)
            runs = {}
            for name, ordered in orders.items():
                idx = np.array([index[r.prompt] for r in ordered])
                chosen = asyncio.run(decide_rows(policy, "auto", [prompts[i] for i in idx], table, columns))
                runs[name] = (float(score[idx, chosen].sum() / score[idx, g].sum()),
                              float(cost[idx, chosen].sum() / cost[idx, g].sum()))
            whole = [v for name, v in runs.items() if not name.startswith("sample ")]
            qs, cs, met = _ratios(whole)
            shown = {kind: value, **({"uncertainty_z": bar.z, "allocation": bar.allocation_in_force}
                                     if kind == "route_target" else {})}
            line = {"k": k, "bar": shown, "quality_mean": qs.mean(), "quality_min": qs.min(), "quality_max": qs.max(),
                    "cost_mean": cs.mean(), "cost_max": cs.max(), "met": met, "runs": runs}
            text = (f"k {k:3d}  {kind} {value}" + (f" z {bar.z:g} {bar.allocation_in_force}" if kind == "route_target" else "")
                    + f"  quality {qs.mean():.3f} [{qs.min():.3f}-{qs.max():.3f}]  cost {cs.mean():.3f} (max {cs.max():.3f})"
                    f"  met {met}/{len(whole)}")
            sampled = [v for name, v in runs.items() if name.startswith("sample ")]
            if sampled:
                sq, sc, sample_met = _ratios(sampled)
                line["samples"] = {"size": len(orders["sample 1"]), "quality_mean": sq.mean(), "quality_sd": sq.std(),
                                   "cost_mean": sc.mean(), "cost_sd": sc.std(), "met": sample_met}
                text += (f" | samples of {line['samples']['size']}: quality {sq.mean():.3f} (sd {sq.std():.3f}) cost "
                         f"{sc.mean():.3f} met {sample_met}/{len(sampled)}")
            lines.append(line)
            print(text, flush=True)
    return {"data": str(data), "split": split, "cross_fit": cross_fit, "fold_seed": fold_seed if cross_fit else None, "task_means": task_means, "domain_means": domain_means, "task_smoothing": smoothing,
            "encoder": dict(RESOLVED), "rows": len(orders["data order"]),
            "strongest": strong, "orders": list(orders), "per_file_ceiling": {"quality": ceiling[0], "cost": ceiling[1]},
            "sample_ceilings_meeting": (sum(c >= TARGET_QUALITY for c in sample_ceilings) if sample_ceilings else None),
            "within_source_auc": aucs, "lines": lines}


def _ratios(runs: list[tuple[float, float]]) -> tuple[np.ndarray, np.ndarray, int]:
    """``(quality ratios, cost ratios, runs meeting both targets)`` of ``[(quality, cost)]``."""
    qs, cs = np.array([q for q, _ in runs]), np.array([c for _, c in runs])
    return qs, cs, int(((qs >= TARGET_QUALITY) & (cs <= TARGET_COST)).sum())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("data", type=Path)
    parser.add_argument("--split", default="heldout", help="as mixroute replay --split (default heldout)")
    parser.add_argument("--seeds", type=int, default=8, help="shuffled orders besides the data's (seeds 1..N)")
    parser.add_argument("--n", type=int, help="only the first N rows of each order (as mixroute replay --n)")
    parser.add_argument("--k", default=str(DEFAULT_K), help=f"outcome-memory neighbours, comma-separated (shipped: {DEFAULT_K})")
    parser.add_argument("--bars", default="route_target=0.95", type=lambda s: [parse_bar(b) for b in s.split(",")],
                        help="comma-separated bars, e.g. route_target=0.95,route_target=0.95:z=1:share,target=0.95 "
                             "(z and the allocation default to those in force)")
    parser.add_argument("--cross-fit", type=int, default=0, metavar="F",
                        help="replay every row of the data, each estimated from an outcome memory of the rows in "
                             "the other F-1 of F folds instead of the shipped memory (--split is then ignored); "
                             "2-20, 0 (default): off")
    parser.add_argument("--samples", type=int, default=0, metavar="N",
                        help="also replay N random samples of --sample-size rows, each as its own run (drawn from "
                             "all the rows picked; --n does not apply to them)")
    parser.add_argument("--sample-size", type=int, default=454, help="rows per sample (default 454, the heldout split's)")
    parser.add_argument("--samples-order", choices=("random", "data", "interleaved"), default="random",
                        help="the order each sample's rows are replayed in: random (default), the data's (file by "
                             "file, as mixroute replay --order data) or interleaved (the files spread evenly, as "
                             "mixroute replay sends them by default)")
    parser.add_argument("--fold-seed", type=int, default=0, metavar="S",
                        help="with --cross-fit: the seed of the permutation assigning rows to folds (default 0); "
                             "another seed is another estimate of every row by the same estimator")
    parser.add_argument("--dtype", choices=("auto", "float32", "bfloat16"), default="auto",
                        help="encoder precision (default auto, as the gateway on this machine)")
    parser.add_argument("--linear", choices=("auto", "int8", "onednn", "default"), default="auto",
                        help="how the encoder's frozen linear maps run (default auto, as the gateway here)")
    parser.add_argument("--task-means", action="store_true",
                        help="diagnostic: decide on each source file's mean estimate instead of each row's own "
                             "(a router told the task, without the per-row variation of the estimates)")
    parser.add_argument("--domain-means", type=float, default=0.0, metavar="A",
                        help="diagnostic, with --cross-fit: blend each estimate with weight A in [0, 1] with the mean "
                             "recorded scores of the other folds' rows of its domain (the shipped domain head's)")
    parser.add_argument("--task-smoothing", type=float, default=0.0, metavar="A",
                        help="with --cross-fit: shrink the other folds' recorded scores A in [0, 1] of the way to "
                             "their file's mean before the neighbours read them (as the memory's task_smoothing)")
    parser.add_argument("--json", type=Path, help="write every run here")
    args = parser.parse_args(argv)
    try:
        ks = [int(k) for k in args.k.split(",")]
        if any(k < 1 for k in ks):
            raise ValueError
    except ValueError:
        parser.error(f"--k {args.k!r}: positive integers, comma-separated (e.g. 30,40,50)")
    if not 0 <= args.seeds <= 1000:
        parser.error(f"--seeds {args.seeds}: 0-1000")
    if args.n is not None and args.n < 1:
        parser.error(f"--n {args.n}: at least 1")
    if args.cross_fit and not 2 <= args.cross_fit <= 20:
        parser.error(f"--cross-fit {args.cross_fit}: 2-20 folds, or 0 for none")
    if not 0 <= args.samples <= 1000:
        parser.error(f"--samples {args.samples}: 0-1000")
    if args.sample_size < 1:
        parser.error(f"--sample-size {args.sample_size}: at least 1")
    if args.fold_seed < 0:
        parser.error(f"--fold-seed {args.fold_seed}: 0 or more")
    if not 0.0 <= args.domain_means <= 1.0:
        parser.error(f"--domain-means {args.domain_means:g}: a weight in [0, 1]")
    if args.domain_means and not args.cross_fit:
        parser.error("--domain-means needs --cross-fit (the shipped memory's rows carry no domain)")
    if not 0.0 <= args.task_smoothing <= 1.0:
        parser.error(f"--task-smoothing {args.task_smoothing:g}: a weight in [0, 1]")
    if args.task_smoothing and not args.cross_fit:
        parser.error("--task-smoothing needs --cross-fit (the shipped memory carries its own setting)")
    if args.fold_seed and not args.cross_fit:
        parser.error("--fold-seed needs --cross-fit (without it every row is estimated from the shipped memory)")
    from gateway.commands.output import check_output, write_output
    from gateway.commands.replay_gateway import ReplayFailed

    import typer

    try:
        check_output(args.json, "--json")  # before the run, not after it; prints its own line
    except typer.Exit as exc:
        return exc.exit_code
    from router.classify.errors import AdapterError

    ENCODER.update(dtype=args.dtype, linear=args.linear)
    try:
        result = run(args.data, None if args.split == "all" else args.split, args.seeds, ks, args.bars, args.n,
                     cross_fit=args.cross_fit, subsets=args.samples, subset_size=args.sample_size,
                     samples_order=args.samples_order, fold_seed=args.fold_seed, task_means=args.task_means,
                     domain_means=args.domain_means, smoothing=args.task_smoothing)
    except (ReplayFailed, AdapterError) as exc:  # AdapterError: --dtype/--linear cannot run here
        print(f"replay_sensitivity: {exc}", file=sys.stderr)
        return 2
    if args.json:
        text = json.dumps(result, indent=1, default=float)
        try:
            write_output(args.json, "--json", lambda p: p.write_text(text, encoding="utf-8"))
        except typer.Exit as exc:  # one line already printed
            return exc.exit_code
    return 0

if __name__ == "__main__":
    raise SystemExit(main())
