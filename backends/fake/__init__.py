"""Deterministic fake backend for tests and the offline demo."""
