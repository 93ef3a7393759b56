"""Build a backend from its policy entry. Each kind's module is imported only when a
policy uses it, so litellm (hosted) is never imported by a policy without hosted backends.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from backends.base import Backend
    from router.policy.models import BackendConfig

_KINDS = {
    "fake": ("backends.fake.backend", "FakeBackend"),
    "vllm": ("backends.vllm.backend", "VllmBackend"),
    "hosted": ("backends.hosted.backend", "HostedBackend"),
    "replay": ("backends.replay.backend", "ReplayBackend"),
}


def build_backend(config: "BackendConfig") -> "Backend":
    """Instantiate the backend class registered for ``config.kind``.

    Raises:
        KeyError: unknown kind (the policy model already rejects it).
    """
    module, cls = _KINDS[config.kind]
    return getattr(importlib.import_module(module), cls)(config)
