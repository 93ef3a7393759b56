"""The ``session:`` block of a route: how a conversation is kept on one model.

A conversation repeats a growing prefix; the model (and vLLM replica) that served its last
turn holds that prefix in its cache. Moving the conversation elsewhere pays the whole prefix
again, so the engine (:mod:`router.session`) keeps a session where it is unless moving pays.
"""

from __future__ import annotations

from pydantic import Field

from backends.fields import Integer, Strict


class SessionConfig(Strict):
    """Per-route session settings.

    Attributes:
        enabled: route a conversation as a whole (off: every request is decided alone).
        idle_s: seconds without a turn after which a session is forgotten (seconds).
        allow_downgrade: a session may move to a cheaper model mid-conversation when that
            pays over the expected rest of the session; off: it moves only up (escalation,
            when its model no longer clears the bar) or when rules leave its model out.
        max_switches: switches of any kind (escalations included) after which a session no
            longer moves down for price; it still moves when its model no longer clears the
            bar (escalation) or a rule leaves its model out.
    """

    enabled: bool = True
    idle_s: Integer = Field(default=1800, ge=1, le=7 * 24 * 3600)
    allow_downgrade: bool = False
    max_switches: Integer = Field(default=3, ge=0, le=1000)
