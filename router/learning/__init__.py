"""Routing that learns from its own traffic: the outcome memory of a deployment
(:mod:`router.learning.memory`) and exploration with logged propensities
(:mod:`router.learning.explore`). docs/LEARNING.md is the reference."""
