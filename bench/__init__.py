"""Benchmarks: runnable commands that print numbers (python -m bench.<name>)."""
