"""The cost dashboard served by the gateway at ``/dashboard`` (see :mod:`.routes`), with its
sessions view (:mod:`.conversations`) and adapter events (:mod:`.events`)."""

from gateway.dashboard import conversations, events
from gateway.dashboard.routes import install as _install


def install(app, settings) -> None:
    """Add the dashboard's routes, its sessions view and its static files to ``app``."""
    app.include_router(conversations.router)
    app.include_router(events.router)
    _install(app, settings)


__all__ = ["install"]
