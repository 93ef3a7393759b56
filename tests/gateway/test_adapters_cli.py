"""``mixroute adapters`` on a damaged versions folder: one line per problem, never a traceback."""

from __future__ import annotations

from typer.testing import CliRunner

from gateway.cli import app
from router.learning.versions import Versions, VersionInfo


def _cli(*args: str):
    return CliRunner().invoke(app, ["adapters", *args])


def test_damaged_folders_and_pointers(tmp_path) -> None:
    v = Versions(tmp_path)
    v.create(VersionInfo(version="orphan", created_at="2026-12-06T01:00:00+00:00", parent="gone"))
    v.create(VersionInfo(version="empty-heads", created_at="2026-12-06T02:00:00+00:00"),
             lambda f: (f / "heads").mkdir())
    res = _cli("list", "--dir", str(tmp_path))
    assert res.exit_code == 0 and "orphan  (unusable: no adapter version 'gone'" in res.output, res.output
    for version, problem in (("orphan", "no adapter version 'gone'"), ("empty-heads", "holds no head folder")):
        res = _cli("promote", version, "--dir", str(tmp_path))
        assert res.exit_code == 1 and res.output.count("\n") == 1 and problem in res.output, res.output
    assert v.active().version == "shipped"
    res = _cli("rollback", "--dir", str(tmp_path))
    assert res.exit_code == 1 and "nothing to roll back" in res.output
    (tmp_path / "active.json").write_text("[1, 2]")
    for args in (("list",), ("promote", "orphan"), ("rollback",)):
        res = _cli(*args, "--dir", str(tmp_path))
        assert res.exit_code == 1 and res.output.count("\n") == 1 and 'no "version" string' in res.output, res.output
    assert _cli("events", "--dir", str(tmp_path / "none")).output == ""
