"""Checks of a backend's ``endpoints`` entries (vLLM replica base URLs) at policy load, so a
URL that the HTTP clients would refuse later is a ``file:line`` error instead.

An entry may carry credentials (``http://user:password@vllm-0:8000/v1``, sent as HTTP basic
auth); messages show it with the user info replaced by ``***`` (:func:`shown`).
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Sequence
from urllib.parse import urlsplit

DEFAULT_PORTS = {"http": 80, "https": 443}
_USERINFO = re.compile(r"(?<=://)[^@]*@")


def shown(url: str) -> str:
    """``url`` with its user info (anything between ``://`` and an ``@``) replaced by ``***``,
    for messages; also for URLs too broken to parse."""
    return _USERINFO.sub("***@", url, count=1)


def endpoint_key(url: str) -> tuple[str, str, int, str]:
    """What identifies the replica at a checked ``url``: ``(scheme, host, port (80/443 when not
    given), path)``, with the host in lower case without a trailing dot and an IP address in
    its one canonical form, and the path without empty or ``.`` segments or trailing slashes;
    user info is left out, so ``http://u:p@VLLM-0.:80//v1/`` and ``http://vllm-0/v1`` are one
    replica, as are ``http://[::1]:8000/v1`` and ``http://[0:0:0:0:0:0:0:1]:8000/v1``."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    host = (parts.hostname or "").lower().rstrip(".")
    try:
        host = ipaddress.ip_address(host).compressed
    except ValueError:
        pass  # a name, not an address
    path = "/".join(seg for seg in parts.path.split("/") if seg not in ("", "."))
    return scheme, host, parts.port or DEFAULT_PORTS[scheme], "/" + path if path else ""


def check_distinct(urls: Sequence[str]) -> None:
    """Raise ``ValueError`` naming the first entry of ``urls`` (each already checked by
    :func:`check_endpoint`) that is the same replica as an earlier one (:func:`endpoint_key`):
    the pool would count it twice and export its ``mixroute_replica_*`` series twice."""
    seen: dict[tuple, int] = {}
    for i, url in enumerate(urls):
        first = seen.setdefault(endpoint_key(url), i)
        if first != i:
            raise ValueError(f"endpoint {shown(url)!r} (endpoints[{i}]) is listed twice: it is the same replica as "
                             f"endpoints[{first}] {shown(urls[first])!r} (compared without user info or trailing "
                             "slashes, host in any case, default port filled in; each entry is one replica)")


def check_one_authorization(urls: Sequence[str]) -> None:
    """Raise ``ValueError`` if an entry of ``urls`` has user info, for a backend with an
    ``api_key``: both become the ``Authorization`` header (basic and bearer), and aiohttp
    refuses every request and scrape that would carry two."""
    for i, url in enumerate(urls):
        if "@" in urlsplit(url).netloc:
            raise ValueError(f"endpoint {shown(url)!r} (endpoints[{i}]) has user info (HTTP basic auth) and the "
                             "backend has an 'api_key' (a bearer token): a request carries one Authorization "
                             "header; keep one of them")


def check_endpoint(url: str) -> None:
    """Raise ``ValueError`` unless ``url`` is an http(s) URL with a host (and a valid port);
    the message shows ``url`` without its user info (:func:`shown`)."""
    safe = shown(url)
    if not url.lower().startswith(("http://", "https://")):
        raise ValueError(f"endpoint {safe!r} must start with http:// or https://")
    if any(c.isspace() or not c.isprintable() for c in url):
        raise ValueError(f"endpoint {safe!r} contains whitespace or control characters")
    parts = urlsplit(url)
    try:
        parts.port
    except ValueError:
        hint = (" (a user name or password containing '/', '?', '#' or '@' must be percent-encoded)"
                if "@" in url else "")
        raise ValueError(f"endpoint {safe!r} has an invalid port{hint}") from None
    if not parts.hostname:
        raise ValueError(f"endpoint {safe!r} has no host")
    if parts.query or parts.fragment:
        raise ValueError(f"endpoint {safe!r} must not have a query or fragment (give the base URL, e.g. "
                         "http://vllm-0:8000/v1)")
    if not parts.path.rstrip("/").endswith("/v1"):
        # Without it every request got a 404 the pool never ejected for (its /metrics answered).
        raise ValueError(f"endpoint {safe!r} must be the replica's OpenAI base URL, ending in /v1 "
                         f"(e.g. {safe.rstrip('/')}/v1)")
    try:  # the HTTP clients' own parsers (host names are IDNA-encoded there)
        import httpx
        import yarl

        httpx.URL(url)
        yarl.URL(url).raw_host
    except Exception as exc:  # noqa: BLE001  # any parse failure is the same answer
        raise ValueError(f"endpoint {safe!r} is not a usable URL ({type(exc).__name__})") from None
