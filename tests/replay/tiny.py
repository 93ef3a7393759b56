"""Tiny outcome-data files for the replay tests (written to a tmp folder)."""

from __future__ import annotations

import csv
import io
from pathlib import Path

BENCH_MODELS = ["big/model-1", "small model"]
# prompt parts, scores, responses, costs (USD)
BENCH_ROWS = [
    (["What is 2+2?", "A) 3\nB) 4"], (1.0, 0.0), ("B", "A"), (0.004, 0.0001)),
    (["Capital of France?"], (1.0, 1.0), ("Paris", "Paris."), (0.003, 0.0002)),
    (["Hard one"], (0.0, 1.0), ("no idea", "42"), (0.005, 0.0003)),
    (["Capital of France?"], (0.0, 0.0), ("dup", "dup"), (9.0, 9.0)),  # duplicate prompt: first row wins
]


def write_bench(folder: Path, name: str = "bench.csv") -> Path:
    """A RouterBench-style wide CSV with responses and costs."""
    ms = BENCH_MODELS
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(["", "sample_id", "prompt", "eval_name", *ms, *(f"{m}|model_response" for m in ms),
                *(f"{m}|total_cost" for m in ms), "oracle_model_to_route_to"])
    for i, (parts, scores, answers, costs) in enumerate(BENCH_ROWS):
        w.writerow([i, f"s.{i}", repr(parts), "tiny", *scores, *(repr([a]) for a in answers), *costs, ms[0]])
    path = folder / name
    path.write_text(buf.getvalue(), encoding="utf-8")
    return path


def write_routellm(folder: Path) -> Path:
    """A RouteLLM-style CSV without responses or costs."""
    path = folder / "mmlu_tiny.csv"
    path.write_text("prompt,weak,strong\nQ one?,False,True\nQ two?,True,True\n", encoding="utf-8")
    return path
