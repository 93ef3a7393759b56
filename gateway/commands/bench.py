"""``mixroute bench classifier``: latency and throughput of the shared-trunk heads."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Optional

import typer

app = typer.Typer(help="Benchmarks.", no_args_is_help=True)


@app.command("classifier")
def classifier(
    heads: Annotated[str, typer.Option(help="Head counts to measure, comma-separated.")] = "1,2,4,8",
    json_out: Annotated[Optional[Path], typer.Option("--json", help="Write the rows as JSON here.")] = None,
    iters: Annotated[int, typer.Option(help="Single-prompt calls per head count (p50/p99).")] = 100,
    batches: Annotated[int, typer.Option(help="Batches of --batch prompts for throughput.")] = 5,
    batch: Annotated[int, typer.Option(help="Prompts per batch for throughput.")] = 32,
    threads: Annotated[int, typer.Option(help="torch intra-op threads.")] = 2,
    separate: Annotated[bool, typer.Option(help="Also measure N separate full-LoRA encoders.")] = True,
) -> None:
    """Write [{"heads", "p50_ms", "p99_ms", "throughput_per_s", "variant"}] for each head count."""
    try:
        from router.classify.bench import run_bench
    except ImportError as exc:
        typer.echo(f"error: the benchmark needs the classifier extra ({exc})", err=True)
        raise typer.Exit(1)
    counts = [int(x) for x in heads.split(",") if x.strip()]
    rows = run_bench(counts, iters=iters, batches=batches, batch=batch, threads=threads, separate=separate,
                     log=lambda row: typer.echo(json.dumps(row)))
    if json_out is not None:
        json_out.parent.mkdir(parents=True, exist_ok=True)
        json_out.write_text(json.dumps(rows, indent=2) + "\n")
