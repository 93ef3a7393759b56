"""The learning refresh loop: a store that cannot be read keeps the last memory."""

from __future__ import annotations

from gateway.learning import Learner
from gateway.runtime import PolicyHolder
from gateway.store.db import make_engine, upgrade
from router.learning.memory import Tally

POLICY = """version: 1
backends:
  - {name: a, kind: fake, model: a-model, quality: 0.7}
routes:
  - {name: auto, backends: [a]}
learning: {}
"""


async def _holder(tmp_path) -> PolicyHolder:
    path = tmp_path / "policy.yaml"
    path.write_text(POLICY)
    holder = PolicyHolder(path, None)
    await holder.load()
    return holder


async def test_a_store_that_is_down_keeps_the_last_memory(tmp_path) -> None:
    holder = await _holder(tmp_path)
    kept = {"a": Tally(weight=5, square=5, error=-1)}
    holder.live.outcomes.replace(kept)
    engine = make_engine("postgresql+psycopg://postgres@127.0.0.1:1/none")  # nothing listens on port 1
    try:
        assert await Learner(engine, holder, 60).refresh() is False
    finally:
        engine.dispose()
        await holder.aclose()
    assert holder.live.outcomes.tallies is kept


async def test_an_empty_store_gives_an_empty_memory(tmp_path) -> None:
    holder = await _holder(tmp_path)
    holder.live.outcomes.replace({"a": Tally(weight=5, square=5, error=-1)})
    engine = make_engine(f"sqlite:///{tmp_path / 'store.db'}")
    upgrade(engine)
    try:
        assert await Learner(engine, holder, 60).refresh() is True
    finally:
        engine.dispose()
        await holder.aclose()
    assert holder.live.outcomes.tallies == {}
