"""Door parity and session lookup, for :mod:`bench.gateway_overhead`: the same pass-through
gateway measured through each door it serves (OpenAI Chat Completions, Responses, Anthropic
Messages), and Chat Completions again with an ``x-mixroute-session`` header.

A door is probed with one request first; one the app does not serve (404/405) is skipped
with a note, so the bench runs on a tree that lacks a door. Each door runs the closed loop
at concurrency 1 (overhead against direct) and :data:`PARITY_CONNECTIONS` (requests/s).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import httpx

from bench.loadgen import BODY, Result, settle, wrk

PARITY_CONNECTIONS = 16
PROMPT = BODY["messages"][0]["content"]

#: door -> (path, request body); all ask the same model for the same short answer.
DOORS: dict[str, tuple[str, dict]] = {
    "chat": ("/v1/chat/completions", BODY),
    "responses": ("/v1/responses", {"model": "bench", "input": PROMPT, "max_output_tokens": 16}),
    "messages": ("/v1/messages", {"model": "bench", "max_tokens": 16,
                                  "messages": [{"role": "user", "content": PROMPT}]}),
}
#: Headers a door's clients send besides the JSON type and the key.
DOOR_HEADERS: dict[str, dict[str, str]] = {"messages": {"anthropic-version": "2023-06-01", "x-api-key": "sk-bench"}}
SESSION_HEADER = {"x-mixroute-session": "bench-session-1"}


@dataclass
class DoorRun:
    """One door's runs (``runs`` by concurrency), or why it was skipped (``note``)."""

    door: str
    runs: dict[int, Result] = field(default_factory=dict)
    note: str = ""


def probe(url: str, body: dict, headers: dict[str, str]) -> str:
    """``""`` when one request answers 200, else why not (the door is then skipped)."""
    try:
        r = httpx.post(url, json=body, headers={"authorization": "Bearer sk-bench", **headers}, timeout=30)
    except httpx.HTTPError as exc:
        return f"no answer ({exc.__class__.__name__})"
    if r.status_code in (404, 405):
        return f"not served by this app (HTTP {r.status_code})"
    return "" if r.status_code == 200 else f"HTTP {r.status_code}: {r.text[:120]}"


def measure_doors(base: str, duration: int, cpu: int | None) -> list[DoorRun]:
    """Each door of the gateway at ``base`` (``http://host:port``), then ``chat+session``."""
    plan = [(d, path, body, DOOR_HEADERS.get(d, {})) for d, (path, body) in DOORS.items()]
    plan.append(("chat+session", DOORS["chat"][0], DOORS["chat"][1], SESSION_HEADER))
    out = []
    for door, path, body, headers in plan:
        run = DoorRun(door, note=probe(base + path, body, headers))
        if not run.note:
            for c in (1, PARITY_CONNECTIONS):
                settle(base + DOORS["chat"][0])
                run.runs[c] = wrk(base + path, c, duration, cpu=cpu, body=body, headers=headers)
        out.append(run)
    return out


def door_rows(runs: list[DoorRun], direct_c1: Result) -> list[dict]:
    rows = []
    for r in runs:
        row: dict = {"door": r.door, "note": r.note}
        if r.runs:
            c1, cn = r.runs[1], r.runs[PARITY_CONNECTIONS]
            row.update(c1_overhead_p50_ms=c1.p50_ms - direct_c1.p50_ms, c1_overhead_p99_ms=c1.p99_ms - direct_c1.p99_ms,
                       rps=cn.rps, errors=sum(x.errors for x in r.runs.values()),
                       runs={str(c): asdict(x) for c, x in r.runs.items()})
        rows.append(row)
    return rows


def door_targets(rows: list[dict]) -> list[tuple[str, str, bool | None]]:
    """``(target, measured, met)`` for issue 41's door and session targets (``met`` is
    ``None`` where it could not be measured)."""
    by = {r["door"]: r for r in rows if "rps" in r}
    doors = [d for d in DOORS if d in by]
    out: list[tuple[str, str, bool | None]] = []
    if len(doors) >= 2:
        lo, hi = min(by[d]["rps"] for d in doors), max(by[d]["rps"] for d in doors)
        out.append((f"each door within 15% of the others' rps (c={PARITY_CONNECTIONS})",
                    ", ".join(f"{d} {by[d]['rps']:.0f}" for d in doors) + f"; min/max {lo / hi:.2f}", lo >= 0.85 * hi))
    else:
        out.append(("each door within 15% of the others' rps", f"only {doors} served", None))
    skipped = [r["door"] for r in rows if r["note"]]
    if skipped:
        out.append(("every door measured", "skipped: " + ", ".join(f"{r['door']} ({r['note']})" for r in rows
                                                                  if r["note"]), False))
    if "chat" in by and "chat+session" in by:
        delta = by["chat+session"]["c1_overhead_p50_ms"] - by["chat"]["c1_overhead_p50_ms"]
        out.append(("session lookup adds at most 0.3 ms at c=1 (p50)", f"{delta:+.2f} ms", delta <= 0.3))
    return out
