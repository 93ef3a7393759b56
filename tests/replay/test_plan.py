"""The generated replay policy, the per-call prices and the scoring."""

from __future__ import annotations

import re

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from backends.data import load
from backends.fields import NAME_PATTERN
from backends.openai_shapes import estimate_tokens
from backends.replay.plan import DEFAULT_PRICE_PER_1M_TOKENS, ReplayPlan, backend_name
from backends.replay.score import Answered, summarize
from router.policy import parse_policy
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


def _priced_rows(n: int, noise: float = 0.0):
    """A Dataset of ``n`` rows whose recorded costs are 2 USD per 1M prompt tokens plus 8 per 1M answer
    tokens for model ``a`` (times ``1 + noise`` on every other row), and 1e-4 flat for ``b``."""
    from backends.data import Dataset, OutcomeRow

    rows = []
    for i in range(n):
        prompt, answer = "word " * (5 + 7 * i), "tok " * (1 + 13 * (i % 5))
        exact = (2 * estimate_tokens(prompt) + 8 * estimate_tokens(answer)) / 1e6
        rows.append(OutcomeRow(prompt=prompt, scores={"a": 1.0, "b": 0.0}, responses={"a": answer, "b": "x"},
                               costs={"a": exact * (1 + noise * (i % 2)), "b": 1e-4}))
    return Dataset(name="priced", format="routerbench", models=["a", "b"], rows=rows)


def test_token_prices_are_fitted_where_they_explain_the_costs(tmp_path):
    """Model a's costs are exactly token-priced: the fit recovers 2 and 8 USD per 1M tokens and
    the policy prices it per token. Model b costs the same per call whatever the tokens (R^2
    0): it keeps its per-call price."""
    from backends.replay.plan import MIN_FIT_ROWS, token_prices

    ds = _priced_rows(MIN_FIT_ROWS)
    fitted = token_prices(ds)
    assert set(fitted) == {"a"} and fitted["a"] == (pytest.approx(2.0), pytest.approx(8.0))
    plan = ReplayPlan.build(ds, [tmp_path])
    doc = {b["model"]: b["pricing"] for b in plan.policy()["backends"]}
    assert doc == {"a": {"input_per_1m": pytest.approx(2.0), "output_per_1m": pytest.approx(8.0)},
                   "b": {"per_request": pytest.approx(1e-4)}}
    assert token_prices(_priced_rows(MIN_FIT_ROWS - 1)) == {}  # too few calls to fit
    assert token_prices(_priced_rows(MIN_FIT_ROWS, noise=3.0)) == {}  # costs the tokens do not explain


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
