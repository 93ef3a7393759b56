"""The ``replay`` backend: recorded real model responses from outcome data."""
