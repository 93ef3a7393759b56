"""Checks of a backend's ``endpoints`` entries (vLLM replica base URLs) at policy load, so a
URL that the HTTP clients would refuse later is a ``file:line`` error instead."""

from __future__ import annotations

from urllib.parse import urlsplit


def check_endpoint(url: str) -> None:
    """Raise ``ValueError`` unless ``url`` is an http(s) URL with a host (and a valid port)."""
    if not url.startswith(("http://", "https://")):
        raise ValueError(f"endpoint {url!r} must start with http:// or https://")
    if any(c.isspace() or not c.isprintable() for c in url):
        raise ValueError(f"endpoint {url!r} contains whitespace or control characters")
    parts = urlsplit(url)
    try:
        parts.port
    except ValueError:
        raise ValueError(f"endpoint {url!r} has an invalid port") from None
    if not parts.hostname:
        raise ValueError(f"endpoint {url!r} has no host")
    if parts.query or parts.fragment:
        raise ValueError(f"endpoint {url!r} must not have a query or fragment (give the base URL, e.g. "
                         "http://vllm-0:8000/v1)")
    if not parts.path.rstrip("/").endswith("/v1"):
        # Without it every request got a 404 the pool never ejected for (its /metrics answered).
        raise ValueError(f"endpoint {url!r} must be the replica's OpenAI base URL, ending in /v1 "
                         f"(e.g. {url.rstrip('/')}/v1)")
    try:  # the HTTP clients' own parsers (host names are IDNA-encoded there)
        import httpx
        import yarl

        httpx.URL(url)
        yarl.URL(url).raw_host
    except Exception as exc:  # noqa: BLE001  # any parse failure is the same answer
        raise ValueError(f"endpoint {url!r} is not a usable URL ({type(exc).__name__})") from None
