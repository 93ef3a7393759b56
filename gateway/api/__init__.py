"""HTTP endpoint modules, one per endpoint family."""
