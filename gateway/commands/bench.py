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
    iters: Annotated[int, typer.Option(min=1, help="Single-prompt calls per head count (p50/p99).")] = 100,
    batches: Annotated[int, typer.Option(min=1, help="Batches of --batch prompts for throughput.")] = 5,
    batch: Annotated[int, typer.Option(min=1, help="Prompts per batch for throughput.")] = 32,
    threads: Annotated[int, typer.Option(min=1, help="torch intra-op threads.")] = 2,
    separate: Annotated[bool, typer.Option(help="Also measure N separate full-LoRA encoders.")] = True,
    adapters: Annotated[Optional[Path], typer.Option(help="Head folders to run (default: the shipped adapters/).")] = None,
    dtype: Annotated[str, typer.Option(help="auto (bfloat16 on CPUs with AMX-BF16), float32 or bfloat16.")] = "auto",
    linear: Annotated[str, typer.Option(help="Frozen linear maps, comma-separated to compare side by side: "
                                        "auto (int8 for float32 on CPUs with VNNI, else oneDNN), int8, onednn, "
                                        "default (torch's); both = default,auto.")] = "auto",
    prompt_threads: Annotated[str, typer.Option(help="Threads that run a batch's prompts one at a time (one "
                                                "intra-op thread each), comma-separated to compare side by "
                                                "side: auto (--threads with int8 maps, else 0), or a count; 0 = "
                                                "one batched pass on --threads intra-op threads.")] = "auto",
) -> None:
    """Write [{"heads", "p50_ms", "p99_ms", "throughput_per_s", "variant", "dtype", "linear", "prompt_threads"}]
    for each head count."""
    try:
        from router.classify.bench import run_bench
    except ImportError as exc:
        typer.echo(f"error: the benchmark needs the classifier extra ({exc})", err=True)
        raise typer.Exit(1)
    try:
        counts = [int(x) for x in heads.split(",") if x.strip()]
    except ValueError:
        counts = []
    if not counts or min(counts) < 1:
        typer.echo(f"error: --heads takes head counts of at least 1, comma-separated (e.g. 1,2,4,8); not {heads!r}",
                   err=True)
        raise typer.Exit(2)
    from router.classify.precision import LINEAR_CHOICES

    linears = ("default", "auto") if linear == "both" else tuple(x.strip() for x in linear.split(",") if x.strip())
    bad = [x for x in linears if x not in LINEAR_CHOICES]
    if bad or not linears:
        typer.echo(f"error: --linear takes {', '.join(LINEAR_CHOICES)} or both, comma-separated; not {linear!r}",
                   err=True)
        raise typer.Exit(2)
    try:
        parallel = tuple(None if x.strip() == "auto" else int(x) for x in prompt_threads.split(",") if x.strip())
    except ValueError:
        parallel = ()
    if not parallel or any(p is not None and p < 0 for p in parallel):
        typer.echo(f"error: --prompt-threads takes auto or thread counts of at least 0, comma-separated (e.g. 0,2); "
                   f"not {prompt_threads!r}", err=True)
        raise typer.Exit(2)
    from gateway.commands.output import check_not_input, check_output, folder_inputs, write_output
    from router.classify import default_adapters_dir
    from router.classify.errors import AdapterError

    # checked before the run (minutes): a typo must not lose it, nor --json overwrite a head's file
    check_output(json_out, "--json")
    check_not_input([(json_out, "--json")], folder_inputs(adapters or default_adapters_dir(), "--adapters"))
    try:
        rows = run_bench(counts, iters=iters, batches=batches, batch=batch, threads=threads, separate=separate,
                         adapters=adapters, dtype=dtype, linears=linears, prompt_threads=parallel,
                         log=lambda row: typer.echo(json.dumps(row)))
    except AdapterError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2)
    if json_out is not None:
        write_output(json_out, "--json", lambda p: p.write_text(json.dumps(rows, indent=2) + "\n"))


@app.command("prefix-cache")
def prefix_cache(
    json_out: Annotated[Optional[Path], typer.Option("--json", help="Write the report as JSON here.")] = None,
    tenants: Annotated[int, typer.Option(help="Tenants (one 1-3k-token system prompt each).", min=1)] = 48,
    sessions: Annotated[int, typer.Option(help="Sessions per tenant.", min=1)] = 2,
    turns: Annotated[int, typer.Option(help="Turns per session.", min=1)] = 6,
    concurrency: Annotated[int, typer.Option(help="Sessions in flight at once.", min=1)] = 24,
    replicas: Annotated[int, typer.Option(help="Fake vLLM replicas.", min=1)] = 4,
    capacity_blocks: Annotated[int, typer.Option("--capacity-blocks", help="Prefix-cache capacity of each "
                                                 "replica, in 16-token blocks.", min=1)] = 1100,
    seeds: Annotated[str, typer.Option(help="Comma-separated workload seeds; targets are checked on the "
                                       "medians over seeds.")] = "7,8,9",
    think_s: Annotated[float, typer.Option("--think-s", help="Mean pause between a session's turns, seconds "
                                           "(exponential, seeded); 0: none.")] = 0.1,
) -> None:
    """Prefix-cache hit rate and TTFT over 4 fake vLLM replicas: round-robin, least-loaded and
    mixroute replica choice; rewriting off vs on for prompts with timestamps (bench/prefix_cache.py)."""
    import sys

    root = Path(__file__).resolve().parents[2]
    if (root / "bench" / "prefix_cache.py").exists() and str(root) not in sys.path:
        sys.path.insert(0, str(root))  # bench/ ships with the source tree, not with the package
    try:
        from bench.prefix_cache import main as run_prefix_cache
    except ImportError as exc:
        typer.echo(f"error: the prefix-cache benchmark needs a source checkout ({exc})", err=True)
        raise typer.Exit(1)
    args = ["--tenants", str(tenants), "--sessions", str(sessions), "--turns", str(turns), "--concurrency",
            str(concurrency), "--replicas", str(replicas), "--capacity-blocks", str(capacity_blocks), "--seeds", seeds,
            "--think-s", str(think_s)]
    raise typer.Exit(run_prefix_cache(args + (["--json", str(json_out)] if json_out else [])))
