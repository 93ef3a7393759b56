"""The versions folder (:mod:`router.learning.versions`) and a version's outcome correction
(:mod:`router.learning.baked`)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from router.learning.baked import OUTCOMES_FILE, Baked, BakedError, combine
from router.learning.memory import tally
from router.learning.versions import SHIPPED, Versions, VersionError, VersionInfo
from router.policy.learning_config import LearningConfig

NOW = datetime(2026, 12, 6, 12, 0, tzinfo=timezone.utc)


def _info(vid: str, parent: str = SHIPPED) -> VersionInfo:
    return VersionInfo(version=vid, created_at=f"2026-12-06T00:00:0{len(vid)}+00:00", parent=parent)


def test_promote_and_rollback_walk_the_history(tmp_path: Path) -> None:
    v = Versions(tmp_path / "a", shipped_heads=tmp_path / "shipped")
    assert v.active().version == SHIPPED and v.ids() == [SHIPPED]
    with pytest.raises(VersionError, match="nothing to roll back"):
        v.rollback()
    v.create(_info("v1"))
    v.create(_info("v22"))
    assert v.ids() == [SHIPPED, "v1", "v22"]
    v.promote("v1")
    v.promote("v22")
    assert v.active().history == (SHIPPED, "v1")
    with pytest.raises(VersionError, match="no adapter version 'nope'"):
        v.promote("nope")
    assert v.active().version == "v22"
    assert v.rollback(expect="v1") is None  # another replica's view: not the active one, nothing done
    assert v.rollback(expect="v22").version == "v1"
    assert v.rollback().version == SHIPPED
    assert [e["event"] for e in v.events()] == ["promote", "promote", "rollback", "rollback"]
    assert v.events(1)[0] == {**v.events(1)[0], "from": "v1", "version": SHIPPED}


def test_rollback_skips_a_version_whose_folder_went(tmp_path: Path) -> None:
    v = Versions(tmp_path)
    for vid in ("v1", "v22", "v333"):
        v.create(_info(vid))
        v.promote(vid)
    import shutil

    shutil.rmtree(tmp_path / "v22")
    assert v.rollback().version == "v1"


def test_create_refuses_bad_ids_and_leaves_nothing_on_failure(tmp_path: Path) -> None:
    v = Versions(tmp_path)
    for bad in ("shipped", "../x", "", ".hidden"):
        with pytest.raises(VersionError, match="bad adapter version id"):
            v.create(_info(bad))
    v.create(_info("v1"))
    with pytest.raises(VersionError, match="exists already"):
        v.create(_info("v1"))

    def broken(folder: Path) -> None:
        (folder / "half").write_text("x")
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError):
        v.create(_info("v2"), broken)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["v1"]


def test_heads_come_from_the_nearest_version_that_has_them(tmp_path: Path) -> None:
    v = Versions(tmp_path / "a", shipped_heads=tmp_path / "shipped")
    v.create(_info("v1"), lambda f: (f / "heads" / "quality").mkdir(parents=True))
    v.create(_info("v2", parent="v1"))
    v.create(_info("v3", parent="gone"))
    assert v.heads("v2") == ("v1", tmp_path / "a" / "v1" / "heads")
    assert v.heads(SHIPPED) == (SHIPPED, tmp_path / "shipped")
    with pytest.raises(VersionError, match="no adapter version 'gone'"):
        v.heads("v3")


def test_an_unreadable_pointer_is_an_error_not_shipped(tmp_path: Path) -> None:
    (tmp_path / "active.json").write_text("{half")
    with pytest.raises(VersionError, match="unreadable"):
        Versions(tmp_path).active()


@dataclass
class Obs:
    backend: str
    score: float
    predicted: float | None
    probability: float | None
    source: str
    created_at: datetime


def test_baked_plus_later_observations_is_the_memory_of_the_whole_log(tmp_path: Path) -> None:
    cfg = LearningConfig(half_life_hours=24)
    priors = {"a": 0.8, "b": 0.5}
    until = NOW - timedelta(hours=30)
    old = [Obs("a", 0.0, 0.8, 0.5, "feedback", until - timedelta(hours=h)) for h in (0, 5, 50)] + \
          [Obs("b", 1.0, None, None, "retry", until - timedelta(hours=1))]
    new = [Obs("a", 1.0, 0.7, 1.0, "feedback", NOW - timedelta(hours=2))]
    baked = Baked(until, tally(old, cfg, until, priors))
    baked.save(tmp_path / OUTCOMES_FILE, cfg.half_life_hours)
    loaded = Baked.load(tmp_path / OUTCOMES_FILE)
    got = combine(loaded.aged(NOW, cfg.half_life_hours), tally(new, cfg, NOW, priors))
    want = tally(old + new, cfg, NOW, priors)
    assert got.keys() == want.keys()
    for b in want:
        for field in ("weight", "square", "error", "score"):
            assert getattr(got[b], field) == pytest.approx(getattr(want[b], field), rel=1e-9)


@pytest.mark.parametrize("text", ["{", '{"trained_until": "2026-12-06T00:00:00+00:00"}',
                                  '{"trained_until": "2026-12-06T00:00:00", "tallies": {}}',
                                  '{"trained_until": "2026-12-06T00:00:00+00:00", "tallies": {"a": {"weight": "NaN", '
                                  '"square": 1, "error": 0, "score": 0}}}'])
def test_a_damaged_correction_is_one_error(tmp_path: Path, text: str) -> None:
    (tmp_path / OUTCOMES_FILE).write_text(text)
    with pytest.raises(BakedError, match="outcomes.json"):
        Baked.load(tmp_path / OUTCOMES_FILE)


_POLICY = """version: 1
backends:
  - {name: cheap, kind: fake, model: cheap-model, quality: 0.9}
routes:
  - {name: auto, backends: [cheap], quality_bar: {min_quality: 0.7}}
learning:
"""


@pytest.mark.parametrize("block, problem", [
    ("  shadow: ../x", "policy.yaml:7 learning.shadow: '../x' is not an adapter version id"),
    ("  guard: {window: 5}", "policy.yaml:7 learning.guard: min_feedback (30) cannot exceed window (5)"),
    ("  guard: {z: -1}", "policy.yaml:7 learning.guard.z:"),
    ("  guard: {windows: 5}", "policy.yaml:7 learning.guard.windows:"),
])
def test_shadow_and_guard_are_validated_with_their_line(tmp_path: Path, block: str, problem: str) -> None:
    from router.policy import PolicyError, load_policy

    path = tmp_path / "policy.yaml"
    path.write_text(_POLICY + block + "\n")
    with pytest.raises(PolicyError) as err:
        load_policy(path)
    assert any(line.endswith(problem) or problem in line for line in err.value.lines()), err.value.lines()


def test_valid_shadow_and_guard(tmp_path: Path) -> None:
    from router.policy import load_policy

    path = tmp_path / "policy.yaml"
    path.write_text(_POLICY + "  shadow: v20261206-013000\n  guard: {window: 50, min_feedback: 10, z: 1.5}\n")
    learning = load_policy(path).policy.learning
    assert learning.shadow == "v20261206-013000"
    assert (learning.guard.window, learning.guard.min_feedback, learning.guard.z) == (50, 10, 1.5)
