"""``mixroute``: the gateway's own routing, offline. The quality head's predictions go
through the decision engine itself (:meth:`router.engine.Router.decide`, not a copy),
under an in-memory policy with one ``fake`` backend per model of the data (per-call price
= the model's mean USD per call on the rows) and one route over all of them. The route's
quality bar is swept:

- on two-model data (RouteLLM: APGR, whose axis is the share of calls to the strong
  model), the relative bar ``quality_bar.target``: the engine picks the cheapest backend
  predicted to reach ``target x`` the best predicted quality;
- on more models (RouterBench: AIQ, whose axis is cost), ``quality_bar.willingness_to_pay``
  ``w``: the engine picks the backend maximising ``w x predicted quality - cost``, the
  cost-quality trade-off RouterBench sweeps for its predictive routers and the other learned
  routers here sweep (``w = 1 / lambda`` over :func:`router.eval.sweep.lambda_grid`, plus
  a far cheap and a far dear end). On the classifier's ``calib`` split of RouterBench (shipped
  heads and outcome memory) it gave a higher AIQ than the ``target`` sweep on mbpp and
  winogrande, a lower one on arc_challenge and the same on the three files together;
  docs/EVALUATION.md.

Which targets (:func:`sweep_targets`). A prompt's choice only changes at a target equal to
one of its candidates' predicted ratios ``q_j / max q``, so the targets are placed at
quantiles of those ratios on the test prompts (no labels used), as RouteLLM places its
thresholds at quantiles of a router's scores, and with as many operating points as the
score routers get: ``num_results + 1`` on two-model data (RouteLLM's 11 quantile edges),
as many as the willingness-to-pay grid otherwise (:func:`router.eval.sweep.lambda_grid`).
The sweep always holds a lax end (every candidate clears: the cheapest) and ``1.0``.
A fixed grid (the previous ``0.05 .. 1.0`` list, :data:`TARGETS`) bunches its points
where the heads' ratios are not: on RouteLLM MMLU most of them sent 0% or 100% of the
prompts to GPT-4, which wastes points of the APGR trapezoid.

The gateway's estimate. Without ``--train`` the quality head is read as the gateway reads
it: blended with the outcome memory shipped next to it (:mod:`router.classify.memory`:
100 neighbours, ``task_smoothing`` 0.5; ``MIXROUTE_CLASSIFIER_MEMORY`` and
``MIXROUTE_CLASSIFIER_MEMORY_SMOOTHING`` as the gateway reads them), never reading a memory
row identical to the prompt (the memory may hold the evaluated rows), and no local estimate
is added. On the classifier's held-out rows (``--holdout``, no ``--train``) this decided
better than the local estimate below (figures in docs/BENCHMARKS.md), and it is what ships,
so the evaluation measures it.

Local estimate (:mod:`router.neighbours`), with ``--train`` or without a shipped memory
(or with ``MIXROUTE_CLASSIFIER_MEMORY=off``). When prompt embeddings are at hand (the run's
``Context.embed``, else the cached MiniLM embedder for the real heads) the head's quality
is combined with the recorded scores of the prompt's :data:`router.neighbours.K` nearest
outcome rows (``--train`` rows, or the other folds of a cross-fit as the learned routers
do): ``(kappa x head + sum of neighbour scores) / (kappa + k)``, the head counting as
``kappa`` neighbours. Options ``neighbours`` (k; 0: heads only) and ``kappa``. The engine
then decides on that quality as it does on the head's.

The heads run once per prompt in batches (``classify_batch``); the engine then decides
each (prompt, target) from those outputs. Backends the quality head does not know get
the unknown prior (0.5) and are listed in ``extra["quality_prior_for"]``.

Bar compliance (``extra["compliance"]``): per target, the achieved mean quality as a
share of the strongest model's, and whether it reached the target.

Heads: with ``Context.train`` (``--train``) the ``quality`` (and ``output_length``) heads
are fit on those rows first (:func:`router.eval.heads.fit_heads`); otherwise the shipped
ones (or ``adapters``) are loaded, only the heads read here (:data:`HEADS`).

Options (``Context.options``): ``adapters`` (a heads folder; default the shipped
``adapters/``; without ``--train``), ``predictor`` (an object with ``classify_batch`` and
``head_model``, e.g. a loaded ``ClassifierPredictor``; wins over both), ``train_epochs``
(epochs of the heads fit on ``--train``; default 3).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import numpy as np
import yaml

from router.classify.errors import INSTALL_CLASSIFIER
from router.eval.data import EvalData
from router.eval.errors import RouterUnavailable
from router.eval.routers import register
from router.eval.routers.base import Context, EvalRouter, RouterRun
from router.eval.sweep import lambda_grid

#: A fixed grid of relative bars (share of the best predicted quality); used when the
#: predictions give no spread (see :func:`sweep_targets`).
TARGETS = np.array([0.05, 0.2, 0.4, 0.5, 0.6, 0.7, 0.75, 0.8, 0.85, 0.88, 0.9, 0.92, 0.94, 0.95, 0.96, 0.97, 0.98,
                    0.99, 1.0])
BATCH = 64
ROUTE = "auto"
#: The heads read here (others do not change the decisions in evaluation).
HEADS = ("quality", "output_length")


class _Outputs:
    """A :class:`router.predict.Predictor` serving precomputed head outputs: the caller
    sets :attr:`current` to the prompt's outputs before each ``decide``."""

    def __init__(self, heads: Any):
        self.heads = heads
        self.current: dict[str, Any] = {}
        self.prior_for: set[str] = set()

    async def predict(self, text: str, backends: Sequence[Any]):
        from router.predict import DEFAULT_OUTPUT_TOKENS, UNKNOWN_QUALITY, Prediction

        head_quality = self.current.get("quality", {})
        local = self.current.get("local_quality")
        quality = {}
        for b in backends:
            label = self.heads.head_model(b)
            if local is not None and b.model in local:
                quality[b.name] = float(local[b.model])
            elif label is not None and label in head_quality:
                quality[b.name] = float(head_quality[label])
            else:
                quality[b.name] = UNKNOWN_QUALITY
                self.prior_for.add(b.model)
        tokens = self.current.get("output_length")
        return Prediction(quality=quality, source="classifier",
                          output_tokens=max(1, int(round(tokens))) if tokens is not None else DEFAULT_OUTPUT_TOKENS)


def sweep_targets(pred: np.ndarray, count: int) -> np.ndarray:
    """``count`` (or fewer, when ratios repeat) strictly increasing relative bars in (0, 1].

    Args:
        pred: ``(n, m)`` predicted quality per prompt and candidate.
        count: operating points wanted (including the lax end and ``1.0``).

    The ratios ``r_ij = q_ij / max_j q_ij`` below 1 are where choices change; the targets
    are their quantiles at ``count - 1`` evenly spaced levels (the lowest is the smallest
    ratio: every candidate clears), plus ``1.0``. No spread: :data:`TARGETS`.
    """
    pred = np.asarray(pred, float)
    best = pred.max(axis=1, keepdims=True)
    ratio = np.divide(pred, best, out=np.ones_like(pred), where=best > 0)
    r = ratio[ratio < 1.0 - 1e-9]
    if r.size == 0 or count < 2:
        return TARGETS.copy()
    qs = np.quantile(r, np.linspace(0.0, 1.0, count - 1))
    targets = np.unique(np.round(np.clip(np.append(qs, 1.0), 1e-3, 1.0), 6))
    return targets


def sweep_willingness(test: EvalData) -> np.ndarray:
    """Increasing willingness-to-pay values (USD per unit of quality) for multi-model data:
    ``1 / lambda`` of :func:`router.eval.sweep.lambda_grid`'s finite positive values, plus
    ends a million times below and above them (about always the cheapest / the best)."""
    lam = lambda_grid(test.mean_scores, test.mean_costs)
    w = 1.0 / lam[np.isfinite(lam) & (lam > 0)]
    if w.size == 0:
        return np.array([1.0])
    return np.unique(np.concatenate(([w.min() * 1e-6], w, [w.max() * 1e6])))


def policy_text(test: EvalData, names: dict[str, str], target: float, param: str = "target") -> str:
    """The policy YAML for one bar (``quality_bar: {param: target}``): a ``fake`` backend per
    model, one route."""
    prices = test.mean_costs
    backends = [{"name": name, "kind": "fake", "model": model,
                 "pricing": {"per_request": float(prices[test.models.index(model)])}}
                for name, model in names.items()]
    route = {"name": ROUTE, "backends": list(names), "quality_bar": {param: float(target)}}
    return yaml.safe_dump({"version": 1, "default_route": ROUTE, "backends": backends, "routes": [route]},
                          sort_keys=False)


@register
class MixrouteRouter(EvalRouter):
    name = "mixroute"
    learned = True
    description = "quality head + decision engine"

    def __init__(self) -> None:
        # Per evaluation run (one instance per run): loaded heads by source, and their
        # outputs per prompt, so a prompt in two test datasets (a file and its folder) runs once.
        self._loaded: dict[str, tuple[Any, str]] = {}
        self._outputs: dict[tuple[str, str], dict[str, Any]] = {}

    def _heads(self, ctx: Context) -> tuple[Any, str, str]:
        """``(predictor, source id, how it was fit)``: the ``predictor`` option, heads fitted on
        ``ctx.train`` (:func:`router.eval.heads.fit_heads`), or the shipped / ``adapters`` heads."""
        if ctx.options.get("predictor") is not None:
            return ctx.options["predictor"], f"option-{id(ctx.options['predictor'])}", "given heads"
        if ctx.train is not None:
            from router.eval.heads import fit_key

            source = "fit-" + fit_key(ctx.train, ctx.seed)
        else:
            source = f"dir-{ctx.options.get('adapters')}"
        if source not in self._loaded:
            self._loaded[source] = self._load(ctx)
        heads, fit = self._loaded[source]
        return heads, source, fit

    def _load(self, ctx: Context) -> tuple[Any, str]:
        try:
            from router.classify import load_predictor
        except ImportError as exc:
            raise RouterUnavailable(f"the classifier package is unavailable: {exc}") from exc
        try:
            from transformers.utils import logging as hf_logging

            hf_logging.disable_progress_bar()  # the rich progress bars are ours
        except ImportError:
            pass
        if ctx.train is not None:
            from router.eval.heads import fit_heads

            try:
                heads = fit_heads(ctx.train, seed=ctx.seed, epochs=int(ctx.options.get("train_epochs") or 3),
                                  progress=lambda label, done, total: ctx.tick(f"mixroute fit {label}", done, total))
            except ImportError as exc:
                raise RouterUnavailable(f"cannot fit heads on --train rows: {exc.name} is not installed: "
                                        f"{INSTALL_CLASSIFIER}") from exc
            except Exception as exc:  # ClassifierUnavailable, AdapterError, too few rows: reported
                raise RouterUnavailable(f"cannot fit heads on --train rows: {exc}") from exc
            heads.close()  # classify_batch is called directly: no micro-batching thread needed
            splits = heads.fitted.get("quality", {})
            return heads, (f"heads fit on --train ({ctx.train.n} rows: {splits.get('train', 0)} train, "
                           f"{splits.get('calib', 0)} calib; {'+'.join(heads.fitted)})")
        adapters = ctx.options.get("adapters")
        try:
            from router.classify import default_adapters_dir
            from router.classify.heads import discover
            from router.classify.memory import settings_from_env

            folder = adapters or default_adapters_dir()
            present = {p.name for p in discover(folder)} if folder.is_dir() else set()
            wanted = [h for h in HEADS if h in present] or None  # None: let the loader say what is wrong
            # Benchmark rows: no long-prompt scanning for pii/injection (it would multiply the
            # encoder work on few-shot prompts and the datasets carry neither); only the heads
            # read here are loaded.
            # The gateway's own estimate: the quality head blended with the outcome memory
            # shipped next to it (MIXROUTE_CLASSIFIER_MEMORY / _SMOOTHING as the gateway reads
            # them), never reading a row identical to the prompt (the memory may hold the
            # evaluated rows). Without a memory file (or with MIXROUTE_CLASSIFIER_MEMORY=off)
            # this router makes its local estimate from the evaluated rows instead (below).
            memory, smoothing = settings_from_env()
            heads = load_predictor(adapters, heads=wanted, scan_chars=0, memory=memory, exclude_exact=True,
                                   embed=True, memory_smoothing=smoothing)
        except Exception as exc:  # ClassifierUnavailable, AdapterError, a bad setting: reported, others still run
            raise RouterUnavailable(f"no usable heads: {exc}") from exc
        heads.close()
        fit = "shipped heads" if adapters is None else f"heads {adapters}"
        mem = getattr(heads, "memory", None)
        if mem is not None:
            fit += (f" + outcome memory ({mem.n} rows, {mem.k}-NN, kappa {mem.kappa:g}, task_smoothing "
                    f"{mem.smoothing_in_force:g}, exclude-exact)")
        return heads, fit

    def prefill(self, prompts: list[str], ctx: Context) -> None:
        """Run the shipped heads over ``prompts`` now (the runner calls this once with every
        test prompt of the run, before any router): their pass also yields the MiniLM
        embeddings, which go into the embedding cache, so ``knn``/``mlp``/``mf`` and the
        local estimate find them there instead of running the encoder a second time."""
        heads, source, _ = self._heads(ctx)
        self._classify(heads, source, prompts, ctx)

    def _classify(self, heads: Any, source: str, prompts: list[str], ctx: Context) -> list[dict[str, Any]]:
        """Head outputs per prompt; each distinct prompt runs once per source, in batches of
        similar length (sorted by characters, a proxy of tokens) to pad little. Embeddings
        the same pass computes are stored in the eval embedding cache (:func:`_embedding_store`)."""
        todo = sorted({p for p in prompts if (source, p) not in self._outputs}, key=len)
        store = _embedding_store(heads) if todo else None
        vectors: dict[str, np.ndarray] = {}
        for s in range(0, len(todo), BATCH):
            chunk = todo[s:s + BATCH]
            if hasattr(heads, "classify_batch_embed"):
                outs, emb = heads.classify_batch_embed(chunk)
            else:
                outs, emb = heads.classify_batch(chunk), None
            self._outputs.update(((source, p), o) for p, o in zip(chunk, outs))
            if store is not None and emb is not None:
                vectors.update((store.key(p), e) for p, e in zip(chunk, emb.numpy().astype(np.float16)))
            ctx.tick("mixroute heads", min(s + BATCH, len(todo)), len(todo))
        if store is not None:
            store.put(vectors)  # one shard
        return [self._outputs[(source, p)] for p in prompts]

    def run(self, test: EvalData, ctx: Context) -> RouterRun:
        from backends.replay.plan import backend_name
        from router.engine import Router, RoutingRequest
        from router.policy import parse_policy

        heads, source, fit = self._heads(ctx)
        outputs = self._classify(heads, source, test.prompts, ctx)
        names: dict[str, str] = {}
        for m in test.models:
            names[backend_name(m, set(names))] = m
        index = {name: test.models.index(m) for name, m in names.items()}
        predictor = _Outputs(heads)
        if all(heads.head_model(b) is None for b in parse_policy(policy_text(test, names, 1.0)).policy.backends):
            raise RouterUnavailable(f"the quality head knows none of the models {test.models}")
        pred = self.predicted(test, outputs, heads)
        # With the shipped outcome memory the outputs already are the gateway's blend: no second one.
        local, local_note = ((None, "") if getattr(heads, "memory", None) is not None
                             else self.local_estimate(test, pred, ctx))
        if local is not None:
            pred = local
            outputs = [{**o, "local_quality": dict(zip(test.models, map(float, row)))} for o, row in zip(outputs, local)]
            fit += f" + {local_note}"
        if test.two_model:
            param, targets = "target", sweep_targets(pred, ctx.num_results + 1)
        else:
            param, targets = "willingness_to_pay", sweep_willingness(test)
        choices = np.empty((len(targets), test.n), dtype=int)

        async def decide_all() -> None:
            for k, target in enumerate(targets):
                router = Router(parse_policy(policy_text(test, names, target, param)), predictor)
                for i, prompt in enumerate(test.prompts):
                    predictor.current = outputs[i]
                    body = {"model": ROUTE, "messages": [{"role": "user", "content": prompt}]}
                    decision = await router.decide(RoutingRequest(endpoint="chat", body=body))
                    choices[k, i] = index[decision.record.chosen]
                ctx.tick("mixroute decide", k + 1, len(targets))

        asyncio.run(decide_all())
        extra: dict[str, Any] = {"quality_prior_for": sorted(predictor.prior_for)}
        if param == "target":
            extra["compliance"] = compliance(test, choices, targets)
        return RouterRun(self.name, choices, targets, f"quality_bar.{param}", fit, extra=extra)

    @staticmethod
    def local_estimate(test: EvalData, head: np.ndarray, ctx: Context) -> tuple[np.ndarray | None, str]:
        """``(n, m)`` the head's quality combined with the nearest outcome rows' scores
        (:func:`router.neighbours.blend`), and how; ``(None, why not)`` without embeddings."""
        from router.eval.routers.base import FOLDS, fold_of
        from router.neighbours import K, KAPPA, blend, nearest

        k = int(ctx.options.get("neighbours", K))
        kappa = float(ctx.options.get("kappa", KAPPA))
        if k <= 0:
            return None, "no local estimate (neighbours=0)"
        embed = ctx.embed
        if embed is None and ctx.options.get("predictor") is None:
            try:
                from router.eval.runner import default_embed

                embed = default_embed(ctx.progress)
            except ImportError as exc:
                return None, f"no local estimate ({exc})"
        if embed is None:
            return None, "no local estimate (no embeddings)"
        x_test = embed(test.prompts)
        if ctx.train is not None:
            nn = nearest(embed(ctx.train.prompts), x_test, k)
            return blend(head, ctx.train.scores[nn], kappa), f"{nn.shape[1]}-NN of --train (kappa {kappa:g})"
        folds = fold_of(test.prompts)
        out = head.copy()
        for f in range(FOLDS):
            held, rest = folds == f, np.flatnonzero(folds != f)
            if held.any() and len(rest):
                nn = nearest(x_test[rest], x_test[held], k)
                out[held] = blend(head[held], test.scores[rest][nn], kappa)
        return out, f"{k}-NN cross-fit {FOLDS} folds (kappa {kappa:g})"

    @staticmethod
    def predicted(test: EvalData, outputs: list[dict[str, Any]], heads: Any) -> np.ndarray:
        """``(n, m)`` the quality the engine will see per prompt and model (the unknown prior
        where the head has no label), to place the sweep's targets."""
        from backends.config import BackendConfig
        from router.predict import UNKNOWN_QUALITY

        labels = [heads.head_model(BackendConfig(name="m", kind="fake", model=m)) for m in test.models]
        return np.array([[float(o.get("quality", {}).get(label, UNKNOWN_QUALITY)) if label else UNKNOWN_QUALITY
                          for label in labels] for o in outputs]).reshape(test.n, len(test.models))


def _embedding_store(heads: Any) -> Any:
    """The eval embedding cache (:class:`router.eval.embed.CachedEmbedder`'s store) that the
    heads' own embeddings may fill: only when the encoder is the bundled MiniLM with the
    embedder's tokenisation and precision, so a cached vector is the one the embedder would
    compute (same tag); else ``None``."""
    encoder = getattr(heads, "encoder", None)
    if encoder is None or not getattr(encoder, "embed", False) or "all-MiniLM-L6-v2" not in encoder.base.name:
        return None
    from router.eval.cache import ShardStore
    from router.eval.embed import MiniLMEmbedder

    dtype = str(encoder.dtype).removeprefix("torch.")
    linear = getattr(encoder, "linear", "default")
    tag = MiniLMEmbedder(max_tokens=encoder.base.max_tokens, head_tokens=encoder.base.head_tokens, dtype=dtype,
                         linear="int8" if linear == "int8" else "default").tag
    return ShardStore("embeddings", tag)


def compliance(test: EvalData, choices: np.ndarray, targets: np.ndarray) -> list[dict[str, float | bool]]:
    """Per relative target: achieved quality / strongest model's quality, and whether it met the target."""
    best = float(test.mean_scores[test.strong])
    rows = np.arange(test.n)
    out = []
    for k, t in enumerate(targets):
        q = float(test.scores[rows, choices[k]].mean())
        ratio = q / best if best > 0 else 1.0
        out.append({"target": float(t), "quality": round(q, 4), "ratio": round(ratio, 4), "met": bool(ratio + 1e-9 >= t)})
    return out
