"""Idle client connections stay open longer than a load balancer's idle timeout.

uvicorn's own default (5 s) is shorter than e.g. an AWS ALB's 60 s: the balancer then reuses
a connection the gateway is closing and the request is reset before it reaches the gateway
(seen as ``httpx.ReadError`` under a burst on a loaded machine).
"""

import pytest


@pytest.mark.parametrize("env, expected", [(None, 75), ("120", 120)])
def test_serve_passes_keep_alive_to_uvicorn(env, expected, monkeypatch, tmp_path, free_port):
    import uvicorn

    import gateway.app

    monkeypatch.setenv("MIXROUTE_ADMIN_KEY", "k")
    if env is None:
        monkeypatch.delenv("MIXROUTE_KEEP_ALIVE_S", raising=False)
    else:
        monkeypatch.setenv("MIXROUTE_KEEP_ALIVE_S", env)
    seen = {}
    monkeypatch.setattr(gateway.app, "create_app", lambda settings: None)
    monkeypatch.setattr(uvicorn, "run", lambda app, **kw: seen.update(kw))
    from gateway.serve import run

    run(policy=None, host=None, port=free_port, database_url=f"sqlite:///{tmp_path / 's.db'}")
    assert seen["timeout_keep_alive"] == expected


def test_keep_alive_must_be_positive(monkeypatch, tmp_path, capsys):
    from gateway.serve import run

    monkeypatch.setenv("MIXROUTE_KEEP_ALIVE_S", "0")
    with pytest.raises(SystemExit) as exc:
        run(policy=None, host=None, port=None, database_url=f"sqlite:///{tmp_path / 's.db'}")
    assert exc.value.code == 2
    assert "MIXROUTE_KEEP_ALIVE_S" in capsys.readouterr().err
