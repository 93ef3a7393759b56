"""A policy's inline secrets are redacted from the text mixroute stores."""

from __future__ import annotations

import yaml
from hypothesis import given
from hypothesis import strategies as st

from router.policy.redact import MARK, redact_policy_text

POLICY = """version: 1
# endpoint for the lab: http://lab:hunter2@10.0.0.9/v1
backends:
  - name: pool
    kind: vllm
    model: m
    endpoints: ["http://svc-user:svc-pass@10.0.0.1:8000/v1", "http://10.0.0.2:8000/v1"]
    api_key: sk-inline-secret-1   # inline
  - {name: flow, kind: vllm, model: m, endpoints: ["http://10.0.0.3/v1"], api_key: "sk-inline-secret-2"}
  - name: envref
    kind: vllm
    model: m
    endpoints: ["http://10.0.0.4/v1"]
    api_key: ${POOL_KEY}
  - name: hosted
    kind: hosted
    model: bedrock/claude
    options:
      aws_secret_access_key: AKIA-inline-secret-3
      credentials: {user: u, password: inline-secret-4}
      max_tokens: 512
routes:
  - {name: auto, backends: [pool]}
"""


def test_inline_secrets_and_url_credentials_are_replaced() -> None:
    out = redact_policy_text(POLICY)
    for secret in ("sk-inline-secret-1", "sk-inline-secret-2", "AKIA-inline-secret-3", "inline-secret-4",
                   "svc-pass", "hunter2", "svc-user"):
        assert secret not in out, secret
    assert "${POOL_KEY}" in out and "max_tokens: 512" in out  # references and other values stay
    assert "http://REDACTED@10.0.0.1:8000/v1" in out and "# inline" in out
    assert out.count("\n") == POLICY.count("\n")  # same lines: problems still point at the file's lines
    data = yaml.safe_load(out)  # still YAML, same shape
    assert data["backends"][0]["api_key"] == MARK and data["backends"][3]["options"]["max_tokens"] == 512


@given(st.text(alphabet=st.characters(codec="utf-8", exclude_characters="\x00"), max_size=200))
def test_any_text_is_redacted_without_error(text: str) -> None:
    redact_policy_text(text)
