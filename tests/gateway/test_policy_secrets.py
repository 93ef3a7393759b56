"""The ``policies`` table keeps a policy's text without its inline secrets."""

from __future__ import annotations

import time

import sqlalchemy as sa

from tests.gateway.conftest import start_gateway

POLICY = """version: 1
backends:
  - {name: good, kind: fake, model: good-model, quality: 0.9}
  - name: pool
    kind: vllm
    model: m
    endpoints: ["http://svc-user:svc-pass-77@127.0.0.1:9/v1"]
    options: {metrics_interval_s: 0}
  - {name: keyed, kind: vllm, model: m, endpoints: ["http://127.0.0.1:9/v1"], api_key: sk-inline-secret-77,
     options: {metrics_interval_s: 0}}
routes:
  - {name: auto, backends: [good]}
"""


def test_inline_secrets_are_not_stored(tmp_path) -> None:
    gw = start_gateway(tmp_path, POLICY, store_flush_interval_s=0.05)
    try:
        engine = sa.create_engine(gw.settings.database_url)
        deadline, texts = time.monotonic() + 10, []
        while not texts and time.monotonic() < deadline:
            with engine.connect() as conn:
                texts = [r[0] for r in conn.execute(sa.text("SELECT text FROM policies"))]
            time.sleep(0.05)
        engine.dispose()
    finally:
        gw.stop()
    [text] = texts
    assert "svc-pass-77" not in text and "sk-inline-secret-77" not in text and "svc-user" not in text
    assert "http://REDACTED@127.0.0.1:9/v1" in text and "api_key: REDACTED" in text
