"""Writing evaluation results: JSON rows, a Markdown report and a matplotlib plot.

JSON (``--json``): a list with one object per (dataset, router), see
:meth:`router.eval.summary.Result.row`. Markdown (``--report``): per dataset, what was
loaded, then a table of the metrics with 95% bootstrap intervals. Plot (``--plot``):
one panel per dataset, cost (USD per call, log scale when the range spans over 20x)
against quality, each router's points and its NDCH; a dataset whose models all cost the
same gets a bar per router instead.
"""

from __future__ import annotations

import json
import platform
import time
from pathlib import Path
from typing import Any

import numpy as np

from router.eval.data import dropped_text
from router.eval.metrics import ndch
from router.eval.runner import DatasetReport

COLUMNS = ("aiq", "aiq_maxcost", "apgr", "cpt50", "cpt80", "quality", "cost")
_PERCENT = {"cpt50", "cpt80"}


def rows(reports: list[DatasetReport]) -> list[dict[str, Any]]:
    """The JSON rows of every result."""
    return [r.row() for rep in reports for r in rep.results]


def write_json(reports: list[DatasetReport], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(rows(reports), indent=1) + "\n", encoding="utf-8")


def fmt(key: str, value: float | None) -> str:
    """A metric as shown in tables: CPT as a percentage, cost in USD, others to 4 places."""
    if value is None:
        return "-"
    if key in _PERCENT:
        return f"{100 * value:.1f}%"
    if key == "cost":
        return f"${value:.2e}"
    return f"{value:.4f}"


def describe(rep: DatasetReport) -> str:
    """One line on what a dataset is: rows, models, price source, drops, train rows."""
    d = rep.data
    dropped = dropped_text(d.dropped) or "none"
    line = (f"{d.n} rows, {len(d.models)} models, costs {d.price_source}, dropped: {dropped}")
    return line + (f"; {rep.train_note}" if rep.train_note else "")


def markdown(reports: list[DatasetReport], command: str = "") -> str:
    """The Markdown report."""
    out = ["# mixroute eval", ""]
    if command:
        out += ["```", command, "```", ""]
    out += [f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {platform.machine()} "
            f"{platform.system()}, Python {platform.python_version()}.", ""]
    for rep in reports:
        out += [f"## {rep.data.name}", "", describe(rep), "",
                "| router | " + " | ".join(COLUMNS) + " | fit |",
                "|---" * (len(COLUMNS) + 2) + "|"]
        for r in rep.results:
            cells = []
            for k in COLUMNS:
                v = fmt(k, r.values.get(k))
                if k in r.ci and r.values.get(k) is not None:
                    lo, hi = r.ci[k]
                    v += f" [{fmt(k, lo)}, {fmt(k, hi)}]"
                cells.append(v)
            fit = r.note or r.fit
            out.append(f"| {r.router} | " + " | ".join(cells) + f" | {fit} |")
        out.append("")
    return "\n".join(out)


def write_markdown(reports: list[DatasetReport], path: Path, command: str = "") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(markdown(reports, command), encoding="utf-8")


def _dense(x: np.ndarray, y: np.ndarray, per_segment: int = 40) -> tuple[np.ndarray, np.ndarray]:
    """The hull's segments sampled densely, so a linear chord shows as such on a log axis."""
    if len(x) < 2:
        return x, y
    xs = np.concatenate([np.linspace(a, b, per_segment, endpoint=False) for a, b in zip(x[:-1], x[1:])] + [x[-1:]])
    return xs, np.interp(xs, x, y)


def _bars(ax, rep: DatasetReport) -> None:
    """All models priced alike: no cost axis, so each router's best quality as a bar."""
    names = [r.router for r in rep.results if r.points]
    best = [max(p["quality"] for p in r.points) for r in rep.results if r.points]
    ax.barh(names, best, color="tab:gray")
    ax.set_xlabel("quality (mean score); every model has the same price")
    ax.invert_yaxis()


def plot(reports: list[DatasetReport], path: Path) -> None:
    """Draw the cost-quality curves (see the module docstring).

    Raises:
        ImportError: matplotlib is not installed (``pip install 'mixroute[eval]'``).
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = len(reports)
    cols = min(n, 3)
    nrows = (n + cols - 1) // cols
    fig, axes = plt.subplots(nrows, cols, figsize=(5.5 * cols, 4.2 * nrows), squeeze=False)
    for ax, rep in zip(axes.flat, reports):
        costs = rep.data.mean_costs
        ax.set_title(f"{rep.data.name} (n={rep.data.n})")
        if np.ptp(costs) <= 0:
            _bars(ax, rep)
            continue
        for r in rep.results:
            if not r.points:
                continue
            c = [p["cost"] for p in r.points]
            q = [p["quality"] for p in r.points]
            hx, hy = _dense(*ndch(c, q))
            line, = ax.plot(hx, hy, "-" if len(hx) > 1 else "o", lw=1.5, label=r.router)
            ax.plot(c, q, ".", ms=4, color=line.get_color(), alpha=0.6)
        if costs.min() > 0 and costs.max() / costs.min() > 20:
            ax.set_xscale("log")
        ax.set_xlabel("cost (USD per call)")
        ax.set_ylabel("quality (mean score)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    for ax in list(axes.flat)[n:]:
        ax.axis("off")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
