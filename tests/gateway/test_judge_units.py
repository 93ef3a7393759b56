"""The judge's parts without HTTP: the policy block, the score parser, the rule check, the
sampling and the bounded queue."""

from __future__ import annotations

import asyncio

import pytest

from gateway.judge import MAX_PENDING, Judge, allowed, parse_score
from gateway.observability.metrics import Metrics
from gateway.runtime import PolicyHolder
from router.policy import PolicyError
from router.policy.loader import load_policy
from router.records import DecisionRecord

BASE = """version: 1
backends:
  - {name: local, kind: fake, model: local-model, tags: [self-hosted]}
  - {name: grader, kind: fake, model: grader-model}
routes:
  - {name: auto, backends: [local]}
rules:
  - {name: pii, when_header: x-pii, require_tags: [self-hosted]}
  - {name: acme only, tenants: [acme], allow_backends: [local, grader]}
"""


@pytest.mark.parametrize(("text", "score"), [
    ("SCORE: 0.8", 0.8), ("score=1", 1.0), ("**Score:** .5", 0.5), ("0.25", 0.25), ("  1 ", 1.0),
    ("Reasoning... SCORE: 0.2\nSCORE: 0.9", 0.9), ("SCORE: 0", 0.0),
    ("SCORE: 7", None), ("SCORE: -0.1", None), ("fine", None), ("", None), ("I give it 8/10", None),
])
def test_parse_score(text, score) -> None:
    assert parse_score(text) == score


@pytest.mark.parametrize(("block", "line", "fragment"), [
    ("  judge: {backend: nope, max_usd_per_day: 1}", 11, "learning.judge.backend: unknown backend 'nope'"),
    ("  judge: {backend: grader}", 11, "learning.judge.max_usd_per_day: Field required"),
    ("  judge: {backend: grader, max_usd_per_day: 1, sample: 2}", 11, "learning.judge.sample"),
    ("  judge: {backend: grader, max_usd_per_day: -1}", 11, "learning.judge.max_usd_per_day"),
    ("  judge: {backend: grader, max_usd_per_day: 1, max_tokens: 0}", 11, "learning.judge.max_tokens"),
    ("  judge: {backend: grader, max_usd_per_day: 1, rubric: ''}", 11, "learning.judge.rubric"),
    ("  judge: {backend: grader, max_usd_per_day: 1, model: x}", 11, "learning.judge.model"),
])
def test_a_bad_judge_block_is_a_file_line_error(tmp_path, block, line, fragment) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text(BASE + "learning:\n" + block + "\n")
    with pytest.raises(PolicyError) as err:
        load_policy(path)
    assert f"policy.yaml:{line} {fragment}" in str(err.value)


def test_a_good_judge_block_loads_with_defaults(tmp_path) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text(BASE + "learning:\n  judge: {backend: grader, max_usd_per_day: 5}\n")
    judge = load_policy(path).policy.learning.judge
    assert (judge.backend, judge.sample, judge.max_usd_per_day, judge.max_tokens) == ("grader", 0.01, 5, 64)
    assert judge.rubric


def test_rules_that_keep_a_prompt_from_the_judge(tmp_path) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text(BASE)
    policy = load_policy(path).policy
    assert allowed(policy, "grader", ())
    assert not allowed(policy, "grader", ("pii: require tags ['self-hosted']",))
    assert allowed(policy, "local", ("pii: require tags ['self-hosted']",))
    assert allowed(policy, "grader", ("acme only: allow ['local', 'grader']",))
    assert not allowed(policy, "grader", ("pii (pii=0.90>=0.5)",))  # a pinned request's note


def test_sampling_draws_the_share_and_the_queue_is_bounded(tmp_path) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text(BASE + "learning:\n  judge: {backend: grader, max_usd_per_day: 5, sample: 0.3}\n")

    async def run() -> tuple[int, float]:
        holder = PolicyHolder(path, None)
        await holder.load()
        metrics = Metrics()
        judge = Judge(holder, store=None, metrics=metrics, seed=7)  # no workers: the queue fills
        try:
            record = DecisionRecord(request_id="r", route="auto", policy_hash="h", chosen="local", reason="x",
                                    candidates=[])
            for _ in range(500):
                judge.offer(record, "chat", {"messages": []}, lambda: "an answer")
            queued = judge._queue.qsize()
            judge.offer(record, "chat", {"messages": []}, lambda: "")  # nothing to grade: never queued
            assert judge._queue.qsize() == queued
            for _ in range(3500):
                judge.offer(record, "chat", {"messages": []}, lambda: "an answer")
            dropped = metrics.judge.labels("dropped")._value.get()
            return queued, dropped
        finally:
            await holder.aclose()

    queued, dropped = asyncio.run(run())
    assert 120 <= queued <= 180  # about 30% of 500
    assert abs(dropped - (0.3 * 4000 - MAX_PENDING)) < 100  # about 30% of 4000, less those queued
