"""The private PostgreSQL server the store's fault tests use: :mod:`bench.fault_env` owns it
(the fault suite ``python -m bench.faults`` starts the same one)."""

from bench.fault_env import PrivatePostgres, unavailable

__all__ = ["PrivatePostgres", "unavailable"]
