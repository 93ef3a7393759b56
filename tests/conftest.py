"""Fixtures shared by every test package.

``data_dir``: the shared real outcome data (``MIXROUTE_DATA_DIR``, else ``../shared/data``
beside the repository); tests using it are skipped with a message when it is absent.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

DATA_DIR = Path(os.environ.get("MIXROUTE_DATA_DIR") or Path(__file__).resolve().parents[1] / ".." / "shared" / "data")


@pytest.fixture(scope="session")
def data_dir() -> Path:
    if not (DATA_DIR / "README.md").is_file():
        pytest.skip(f"shared outcome data not found at {DATA_DIR} (set MIXROUTE_DATA_DIR)")
    return DATA_DIR.resolve()
