"""Embeddings through litellm (``litellm.aembedding``) for the ``hosted`` backend.

The keyword arguments are built as for chat (:meth:`backends.hosted.backend.HostedBackend.call_kwargs`):
the backend's model, ``api_base``, ``api_key``, ``timeout``, ``max_retries=0`` (fallback is
the dispatcher's job), then ``config.options``. Of the client's body only the OpenAI request
fields go to litellm (:data:`EMBEDDING_PARAMS`), never ``encoding_format`` (floats are asked
for; the door encodes base64 itself) and never any other name: litellm reads many keyword
arguments (``api_base``, ``mock_response``, ``metadata``...) as its own controls, and a
client must not be able to redirect the call, with our key, to another host. The answer
(litellm's ``EmbeddingResponse``) is cut to OpenAI's keys.
"""

from __future__ import annotations

from typing import Any

import httpx

from backends.openai_shapes import check_embeddings

EMBEDDING_PARAMS = frozenset({"input", "dimensions", "user"})
"""Request fields passed to litellm (OpenAI API reference, embeddings; ``model`` is the
backend's and ``encoding_format`` the gateway's)."""


def embedding_kwargs(config: Any, body: dict) -> dict:
    """The ``litellm.aembedding`` keyword arguments for request ``body`` (see the module docstring).

    Args:
        config: the backend's :class:`~router.policy.models.BackendConfig`.
    """
    kwargs: dict[str, Any] = {"max_retries": 0, **config.options}
    kwargs.update({k: v for k, v in body.items() if k in EMBEDDING_PARAMS})
    kwargs["model"] = config.model
    kwargs["timeout"] = httpx.Timeout(config.timeout_s, connect=config.connect_timeout_s)
    if config.api_base:
        kwargs["api_base"] = config.api_base
    if config.api_key is not None:
        kwargs["api_key"] = config.api_key.get_secret_value()
    return kwargs


def embedding_dict(response: Any) -> dict:
    """litellm's ``EmbeddingResponse`` as OpenAI's ``list``: ``data`` (``object``, ``index``,
    ``embedding``), ``model`` and ``usage`` (``prompt_tokens``, ``total_tokens``).

    Raises:
        backends.openai_shapes.ShapeError: the answer is not shaped like OpenAI's
            (:func:`~backends.openai_shapes.check_embeddings`).
    """
    out = response.model_dump() if hasattr(response, "model_dump") else dict(response)
    usage = out.get("usage") or {}
    tokens = usage.get("prompt_tokens") or 0
    data = [{"object": "embedding", "index": d.get("index", i), "embedding": d.get("embedding")}
            for i, d in enumerate(out.get("data") or []) if isinstance(d, dict)]
    answer = {"object": "list", "data": data, "model": out.get("model"),
              "usage": {"prompt_tokens": tokens, "total_tokens": usage.get("total_tokens") or tokens}}
    check_embeddings(answer)
    return answer
