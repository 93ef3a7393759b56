"""The OpenAI Embeddings door (``POST /v1/embeddings``): its body is checked here against the
API's rules, answered by an embedding backend (:meth:`backends.base.Backend.embed`) and
rendered as OpenAI's ``list`` of ``embedding`` objects.

Rules (OpenAI API reference, "Create embeddings"): ``model`` a string; ``input`` a non-empty
string, or a non-empty array of at most :data:`MAX_INPUTS` non-empty strings, of token ids
(integers from 0), or of non-empty token-id arrays; ``encoding_format`` ``float`` or
``base64``; ``dimensions`` an integer from 1; ``user`` a string. Other fields pass through to
the backend (vLLM's ``truncate_prompt_tokens``...). Embeddings are never streamed.

``encoding_format: base64`` (what the ``openai`` SDK asks for by default, decoding it
itself) is done here: backends are always asked for floats, and each vector is sent back as
the base64 of its little-endian float32 bytes, as OpenAI's API and the SDK's decoder
(``numpy.frombuffer(..., dtype="float32")``) have it.
"""

from __future__ import annotations

import base64
import sys
from array import array

from backends.errors import BackendError
from gateway.doors.base import Door, DoorCall, DoorContext, Rendered, StreamEncoder
from router.errors import InvalidRequest

#: Most inputs in one request (OpenAI API reference: "must be 2048 dimensions or less").
MAX_INPUTS = 2048
ENCODINGS = ("float", "base64")
_INVALID = "invalid_value"


MAX_DIMENSIONS = 8192


def _bad(message: str, param: str, code: str = _INVALID) -> InvalidRequest:
    return InvalidRequest(message, param=param, code=code)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check_tokens(ids: list, param: str) -> None:
    for j, t in enumerate(ids):
        if not _is_int(t) or t < 0:
            raise _bad(f"{param}.{j}: a token id must be an integer from 0", f"{param}.{j}")


def check_input(value: object) -> None:
    """Check ``input`` (see the module docstring).

    Raises:
        InvalidRequest: naming the item at fault (``input``, ``input.3``, ``input.2.5``).
    """
    if value is None:
        raise _bad("input: missing required parameter", "input", "missing_required_parameter")
    if isinstance(value, str):
        if not value:
            raise _bad("input: must not be an empty string", "input")
        return
    if not isinstance(value, list):
        raise _bad("input: must be a string, an array of strings, an array of token ids or an array of token-id "
                   "arrays", "input")
    if not value:
        raise _bad("input: must not be an empty array", "input")
    if len(value) > MAX_INPUTS:
        raise _bad(f"input: at most {MAX_INPUTS} inputs in one request, got {len(value)}", "input")
    first = value[0]
    if _is_int(first):
        _check_tokens(value, "input")
        return
    for i, item in enumerate(value):
        param = f"input.{i}"
        if isinstance(first, str):
            if not isinstance(item, str):
                raise _bad(f"{param}: every input of an array of strings must be a string", param)
            if not item:
                raise _bad(f"{param}: must not be an empty string", param)
        elif isinstance(first, list):
            if not isinstance(item, list):
                raise _bad(f"{param}: every input of an array of token-id arrays must be an array", param)
            if not item:
                raise _bad(f"{param}: must not be an empty array", param)
            _check_tokens(item, param)
        else:
            raise _bad(f"{param}: must be a string, a token id or an array of token ids", param)


def check_body(raw: dict) -> None:
    """Check an embeddings request body (see the module docstring).

    Raises:
        InvalidRequest: the first problem, ``param`` naming the field.
    """
    model = raw.get("model")
    if model is None:
        raise _bad("model: missing required parameter (an embedding backend or route)", "model",
                   "missing_required_parameter")
    if not isinstance(model, str) or not model:
        raise _bad("model: must be a non-empty string", "model")
    check_input(raw.get("input"))
    fmt = raw.get("encoding_format")
    if fmt is not None and fmt not in ENCODINGS:
        raise _bad(f"encoding_format: must be one of {', '.join(ENCODINGS)}", "encoding_format")
    dims = raw.get("dimensions")
    # OpenAI's largest embedding model has 3,072 dimensions; the cap keeps one request from
    # asking a backend (or the fake one) for a vector of any size.
    if dims is not None and not (_is_int(dims) and 1 <= dims <= MAX_DIMENSIONS):
        raise _bad(f"dimensions: must be an integer from 1 to {MAX_DIMENSIONS}", "dimensions")
    if raw.get("user") is not None and not isinstance(raw["user"], str):
        raise _bad("user: must be a string", "user")
    if raw.get("stream"):
        raise _bad("stream: embeddings are not streamed", "stream")


def encode_base64(vector: list[float]) -> str:
    """A vector as the base64 of its little-endian float32 bytes (OpenAI's ``base64`` format)."""
    packed = array("f", vector)
    if sys.byteorder != "little":
        packed.byteswap()
    return base64.b64encode(packed.tobytes()).decode("ascii")


class EmbeddingsDoor(Door):
    """``POST /v1/embeddings`` (``name = "embeddings"``)."""

    name = "embeddings"

    async def parse(self, raw: dict, ctx: DoorContext) -> DoorCall:
        check_body(raw)
        fmt = raw.get("encoding_format") or "float"
        body = {k: v for k, v in raw.items() if k not in ("encoding_format", "stream")}
        return DoorCall(endpoint="embeddings", body=body, extra={"encoding_format": fmt})

    def render(self, response: dict, call: DoorCall, done: Rendered) -> dict:
        """OpenAI's ``list``: the backend's vectors in input order (base64 when asked), the
        model that answered and the usage."""
        base64_asked = call.extra.get("encoding_format") == "base64"
        data = sorted(response.get("data") or [], key=lambda d: d.get("index", 0))
        usage = response.get("usage") or {}
        tokens = int(usage.get("prompt_tokens") or 0)
        return {
            "object": "list",
            "data": [{"object": "embedding", "index": d.get("index", i),
                      "embedding": encode_base64(d["embedding"]) if base64_asked else d["embedding"]}
                     for i, d in enumerate(data)],
            "model": response.get("model") or done.model,
            "usage": {"prompt_tokens": tokens, "total_tokens": int(usage.get("total_tokens") or tokens)},
        }

    def encoder(self, call: DoorCall, request_id: str, backend: str, model: str) -> StreamEncoder:
        raise BackendError("embeddings are not streamed")  # parse() refuses stream: true


EMBEDDINGS = EmbeddingsDoor()
