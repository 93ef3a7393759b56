"""Hypothesis: the journal round-trips any record, and the upsert's result does not
depend on the order versions of a request arrive in (what makes replay safe)."""

from __future__ import annotations

from datetime import timedelta

from hypothesis import given, settings
from hypothesis import strategies as st
from sqlalchemy import create_engine, select

from gateway.store.journal import decode, encode
from gateway.store.models import Base, Decision
from gateway.store.upsert import write_items
from tests.store.records import T0, decision, outcome

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-2**53, 2**53) | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)


@settings(max_examples=50)
@given(rid=st.text(min_size=1, max_size=40), signals=st.dictionaries(st.text(max_size=10), json_values, max_size=5),
       seconds=st.floats(-1e8, 1e8), tenant=st.none() | st.text(max_size=20))
def test_journal_round_trips_decisions(rid: str, signals: dict, seconds: float, tenant: str | None) -> None:
    row = decision(rid, signals=signals, tenant=tenant, at=seconds).as_dict()
    assert decode(encode(("decisions", row))) == ("decisions", row)


@settings(max_examples=50)
@given(tokens=st.integers(0, 10**9), cost=st.floats(0, 1e6), ttft=st.none() | st.floats(0, 600))
def test_journal_round_trips_outcomes(tokens: int, cost: float, ttft: float | None) -> None:
    row = outcome("r", tokens_out=tokens, cost_usd=cost, ttft_s=ttft, fallbacks_taken=["a", "b"]).as_dict()
    assert decode(encode(("outcomes", row))) == ("outcomes", row)


@settings(max_examples=40, deadline=None)
@given(order=st.permutations(range(5)), batch=st.booleans(), chunk=st.sampled_from([None, 1, 2, 25]))
def test_newest_version_wins_in_any_arrival_order(order: list[int], batch: bool, chunk: int | None) -> None:
    engine = create_engine("sqlite://")
    Base.metadata.create_all(engine, tables=[Decision.__table__])
    versions = [("decisions", decision("r1", at=i, chosen=f"v{i}").as_dict()) for i in order]
    with engine.begin() as conn:
        if batch:  # in chunks or not, one transaction: the same result
            write_items(conn, versions, chunk=chunk, pause_s=0.0001 if chunk else 0.0)
        else:
            for item in versions:
                write_items(conn, [item])
        got = conn.execute(select(Decision.chosen, Decision.created_at)).all()
    assert got == [("v4", T0 + timedelta(seconds=4))]
