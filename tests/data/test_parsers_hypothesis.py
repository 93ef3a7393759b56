"""Property tests: what is written in a format is what the loader reads back."""

from __future__ import annotations

import csv
import io
import json
import tempfile
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from backends.data import load, normalise_prompt

# Text without NUL and surrogates; CSV writers cannot round-trip a lone "\r".
text = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00\r"), min_size=1, max_size=60)
prompts = text.filter(lambda s: s.strip())
models = st.lists(st.from_regex(r"[A-Za-z][A-Za-z0-9./-]{0,20}", fullmatch=True), min_size=1, max_size=4,
                  unique=True).filter(lambda ms: all(m not in ("prompt",) and not m.endswith("_response") for m in ms))


def _load_text(name: str, content: str):
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / name
        path.write_text(content, encoding="utf-8", newline="")
        return load(path)


@settings(max_examples=40, deadline=None)
@given(models, st.lists(st.tuples(prompts, st.lists(st.booleans(), min_size=4, max_size=4)), min_size=1, max_size=8))
def test_routellm_round_trip(ms, rows):
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(["prompt", *ms])
    for p, bools in rows:
        w.writerow([p, *bools[:len(ms)]])
    ds = _load_text("t.csv", buf.getvalue())
    assert ds.models == ms
    assert [r.prompt for r in ds.rows] == [p for p, _ in rows]
    assert [[r.scores[m] for m in ms] for r in ds.rows] == [[float(b) for b in bools[:len(ms)]] for _, bools in rows]


@settings(max_examples=40, deadline=None)
@given(models, st.lists(st.tuples(st.lists(prompts, min_size=1, max_size=3), text,
                                  st.floats(0, 1), st.floats(0, 10, allow_subnormal=False)), min_size=1, max_size=6))
def test_routerbench_round_trip(ms, rows):
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(["", "sample_id", "prompt", "eval_name", *ms, *(f"{m}|model_response" for m in ms),
                *(f"{m}|total_cost" for m in ms)])
    for i, (parts, answer, score, cost) in enumerate(rows):
        w.writerow([i, f"s{i}", repr(parts), "ev", *[score] * len(ms), *[repr([answer])] * len(ms), *[cost] * len(ms)])
    ds = _load_text("b.csv", buf.getvalue())
    assert ds.format == "routerbench_csv" and ds.models == ms
    for r, (parts, answer, score, cost) in zip(ds.rows, rows, strict=True):
        assert r.prompt == "\n".join(parts)
        assert r.responses == {m: answer for m in ms}
        assert r.scores == {m: score for m in ms} and r.costs == {m: cost for m in ms}


@settings(max_examples=40, deadline=None)
@given(models, st.lists(st.tuples(prompts, st.floats(0, 1)), min_size=1, max_size=6))
def test_routerdc_round_trip(ms, rows):
    items = [{"question": q, "scores": {m: s for m in ms}} for q, s in rows]
    ds = _load_text("d.json", json.dumps(items))
    assert ds.models == ms and [(r.prompt, r.scores) for r in ds.rows] == [(q, {m: s for m in ms}) for q, s in rows]


@given(text)
def test_normalise_is_idempotent_and_whitespace_blind(s):
    n = normalise_prompt(s)
    assert normalise_prompt(n) == n
    assert normalise_prompt("  " + s.replace(" ", "\n\t ") + "\n") == n
