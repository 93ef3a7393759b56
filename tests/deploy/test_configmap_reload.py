"""The chart's policy ConfigMap hot-reloads: the gateway's folder watch sees kubelet's update.

kubelet's atomic writer lays a ConfigMap volume out as ``policy.yaml -> ..data/policy.yaml``,
``..data -> ..<timestamp>/``; an update writes a new ``..<timestamp>/`` folder, renames a
fresh ``..data`` symlink over the old one and deletes the old folder. ``policy.yaml`` itself
never changes, so this checks that :class:`gateway.runtime.PolicyHolder` still reloads.
"""

from __future__ import annotations

import asyncio
import os
import shutil
from pathlib import Path

from gateway.runtime import PolicyHolder
from tests.deploy.conftest import by_kind


def kubelet_write(volume: Path, stamp: str, text: str) -> None:
    """One atomic-writer update of a ConfigMap volume holding ``policy.yaml``."""
    (volume / stamp).mkdir()
    (volume / stamp / "policy.yaml").write_text(text)
    os.symlink(stamp, volume / "..data_tmp")
    os.rename(volume / "..data_tmp", volume / "..data")
    if not (volume / "policy.yaml").is_symlink():
        os.symlink("..data/policy.yaml", volume / "policy.yaml")


async def test_policy_configmap_update_reaches_the_running_gateway(objects, tmp_path, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    (cm,) = by_kind(objects, "ConfigMap")
    text = cm["data"]["policy.yaml"]
    assert "quality: 0.66" in text
    kubelet_write(tmp_path, "..2025_01_01_00_00_00.1", text)

    holder = PolicyHolder(tmp_path / "policy.yaml", None)
    await holder.load()
    first = holder.current.loaded.hash
    holder.watch()
    try:
        await asyncio.sleep(0.5)  # the watcher is up
        kubelet_write(tmp_path, "..2025_01_01_00_01_00.2", text.replace("quality: 0.66", "quality: 0.67"))
        shutil.rmtree(tmp_path / "..2025_01_01_00_00_00.1")
        for _ in range(50):
            await asyncio.sleep(0.1)
            if holder.current.loaded.hash != first:
                break
        assert holder.current.loaded.hash != first, "the ConfigMap update was not applied"
        (b,) = [b for b in holder.current.loaded.policy.backends if b.name == "llama-3.1-8b-instruct"]
        assert b.quality == 0.67
    finally:
        await holder.aclose()
