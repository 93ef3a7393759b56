"""The cost dashboard served by the gateway at ``/dashboard`` (see :mod:`.routes`)."""

from gateway.dashboard.routes import install

__all__ = ["install"]
