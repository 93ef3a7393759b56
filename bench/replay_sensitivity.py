"""How much of a ``mixroute replay`` result is the row order and the exact estimator: the
replay's decisions, re-made offline for many orders and nearby settings at once.

    python -m bench.replay_sensitivity ../shared/data/routerbench [--split heldout] [--seeds 8]
        [--k 30,35,40,45,50,60] [--bars route_target=0.95:z=1,...] [--json OUT]

``mixroute replay`` sends each row through a real gateway, one order per run (about a
minute for 454 rows). This bench makes the same decisions without HTTP: the shipped heads
run once per prompt, the outcome memory blends them with ``k`` neighbours
(:class:`router.classify.memory.OutcomeMemory`, every other setting as shipped), and each
row goes through :meth:`router.engine.Router.decide` (the gateway's one decision function,
via :func:`router.calibration.simulate.decide_rows`) under the policy ``mixroute replay``
generates, with the row's bar replaced. Rows are picked and ordered as ``mixroute replay
--split S [--seed N]`` picks and orders them (:func:`gateway.commands.replay.prepare`), so
with the shipped ``k`` and bar each line reproduces the replay command's quality and cost
ratios (against always-strongest: the model with the highest mean score over the data).

It answers: is a replay figure a property of the router, or of one order of a few hundred
rows and one value of ``k``? Each line prints the mean, min and max realised quality ratio
and cost ratio over the data's order and ``--seeds`` shuffles, and how many of them meet
issue 4's target (quality >= 0.95 at cost <= 0.35). First it prints, per source file and
model, how well the first ``k``'s estimate ranks that file's rows (AUC of the predicted
quality for the recorded outcome).

No timing is measured; figures are counts over recorded scores and costs.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np

from router.neighbours import posterior_sd
from router.predict import Prediction

TARGET_QUALITY, TARGET_COST = 0.95, 0.35


def parse_bar(text: str) -> tuple[str, float, float]:
    """``route_target=0.95:z=1`` -> ``("route_target", 0.95, 1.0)`` (z only for route_target)."""
    try:
        head, _, rest = text.partition(":z=")
        kind, _, value = head.partition("=")
        z = float(rest) if rest else 1.0
        if kind not in ("route_target", "target") or not 0 < float(value) <= 1 or not 0 <= z <= 5:
            raise ValueError
        return kind, float(value), z
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: give route_target=T[:z=Z] or target=T, 0 < T <= 1, 0 <= Z <= 5")


class TablePredictor:
    """Predictions looked up by prompt: ``quality`` and ``sd`` are ``(n, M)`` over ``columns``."""

    def __init__(self, prompts: list[str], quality: np.ndarray, sd: np.ndarray, columns: dict[str, int]):
        self.row = {p: i for i, p in enumerate(prompts)}
        self.quality, self.sd, self.columns = quality, sd, columns

    async def predict(self, text, backends):
        i = self.row[text]
        return Prediction(quality={b.name: round(float(self.quality[i, self.columns[b.name]]), 4) for b in backends},
                          quality_sd={b.name: round(float(self.sd[i, self.columns[b.name]]), 4) for b in backends},
                          source="classifier")


def predictions(prompts: list[str], models: list[str], ks: list[int]) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """``k -> (quality, sd)``, each ``(len(prompts), len(models))``: the shipped heads blended
    with the shipped memory read with ``k`` neighbours (the gateway's own path,
    :meth:`ClassifierPredictor.classify_batch_embed`, run without the memory for the head's
    outputs and embeddings, then :meth:`OutcomeMemory.blend` with ``k`` changed)."""
    from router.classify import load_predictor
    from router.classify.predictor import label_lookup, match_label

    pred = load_predictor(None, scan_windows=0, exclude_exact=True, memory=True, max_batch=64)
    mem, pred.memory = pred.memory, None  # head outputs unblended; the memory is blended below per k
    try:
        heads, embs = [], []
        for i in range(0, len(prompts), 64):
            out, emb = pred.classify_batch_embed(prompts[i:i + 64])
            heads += [[o["quality"][label] for label in mem.labels] for o in out]
            embs.append(emb.numpy())
    finally:
        pred.close()
    head, emb = np.array(heads), np.concatenate(embs)
    lookup = label_lookup(mem.labels)
    cols = [mem.labels.index(match_label(lookup, m)) for m in models]
    out = {}
    for k in ks:
        q, n = replace(mem, k=k).blend(head, emb, exclude_exact=True, with_n=True)
        q, n = np.round(q[:, cols], 4), n[:, cols]
        out[k] = (q, posterior_sd(q, n))
    return out


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


def run(data: Path, split: str | None, seeds: int, ks: list[int], bars: list[tuple[str, float, float]],
        n: int | None = None) -> dict:
    """Every (``k``, bar) line over the data's order and seeds ``1..seeds`` (module docstring);
    ``n``: the first ``n`` rows of each order, as ``mixroute replay --n``."""
    from gateway.commands.replay import prepare
    from router.calibration.simulate import bar_of, data_columns, decide_rows, with_bar
    from router.policy import parse_policy
    from router.policy.quality_bar import QualityBar

    plan, rows = prepare([data], split=split)
    orders = {"data order": rows[:n] if n else rows}
    orders |= {f"seed {s}": prepare([data], split=split, seed=s, n=n)[1] for s in range(1, seeds + 1)}
    models = list(plan.dataset.models)
    prompts = [r.prompt for r in rows]
    index = {p: i for i, p in enumerate(prompts)}
    strong = plan.dataset.strongest()
    score = np.array([[r.scores.get(m, 0.0) or 0.0 for m in models] for r in rows])
    cost = np.array([[r.costs.get(m) if r.costs.get(m) is not None else plan.prices[m] for m in models] for r in rows])
    import yaml

    loaded = parse_policy(yaml.safe_dump(plan.policy()), source="<replay policy>")
    columns = data_columns(loaded, loaded.policy.route("auto"), models)
    preds = predictions(prompts, models, ks)
    g = models.index(strong)
    aucs = within_source_auc(rows, preds[ks[0]][0], score, models)
    for src, per in aucs.items():
        shown = [f"{m.rsplit('/', 1)[-1][:14]} {a:.2f}" for m, a in per.items() if a is not None]
        print(f"within-{src} AUC (k {ks[0]}): " + ", ".join(shown))
    lines = []
    for k in ks:
        table = TablePredictor(prompts, *preds[k], columns)
        for kind, value, z in bars:
            bar = bar_of(kind, value, None, z) if kind == "route_target" else QualityBar(**{kind: value})
            policy = with_bar(loaded, "auto", bar)
            runs = {}
            for name, ordered in orders.items():
                idx = np.array([index[r.prompt] for r in ordered])
                chosen = asyncio.run(decide_rows(policy, "auto", [prompts[i] for i in idx], table, columns))
                runs[name] = (float(score[idx, chosen].sum() / score[idx, g].sum()),
                              float(cost[idx, chosen].sum() / cost[idx, g].sum()))
            qs, cs = np.array([v[0] for v in runs.values()]), np.array([v[1] for v in runs.values()])
            met = int(((qs >= TARGET_QUALITY) & (cs <= TARGET_COST)).sum())
            lines.append({"k": k, "bar": {kind: value, **({"uncertainty_z": z} if kind == "route_target" else {})},
                          "quality_mean": qs.mean(), "quality_min": qs.min(), "quality_max": qs.max(),
                          "cost_mean": cs.mean(), "cost_max": cs.max(), "met": met, "runs": runs})
            print(f"k {k:3d}  {kind} {value}" + (f" z {z:g}" if kind == "route_target" else "") +
                  f"  quality {qs.mean():.3f} [{qs.min():.3f}-{qs.max():.3f}]  cost {cs.mean():.3f} (max {cs.max():.3f})"
                  f"  met {met}/{len(runs)}", flush=True)
    return {"data": str(data), "split": split, "rows": len(orders["data order"]), "strongest": strong, "orders": list(orders),
            "within_source_auc": aucs, "lines": lines}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("data", type=Path)
    parser.add_argument("--split", default="heldout", help="as mixroute replay --split (default heldout)")
    parser.add_argument("--seeds", type=int, default=8, help="shuffled orders besides the data's (seeds 1..N)")
    parser.add_argument("--n", type=int, help="only the first N rows of each order (as mixroute replay --n)")
    parser.add_argument("--k", default="40", help="outcome-memory neighbours, comma-separated (shipped: 40)")
    parser.add_argument("--bars", default="route_target=0.95:z=1", type=lambda s: [parse_bar(b) for b in s.split(",")],
                        help="comma-separated bars, e.g. route_target=0.95:z=1,route_target=0.96:z=1,target=0.95")
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
    from gateway.commands.output import check_output
    from gateway.commands.replay_gateway import ReplayFailed

    import typer

    try:
        check_output(args.json, "--json")  # before the run, not after it; prints its own line
    except typer.Exit as exc:
        return exc.exit_code
    try:
        result = run(args.data, None if args.split == "all" else args.split, args.seeds, ks, args.bars, args.n)
    except ReplayFailed as exc:
        print(f"replay_sensitivity: {exc}", file=sys.stderr)
        return 2
    if args.json:
        try:
            args.json.write_text(json.dumps(result, indent=1, default=float), encoding="utf-8")
        except OSError as exc:
            print(f"replay_sensitivity: --json {args.json}: cannot write: {exc.strerror or exc}", file=sys.stderr)
            return 2
    return 0

if __name__ == "__main__":
    raise SystemExit(main())
