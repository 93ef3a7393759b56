"""Build a backend from its policy entry. Each kind's module is imported only when a
policy uses it, so litellm (hosted) is never imported by a policy without hosted backends.

Each kind also names the typed model of its ``options`` (:func:`options_model`), which the
policy loader checks so that a bad option is a ``FILE:LINE`` error before anything starts.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field

from backends.config import BackendConfig
from backends.fields import Integer, Number

if TYPE_CHECKING:
    from backends.base import Backend

_KINDS = {
    "fake": ("backends.fake.backend", "FakeBackend"),
    "vllm": ("backends.vllm.backend", "VllmBackend"),
    "hosted": ("backends.hosted.backend", "HostedBackend"),
    "replay": ("backends.replay.backend", "ReplayBackend"),
}


class FakeOptions(BaseModel):
    """``options`` of a ``fake`` backend (read by :mod:`backends.fake.backend` for ``*-slow`` models).

    Attributes:
        first_token_delay_s: seconds before the first token.
        token_delay_s: seconds between chunks.
        embedding_dimensions: length of the vectors an embedding backend (``task:
            embedding``) answers when the request sets no ``dimensions``.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    first_token_delay_s: Number = Field(default=0.5, ge=0)
    token_delay_s: Number = Field(default=0.02, ge=0)
    embedding_dimensions: Integer = Field(default=256, ge=1, le=16384)


class NoOptions(BaseModel):
    """``options`` of a kind that reads none (``replay``): any key is an error."""

    model_config = ConfigDict(extra="forbid", frozen=True)


#: kind -> (module, class) of its typed ``options``; a kind not listed (``hosted``: extra
#: keyword arguments for litellm, any provider's) passes its options through unchecked.
_OPTIONS = {
    "fake": (__name__, "FakeOptions"),
    "vllm": ("backends.vllm.options", "PoolOptions"),
    "replay": (__name__, "NoOptions"),
}


def build_backend(config: BackendConfig) -> "Backend":
    """Instantiate the backend class registered for ``config.kind``.

    Raises:
        KeyError: unknown kind (the policy model already rejects it).
    """
    module, cls = _KINDS[config.kind]
    return getattr(importlib.import_module(module), cls)(config)


def options_model(kind: str) -> type[BaseModel] | None:
    """The pydantic model (``extra="forbid"``) that ``options`` of a ``kind`` backend must
    validate against, or ``None`` when that kind's options are not checked. Imports only
    the options module, never the backend's transport."""
    entry = _OPTIONS.get(kind)
    return None if entry is None else getattr(importlib.import_module(entry[0]), entry[1])
