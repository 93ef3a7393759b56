"""Routing policy: typed models and a YAML loader with ``FILE:LINE path: problem`` errors."""

from backends.config import BackendConfig, Pricing
from router.policy.loader import LoadedPolicy, PolicyError, PolicyProblem, load_policy, parse_policy
from router.policy.models import Policy, QualityBar, RouteConfig, RuleConfig

DEMO_POLICY = __path__[0] + "/demo.yaml"

__all__ = [
    "BackendConfig", "DEMO_POLICY", "LoadedPolicy", "Policy", "PolicyError", "PolicyProblem", "Pricing",
    "QualityBar", "RouteConfig", "RuleConfig", "load_policy", "parse_policy",
]
