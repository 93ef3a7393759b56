"""What reading whole prompts costs the classifier: per-request CPU time (all threads of
this process, ``time.process_time``) and wall time of ``classify_batch`` on one prompt,
short and long, with scanning off (the main window only), cold (no window cached) and with
a warm prefix (the previous turn of the same session cached: the prompt is that turn plus
a new 300-character user message, ``chars`` in all). torch runs ``--threads`` intra-op
threads (default 1: on a shared machine, idle threads spinning for work inflate CPU time).

Run: ``python -m bench.scan_cost [--chars 300,25000,100000] [--repeats 3] [--threads 1] [--json OUT]``
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import orjson
import torch

from router.classify import load_predictor


def english(chars: int, seed: int = 0) -> str:
    """Deterministic English-like text of ``chars`` characters (varied numbers, so no two
    scan windows repeat and nothing is cached by accident)."""
    out, n, i = [], 0, seed * 100_000
    while n < chars:
        s = (f"Item {i}: the shipment of {3 * i + 7} crates left the warehouse on day {i % 28 + 1}, "
             f"and the invoice lists {5 * i + 2} units at {i % 90 + 10} dollars each. ")
        out.append(s)
        n += len(s)
        i += 1
    return "".join(out)[:chars]


def _timed(predictor, text: str) -> tuple[float, float, dict]:
    c0, w0 = time.process_time(), time.perf_counter()
    (out,) = predictor.classify_batch([text])
    return (time.process_time() - c0) * 1e3, (time.perf_counter() - w0) * 1e3, out


def measure(sizes: list[int], repeats: int) -> list[dict]:
    """Rows of ``{chars, mode, cpu_ms, wall_ms, windows_run, scan_coverage}`` (medians)."""
    scanning = load_predictor(memory=True)
    blind = load_predictor(scan_chars=0, memory=True)
    cache = scanning.encoder.scan_cache
    rows = []
    try:
        for chars in sizes:
            for mode in ("scan-off", "cold", "warm-prefix"):
                cpu, wall, runs, cov = [], [], [], 0.0
                for r in range(repeats):
                    turn = english(chars, seed=r + 1)  # a new prefix per repeat: cold really is cold
                    if mode == "warm-prefix":
                        turn = turn[:max(0, chars - 301)]
                        scanning.classify_batch([turn])  # the session's previous turn
                        turn += " " + english(300, seed=99 + r)
                    before = cache.misses
                    c, w, out = _timed(blind if mode == "scan-off" else scanning, turn)
                    cpu.append(c)
                    wall.append(w)
                    runs.append(0 if mode == "scan-off" else cache.misses - before)
                    cov = out["scan_coverage"]
                rows.append({"chars": chars, "mode": mode, "cpu_ms": round(statistics.median(cpu), 1),
                             "wall_ms": round(statistics.median(wall), 1),
                             "windows_run": int(statistics.median(runs)), "scan_coverage": cov})
    finally:
        scanning.close()
        blind.close()
    return rows


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--chars", default="300,25000,100000", help="prompt sizes, comma-separated")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    torch.set_num_threads(max(1, args.threads))
    rows = measure([int(c) for c in args.chars.split(",")], max(1, args.repeats))
    print(f"{'chars':>8} {'mode':<12} {'cpu_ms':>9} {'wall_ms':>9} {'windows_run':>12} {'coverage':>9}")
    for r in rows:
        print(f"{r['chars']:>8} {r['mode']:<12} {r['cpu_ms']:>9} {r['wall_ms']:>9} {r['windows_run']:>12} "
              f"{r['scan_coverage']:>9}")
    if args.json:
        args.json.write_bytes(orjson.dumps(rows, option=orjson.OPT_INDENT_2))


if __name__ == "__main__":
    main()
