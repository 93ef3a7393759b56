"""The floor plan (ARCHITECTURE.md): imports run gateway -> router -> backends, one way.

``backends/`` imports neither ``router/`` nor ``gateway/``, and ``router/`` imports neither
``gateway/`` nor FastAPI/Starlette: not at the top of a file, not under ``TYPE_CHECKING`` and
not inside a function, where an import hides a cycle instead of removing it. The source is
read with :mod:`ast`, so every import statement counts wherever it stands, and so does an
``importlib.import_module("router...")`` call with a literal name.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def imported_packages(path: Path) -> list[tuple[int, str]]:
    """``(line, module)`` of every import in ``path``: statements at any depth, and calls of
    ``importlib.import_module`` / ``__import__`` whose first argument is a string literal."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.lineno, node.module))
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if name in ("import_module", "__import__") and isinstance(node.args[0].value, str):
                found.append((node.lineno, node.args[0].value))
    return found


def upward_imports(package: str, forbidden: set[str]) -> list[str]:
    """``file:line module`` for each import under ``package/`` of a top-level package in
    ``forbidden``."""
    bad = []
    for path in sorted((ROOT / package).rglob("*.py")):
        for line, module in imported_packages(path):
            if module.split(".")[0] in forbidden:
                bad.append(f"{path.relative_to(ROOT)}:{line} {module}")
    return bad


def test_backends_import_nothing_above_them():
    assert upward_imports("backends", {"router", "gateway"}) == []


def test_router_imports_neither_the_gateway_nor_fastapi():
    assert upward_imports("router", {"gateway", "fastapi", "starlette"}) == []


def test_the_scan_sees_imports_inside_functions_and_type_checking(tmp_path):
    # The scan itself must be able to fail: the forms that once hid this repository's cycle.
    source = ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from router.policy import Policy\n"
              "def f():\n    import gateway.app\n    return importlib.import_module('router.cost')\n")
    (tmp_path / "m.py").write_text(source)
    assert [m for _, m in imported_packages(tmp_path / "m.py")] == ["typing", "router.policy", "gateway.app",
                                                                    "router.cost"]


@pytest.mark.parametrize("kind", ["fake", "hosted", "vllm", "replay"])
def test_each_backend_kind_loads_without_the_router(kind):
    """A fresh interpreter imports a backend kind, its options model and the floor's shared
    modules, builds a fake backend and answers one request through it: nothing of
    ``router`` or ``gateway`` is imported on the way."""
    code = (
        "import asyncio, sys\n"
        f"import backends.{kind}.backend\n"
        "import backends.registry, backends.catalog, backends.pricing, backends.data, backends.openai_shapes\n"
        f"backends.registry.options_model({kind!r})\n"
        "from backends.config import BackendConfig\n"
        "b = backends.registry.build_backend(BackendConfig(name='f', kind='fake', model='m'))\n"
        "asyncio.run(b.send('chat', {'model': 'm', 'messages': [{'role': 'user', 'content': 'hi'}]}))\n"
        "above = sorted(m for m in sys.modules if m.split('.')[0] in ('router', 'gateway', 'fastapi'))\n"
        "sys.exit(f'imported from above the floor: {above}' if above else 0)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT), "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
