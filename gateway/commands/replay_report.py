"""What ``mixroute replay`` shows and writes: progress lines on standard error while the
prompts are sent (:class:`Progress`), the JSON report (:func:`build_report`) and its summary
tables (:func:`print_summary`)."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import typer

if TYPE_CHECKING:
    from backends.replay.plan import ReplayPlan
    from backends.replay.score import Answered


class Progress:
    """How far the run is, on standard error (never standard output, which may hold the
    ``--json -`` report): called with the number of prompts answered so far, it prints a
    line each time another tenth of ``total`` is reached, e.g. ``replay: 441/2205 prompts
    (20%), 0:18 elapsed, ~1:12 left``: at most :attr:`STEPS` lines per run (fewer below
    that many prompts), whatever the run's length, so a CI log stays short.

    Args:
        total: prompts the run sends.
        echo: where a line goes (default: standard error).
        clock: seconds, monotonic; the elapsed time counts from construction.
    """

    STEPS = 10

    def __init__(self, total: int, *, echo: Callable[[str], None] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.total = total
        # The k-th line once ceil(k/STEPS of total) prompts are answered.
        self._marks = {-(-total * k // self.STEPS) for k in range(1, self.STEPS + 1)} if total > 0 else set()
        self._echo = echo or (lambda line: typer.echo(line, err=True))
        self._clock = clock
        self._start = clock()

    def __call__(self, done: int) -> None:
        if done not in self._marks:
            return
        self._marks.discard(done)  # once per mark
        elapsed = self._clock() - self._start
        line = f"replay: {done}/{self.total} prompts ({done / self.total:.0%}), {_duration(elapsed)} elapsed"
        if done < self.total:
            line += f", ~{_duration(elapsed / done * (self.total - done))} left"
        self._echo(line)


def _duration(seconds: float) -> str:
    """``seconds`` as ``M:SS``, or ``H:MM:SS`` from an hour on."""
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def build_report(plan: "ReplayPlan", answered: list["Answered"], *, route: str = "auto",
                 gateway: str | None = None) -> dict:
    """The JSON report (:func:`backends.replay.score.summarize` plus run details)."""
    from backends.replay.score import call_cost, summarize

    report = summarize(answered, plan.dataset.strongest(), plan.prices)
    position = {id(r): i for i, r in enumerate(plan.dataset.rows)}
    base = report["baseline"]
    report.update({
        # Routed / always-baseline on the same prompts (None when the baseline's is 0).
        "quality_ratio": report["quality"] / base["quality"] if base["quality"] else None,
        "cost_ratio": report["cost_usd"] / base["cost_usd"] if base["cost_usd"] else None,
        "data": [str(p) for p in plan.data],
        "route": route,
        "gateway": gateway or "local",
        "price_source": plan.price_source,
        "price_per_call_usd": plan.prices,
        # Answers whose rating failed (``--feedback``): the gateway learned without them.
        "feedback_errors": sum(a.feedback_error is not None for a in answered),
        # One entry per request, so every figure above can be recomputed from the data:
        # ``row`` indexes the rows of backends.data.load(data) (concatenated in --data order).
        # ``source``: the row's file (its stem), to follow the order rows were sent in.
        "requests": [{"row": position[id(a.row)], "source": a.row.source, "backend": a.backend, "model": a.model,
                      "score": a.row.scores[a.model] if a.model else None,
                      "cost_usd": call_cost(a.row, a.model, plan.prices) if a.model else None,
                      "error": a.error} for a in answered],
    })
    return report


def report_bytes(report: dict) -> bytes:
    """The report as indented JSON, with a final newline."""
    import orjson

    return orjson.dumps(report, option=orjson.OPT_INDENT_2) + b"\n"


def print_summary(report: dict, json_out: Path | str, stderr: bool = False) -> None:
    """Print the report as rich tables (to standard error with ``stderr``)."""
    from rich.console import Console
    from rich.table import Table

    base = report["baseline"]
    table = Table(title=f"mixroute replay: {report['n']} prompts, route {report['route']!r}")
    for col in ("", "quality", "quality vs baseline", "cost (USD)", "cost vs baseline"):
        table.add_column(col, justify="left" if not col else "right")
    q_ratio = "-" if report["quality_ratio"] is None else f"{report['quality_ratio']:.1%}"
    c_ratio = "-" if report["cost_ratio"] is None else f"{report['cost_ratio']:.1%}"
    table.add_row("routed", f"{report['quality']:.4f}", q_ratio, f"{report['cost_usd']:.6f}", c_ratio)
    table.add_row(f"baseline ({base['model']})", f"{base['quality']:.4f}", "100.0%", f"{base['cost_usd']:.6f}", "100.0%")
    shares = Table(title="backend share")
    shares.add_column("model")
    shares.add_column("share", justify="right")
    for model, share in report["backend_share"].items():
        shares.add_row(model, f"{share:.1%}")
    console = Console(stderr=stderr)
    console.print(table)
    console.print(shares)
    console.print(f"costs: {report['price_source']}; errors: {report['errors']}; report: {json_out}")
