"""The cost dashboard served by the gateway at ``/dashboard`` (see :mod:`.routes`), with its
sessions view (:mod:`.conversations`)."""

from gateway.dashboard import conversations
from gateway.dashboard.routes import install as _install


def install(app, settings) -> None:
    """Add the dashboard's routes, its sessions view and its static files to ``app``."""
    app.include_router(conversations.router)
    _install(app, settings)


__all__ = ["install"]
