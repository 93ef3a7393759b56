"""Credentials kept out of every message a backend error carries (the client's 502 body, a
stream's error event, the logs): a backend's ``api_key`` and the user info of its URLs
(``http://user:password@vllm-0:8000/v1``, sent as HTTP basic auth), in each form an upstream
or an HTTP library may echo them: the URL itself, ``user:password`` (raw and
percent-decoded), the password, and the ``Authorization: Basic <base64>`` token.

Each backend builds one :class:`Redactor` from its configuration
(:attr:`backends.base.Backend.redact`) and passes upstream text through it where that text
becomes a :class:`backends.errors.BackendError` message.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Iterable
from typing import TYPE_CHECKING
from urllib.parse import unquote, urlsplit

if TYPE_CHECKING:
    from backends.config import BackendConfig

MASK = "***"
#: A bare password shorter than this is not replaced on its own (a one-letter password would
#: mask every such letter of the message); its longer forms (the URL, ``user:password``, the
#: basic-auth token) still are, and so is any URL user info or auth header by pattern.
MIN_BARE_SECRET = 4

_USERINFO = re.compile(r"(?<=://)[^\s/@'\"<>]+@")
_AUTH_TOKEN = re.compile(r"(?i)\b(basic|bearer)(\s+)[A-Za-z0-9+/=._~-]{6,}")


def _basic_tokens(user: str, password: str) -> set[str]:
    """The ``Authorization: Basic`` tokens HTTP clients build from ``user:password``
    (aiohttp encodes latin-1, httpx UTF-8)."""
    pair = f"{user}:{password}"
    tokens = {base64.b64encode(pair.encode("utf-8")).decode()}
    try:
        tokens.add(base64.b64encode(pair.encode("latin-1")).decode())
    except UnicodeEncodeError:
        pass
    return tokens


def url_secrets(url: str) -> set[str]:
    """The secret strings of ``url``'s user info (empty for a URL without one)."""
    netloc = urlsplit(url).netloc
    if "@" not in netloc:
        return set()
    raw = netloc.rpartition("@")[0]
    user, _, password = raw.partition(":")
    found = {raw, unquote(raw)} | _basic_tokens(unquote(user), unquote(password))
    for bare in (password, unquote(password)):
        if len(bare) >= MIN_BARE_SECRET:
            found.add(bare)
    return found


class Redactor:
    """Masks credentials in text: the given secret strings, any URL user info and any
    ``Basic``/``Bearer`` token.

    Args:
        secrets: strings to mask wherever they occur (empty ones are ignored).
    """

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        # Longest first: a secret containing another is masked whole.
        self._secrets = sorted({s for s in secrets if s}, key=len, reverse=True)

    @classmethod
    def for_config(cls, config: BackendConfig) -> Redactor:
        """The redactor of one backend: its ``api_key`` and the user info of its
        ``endpoints`` and ``api_base``."""
        secrets: set[str] = set()
        if config.api_key is not None:
            secrets.add(config.api_key.get_secret_value())
        for url in [*config.endpoints, config.api_base or ""]:
            secrets |= url_secrets(url)
        return cls(secrets)

    def __call__(self, text: str) -> str:
        """``text`` with every credential replaced by ``***``."""
        for secret in self._secrets:
            text = text.replace(secret, MASK)
        text = _USERINFO.sub(MASK + "@", text)
        return _AUTH_TOKEN.sub(lambda m: f"{m.group(1)}{m.group(2)}{MASK}", text)
