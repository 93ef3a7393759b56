"""Benchmarks runnable as ``python -m bench.<name>`` (and ``mixroute bench ...``)."""
