"""A policy file's text with its inline secrets replaced, for storing and showing.

The store keeps the text of every policy that decided (``policies`` table), so that a
decision can be explained later; a key written into the file (``api_key: sk-...``, a
provider option such as ``aws_secret_access_key``, or ``user:password@`` in an endpoint
URL) must not be copied there. Replaced:

- the value of every mapping key that names a secret (:data:`SECRET_KEY`), unless it is
  only a ``${VAR}`` reference (the secret then stays in the environment);
- the user information of every URL (``scheme://user:password@host`` -> ``scheme://REDACTED@host``).

Everything else (comments, layout, line numbers) is kept, so the stored text still reads
and parses as the file did.
"""

from __future__ import annotations

import re

import yaml

MARK = "REDACTED"
SECRET_KEY = re.compile(r"(^|[_-])(api[_-]?key|secret|password|passwd|token|credentials?|private[_-]?key|"
                        r"access[_-]?key)($|[_-])", re.IGNORECASE)
"""Mapping keys whose values are secrets (``max_tokens`` is not one: ``token`` must stand alone)."""
_URL_USERINFO = re.compile(r"(?P<scheme>\b[a-z][a-z0-9+.-]*://)(?P<userinfo>[^/@\s\"'{}\[\],]+)@", re.IGNORECASE)
_ENV_ONLY = re.compile(r"^\s*\$\{[A-Za-z_][A-Za-z0-9_]*\}\s*$")


def redact_policy_text(text: str) -> str:
    """``text`` with inline secrets and URL credentials replaced by ``REDACTED``."""
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except (yaml.YAMLError, RecursionError):
        root = None  # not YAML: only the URL rule applies
    spans = sorted(_secret_spans(root), reverse=True) if root is not None else []
    for start, end in spans:  # from the end, so earlier offsets stay valid
        text = text[:start] + MARK + text[end:]
    return _URL_USERINFO.sub(lambda m: f"{m['scheme']}{MARK}@", text)


def _secret_spans(root: yaml.Node) -> list[tuple[int, int]]:
    """Offsets of the secret scalars under ``root``: values of secret keys, and every scalar
    inside a mapping or list held by a secret key."""
    spans, stack = [], [(root, False)]
    while stack:
        node, secret = stack.pop()
        if isinstance(node, yaml.ScalarNode):
            if secret and node.value and not _ENV_ONLY.match(node.value):
                spans.append((node.start_mark.index, node.end_mark.index))
        elif isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                stack.append((value, secret or (isinstance(key, yaml.ScalarNode) and bool(SECRET_KEY.search(
                    str(key.value))))))
        elif isinstance(node, yaml.SequenceNode):
            stack.extend((item, secret) for item in node.value)
    return spans
