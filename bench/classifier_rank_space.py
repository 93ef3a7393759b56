"""Rank-space pooling of the top layer (router/classify/pooled.py) against materialising
every head's token states, side by side in one process.

Run: ``python -m bench.classifier_rank_space [--heads 1,6,8] [--rounds 10] [--threads 2]``

For each head count (the shipped heads cycled to N, as ``mixroute bench classifier``
does; 6 = the shipped set, run with the outcome-memory embed slot as the gateway runs it),
two encoders share the base weights: one with ``rank_space=True`` (the default) and one
with it off. Rounds interleave them (A B, A B, ...): each round times one
batch of 32 ~100-token prompts and five single prompts per encoder. Prints the medians
(prompts/s at batch 32, ms per single prompt) and the ratio on / off.
"""

from __future__ import annotations

import argparse
import copy
import os
import platform
import statistics
import time
from datetime import datetime, timezone

import torch


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--heads", default="1,6,8")
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args(argv)

    from router.classify import load_encoder
    from router.classify.bench import PROMPT
    from router.classify.runtime import MultiHeadEncoder

    torch.set_num_threads(args.threads)
    shipped = load_encoder(None)
    texts = [f"{PROMPT} (variant {i})" for i in range(32)]
    print(f"rank-space pooling A/B: {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC, {platform.processor() or platform.machine()}, "
          f"{args.threads} threads, load average {os.getloadavg()[0]:.1f}, dtype {shipped.dtype}, linear {shipped.linear}")
    print("| heads | rank space on: prompts/s @32 | off: prompts/s @32 | on/off | on: ms/prompt @1 | off: ms/prompt @1 |")
    print("|---|---|---|---|---|---|")
    for n in (int(h) for h in args.heads.split(",")):
        heads = [copy.copy(shipped.heads[i % len(shipped.heads)]) for i in range(n)]
        encs = {}
        for mode in ("on", "off"):
            encs[mode] = MultiHeadEncoder(shipped.base, heads, dtype=str(shipped.dtype).removeprefix("torch."),
                                          linear=shipped.linear, embed=n == 6, prompt_threads=0,
                                          rank_space=mode == "on")
            assert (encs[mode].pooler is not None) == (mode == "on")
            encs[mode].run(texts)
            encs[mode].run([PROMPT])
        batch: dict[str, list[float]] = {m: [] for m in encs}
        single: dict[str, list[float]] = {m: [] for m in encs}
        for _ in range(args.rounds):
            for mode, enc in encs.items():
                t = time.perf_counter()
                enc.run(texts)
                batch[mode].append(time.perf_counter() - t)
                for _ in range(5):
                    t = time.perf_counter()
                    enc.run([PROMPT])
                    single[mode].append(time.perf_counter() - t)
        tput = {m: len(texts) / statistics.median(v) for m, v in batch.items()}
        one = {m: statistics.median(v) * 1000 for m, v in single.items()}
        print(f"| {n} | {tput['on']:.1f} | {tput['off']:.1f} | {tput['on'] / tput['off']:.2f}x | {one['on']:.2f} "
              f"| {one['off']:.2f} |")


if __name__ == "__main__":
    main()
