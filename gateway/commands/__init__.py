"""CLI sub-commands registered in :mod:`gateway.cli` (one module per command group)."""
