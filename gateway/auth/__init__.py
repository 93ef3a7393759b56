"""API keys, tenants and the authentication of requests.

Keys look like ``mr-<43 url-safe chars>`` (256 bits from :func:`secrets.token_urlsafe`);
only their SHA-256 is stored (a fast hash is enough for keys of that entropy, unlike
passwords), with an 8-character display prefix. A key is shown once, at creation.
"""
