"""Off-policy estimates of another policy's realised quality and cost, on synthetic
exploration logs whose true value under the evaluated policy is known."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from gateway.cli import app
from router.eval.offpolicy import doubly_robust, ips
from router.eval.whatif import Logged, what_if
from router.policy import parse_policy

# The evaluated policy: "a" (cheap) when its predicted quality clears 0.6, else "b".
POLICY = """
version: 1
backends:
  - {name: a, kind: fake, model: a-model, pricing: {input_per_1m: 0, output_per_1m: 1}}
  - {name: b, kind: fake, model: b-model, pricing: {input_per_1m: 0, output_per_1m: 20}}
routes:
  - {name: auto, backends: [a, b], quality_bar: {min_quality: 0.6}}
"""
PRICE = {"a": 1e-6, "b": 20e-6}  # USD per output token


def exploration_log(n: int, seed: int) -> tuple[list[dict], float, float]:
    """``(rows, true quality, true cost)``: a log of an epsilon-greedy policy whose predicted
    quality of "a" is biased upwards by 0.1, with binary feedback drawn from the true
    qualities and answers of varying length (the cost model assumes 100 tokens); the truths
    are the evaluated policy's expected feedback and cost per request over these contexts."""
    rng = np.random.default_rng(seed)
    rows, q_true, c_true = [], [], []
    for i in range(n):
        qa, qb = rng.uniform(0.3, 0.9), 0.8
        qa_hat = min(qa + 0.1, 1.0)
        tokens = int(rng.integers(20, 300))
        greedy = "a" if qa_hat >= 0.75 else "b"  # the logging policy: another bar, 30% exploration
        p = {greedy: 0.7 + 0.15, ("b" if greedy == "a" else "a"): 0.15}
        chosen = "a" if rng.random() < p["a"] else "b"
        score = float(rng.random() < (qa if chosen == "a" else qb))
        evaluated = "a" if qa_hat >= 0.6 else "b"
        q_true.append(qa if evaluated == "a" else qb)
        c_true.append(PRICE[evaluated] * tokens)
        rows.append({
            "request_id": f"r{i}", "route": "auto", "chosen": chosen, "probability": p[chosen],
            "candidates": [
                {"backend": "a", "model": "a-model", "predicted_quality": qa_hat, "expected_cost_usd": PRICE["a"] * 100,
                 "expected_output_tokens": 100},
                {"backend": "b", "model": "b-model", "predicted_quality": qb, "expected_cost_usd": PRICE["b"] * 100,
                 "expected_output_tokens": 100}],
            "signals": {}, "tokens_in": 10, "tokens_out": tokens, "cost_usd": PRICE[chosen] * tokens,
            "feedback_score_mean": score,
        })
    return rows, float(np.mean(q_true)), float(np.mean(c_true))


def test_the_intervals_cover_the_evaluated_policys_true_value() -> None:
    # One log: a 95% interval misses for about 1 seed in 20 (the next test checks the rate).
    rows, q_true, c_true = exploration_log(3000, seed=1)
    result = what_if(parse_policy(POLICY), [Logged.from_row(r) for r in rows], bootstrap=0)
    est = result.realised
    for key, truth in (("quality_dr", q_true), ("quality_ips", q_true), ("cost_dr", c_true), ("cost_ips", c_true)):
        lo, hi = est[key]["ci"]
        assert lo <= truth <= hi, (key, truth, est[key])
        assert est[key]["n"] == 3000
    # The model-based figure inherits the predictor's bias; the doubly robust one does not.
    assert abs(result.new["quality"] - q_true) > 0.05
    assert abs(est["quality_dr"]["value"] - q_true) < 0.03
    assert est["quality_dr"]["ci"][1] - est["quality_dr"]["ci"][0] < 0.1


def test_doubly_robust_intervals_cover_at_about_their_level() -> None:
    covered = []
    for seed in range(20):
        rows, q_true, _ = exploration_log(300, seed=100 + seed)
        lo, hi = what_if(parse_policy(POLICY), [Logged.from_row(r) for r in rows], bootstrap=0).realised["quality_dr"]["ci"]
        covered.append(lo <= q_true <= hi)
    assert sum(covered) >= 16  # nominal 95%: 19 of 20 expected; 16 or fewer has probability < 2%


def test_estimators_on_hand_computed_rows() -> None:
    reward = np.array([1.0, 0.0, np.nan, 1.0])
    same = np.array([True, False, True, True])
    prob = np.array([0.5, 0.25, 1.0, 1.0])
    assert ips(reward, same, prob).value == pytest.approx((2.0 + 0.0 + 1.0) / 3)
    dr = doubly_robust(reward, same, prob, np.array([0.6, 0.4, 0.0, 0.9]), np.array([0.6, 0.7, 0.0, 0.9]))
    assert dr.value == pytest.approx(((0.6 + 0.4 / 0.5) + 0.4 + (0.9 + 0.1)) / 3)


def test_a_deterministic_log_gives_no_realised_estimate() -> None:
    rows, _, _ = exploration_log(50, seed=1)
    for r in rows:
        r["probability"] = 1.0
    assert what_if(parse_policy(POLICY), [Logged.from_row(r) for r in rows], bootstrap=0).realised == {}


def test_what_if_cli_prints_and_writes_the_estimates(tmp_path) -> None:
    rows, q_true, _ = exploration_log(400, seed=3)
    log = tmp_path / "export.jsonl"
    log.write_text("".join(json.dumps(r) + "\n" for r in rows))
    pol = tmp_path / "new.yaml"
    pol.write_text(POLICY)
    out = tmp_path / "whatif.json"
    res = CliRunner().invoke(app, ["policy", "what-if", str(pol), "--logs", str(log), "--json", str(out)])
    assert res.exit_code == 0, res.output
    assert "Realised quality (feedback score), doubly robust:" in res.output
    assert "Realised cost (USD per request), doubly robust:" in res.output
    doc = json.loads(out.read_text())
    assert doc["realised"]["quality_dr"]["method"] == "doubly_robust"
    assert doc["realised"]["quality_dr"]["n"] == 400


@pytest.mark.parametrize(("name", "content"), [
    ("export.jsonl", b"\x00\x01\xff\xfe garbage"), ("export.jsonl", b'{"request_id": "r1", "chosen": '),
    ("export.jsonl", b"[1, 2, 3]\n"), ("export.parquet", b"PAR1 not a parquet file"), ("export.csv", b"a,b\n1,2\n")])
def test_a_corrupt_log_file_is_a_one_line_error(tmp_path, name: str, content: bytes) -> None:
    log = tmp_path / name
    log.write_bytes(content)
    pol = tmp_path / "new.yaml"
    pol.write_text(POLICY)
    res = CliRunner().invoke(app, ["policy", "what-if", str(pol), "--logs", str(log)])
    assert res.exit_code == 2, res.output
    lines = [x for x in res.output.strip().splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), res.output
    assert "Traceback" not in res.output
