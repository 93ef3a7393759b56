"""The generated replay policy, the per-call prices and the scoring."""

from __future__ import annotations

import re

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from backends.openai_shapes import estimate_tokens
from backends.replay.plan import DEFAULT_PRICE_PER_1M_TOKENS, ReplayPlan, backend_name
from backends.replay.score import Answered, summarize
from router.data import load
from router.policy import parse_policy
from router.policy.models import NAME_PATTERN
from tests.replay.tiny import write_bench, write_routellm


@given(st.text(min_size=1, max_size=300), st.sets(st.text(max_size=5), max_size=5))
def test_backend_names_are_policy_safe_and_distinct(model, taken):
    name = backend_name(model, taken)
    assert re.match(NAME_PATTERN, name) and name not in taken and name != "auto"


def test_backend_name_keeps_safe_model_names():
    assert backend_name("mistralai/Mixtral-8x7B-Instruct-v0.1") == "mistralai/Mixtral-8x7B-Instruct-v0.1"
    assert backend_name("small model") == "small-model"
    assert backend_name("small model", {"small-model"}) == "small-model-2"
    assert backend_name("_x") == "m_x" and backend_name("auto") == "auto-2"


def test_policy_from_recorded_costs_validates(tmp_path):
    path = write_bench(tmp_path)
    ds = load(path)
    plan = ReplayPlan.build(ds, [path])
    assert plan.names == {"big/model-1": "big/model-1", "small-model": "small model"}
    assert plan.price_source == "recorded"
    assert plan.prices["big/model-1"] == pytest.approx((0.004 + 0.003 + 0.005 + 9.0) / 4)
    policy_path = plan.write_policy(tmp_path / "p.yaml")
    loaded = parse_policy(policy_path.read_text(), base_dir=tmp_path)
    b = loaded.policy.backend("small-model")
    assert (b.kind, b.model, b.data) == ("replay", "small model", [path.resolve()])
    assert b.quality == pytest.approx(ds.mean_score("small model")) and b.pricing.per_request == plan.prices["small model"]
    route = loaded.policy.route("auto")
    assert route.backends == ["big/model-1", "small-model"] and route.quality_bar.route_target == 0.95


def test_price_list_when_no_cost_is_recorded(tmp_path):
    path = write_routellm(tmp_path)
    plan = ReplayPlan.build(load(path), [path])
    assert plan.price_source == "price_list"
    tokens = (estimate_tokens("Q one?") + estimate_tokens("Q two?")) / 2
    assert plan.prices["strong"] == pytest.approx(DEFAULT_PRICE_PER_1M_TOKENS * tokens / 1e6)
    doc = yaml.safe_load(yaml.safe_dump(plan.policy()))
    assert {b["name"]: b["quality"] for b in doc["backends"]} == {"weak": 0.5, "strong": 1.0}


def test_summarize(tmp_path):
    ds = load(write_bench(tmp_path))
    r0, r1, r2 = ds.rows[:3]
    prices = {"big/model-1": 1.0, "small model": 2.0}
    answered = [Answered(r0, "small model", "small-model", 0.0001), Answered(r1, "big/model-1", "big/model-1"),
                Answered(r2, "small model", "small-model"), Answered(r2, None, error="HTTP 503: no")]
    report = summarize(answered, "big/model-1", prices)
    assert report["n"] == 3 and report["errors"] == 1
    assert report["quality"] == pytest.approx((0.0 + 1.0 + 1.0) / 3)
    assert report["cost_usd"] == pytest.approx(0.0001 + 0.003 + 0.0003)
    assert report["baseline"] == {"model": "big/model-1", "quality": pytest.approx(2 / 3),
                                  "cost_usd": pytest.approx(0.004 + 0.003 + 0.005)}
    assert report["backend_share"] == {"small model": pytest.approx(2 / 3), "big/model-1": pytest.approx(1 / 3)}
    assert report["gateway_cost_usd"] == pytest.approx(0.0001)
