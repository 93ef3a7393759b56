"""litellm, imported once on first use (:func:`load_litellm`): importing it takes about a
second and reads its price map, so the gateway's start and a policy without hosted backends
never pay for it. ``LITELLM_LOCAL_MODEL_COST_MAP=True`` keeps that import from fetching the
price map over the network, and ``LITELLM_LOCAL_ANTHROPIC_BETA_HEADERS=True`` its Anthropic
provider from fetching its beta-header table. The hosted backend (:mod:`backends.hosted.backend`), its price
lookups (:mod:`backends.hosted.pricing`) and the policy's checks of hosted backends all load
it from here.
"""

from __future__ import annotations

import logging
import os
from typing import Any

_litellm: Any = None


def load_litellm() -> Any:
    """Import litellm once, offline-safe, with its stdout debug banners off and its log
    records left to the gateway's logging: litellm gives its loggers (``LiteLLM``,
    ``LiteLLM Router``, ``LiteLLM Proxy``) a stderr handler of their own and lets them
    propagate too, so every line it logged was printed twice, once in each format."""
    global _litellm  # the imported module, cached: importing litellm takes about a second
    if _litellm is None:
        os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
        # Its first Anthropic call with a beta header (context_management, mcp_servers...)
        # would otherwise fetch a config from GitHub: an outbound call from the gateway.
        os.environ.setdefault("LITELLM_LOCAL_ANTHROPIC_BETA_HEADERS", "True")
        import litellm

        litellm.suppress_debug_info = True
        for name in LITELLM_LOGGERS:
            logger = logging.getLogger(name)
            for handler in list(logger.handlers):
                logger.removeHandler(handler)
        _litellm = litellm
    return _litellm


#: litellm's loggers (``litellm/_logging.py``).
LITELLM_LOGGERS = ("LiteLLM", "LiteLLM Router", "LiteLLM Proxy")
