"""Serve one fake vLLM replica (``bench/fake_vllm.py``) for the compose stack.

The compose file mounts the repository's ``bench/`` next to this script, so the replica
is the same model the prefix-cache benchmark uses: vLLM's metric names, a prefix cache, a
waiting queue and simulated prefill/decode times (no GPU, no weights).

Environment (seconds, tokens): ``FAKE_VLLM_MODEL`` (the model name it answers as),
``FAKE_VLLM_HOST`` (0.0.0.0), ``FAKE_VLLM_PORT`` (8000), ``FAKE_VLLM_MAX_NUM_SEQS`` (4), ``FAKE_VLLM_ITL_S`` (0.02),
``FAKE_VLLM_PREFILL_S_PER_TOKEN`` (0.0005), ``FAKE_VLLM_OUTPUT_TOKENS`` (32). The defaults
are slow on purpose so that a modest load queues and ``mixroute_pool_queue_depth`` moves.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import uvicorn

_HERE = Path(__file__).resolve().parent
# The compose file mounts bench/ next to this script; in a checkout it is two folders up
# (`python deploy/compose/fake_vllm.py` from anywhere).
for _root in (_HERE, _HERE.parent.parent):
    if (_root / "bench" / "fake_vllm.py").is_file():
        if str(_root) not in sys.path:
            sys.path.insert(0, str(_root))
        break

from bench.fake_vllm import FakeVllmReplica, ReplicaModel  # noqa: E402


def main() -> None:
    env = os.environ.get
    model = ReplicaModel(
        max_num_seqs=int(env("FAKE_VLLM_MAX_NUM_SEQS", "4")),
        itl_s=float(env("FAKE_VLLM_ITL_S", "0.02")),
        prefill_s_per_token=float(env("FAKE_VLLM_PREFILL_S_PER_TOKEN", "0.0005")),
        output_tokens=int(env("FAKE_VLLM_OUTPUT_TOKENS", "32")),
    )
    replica = FakeVllmReplica(env("FAKE_VLLM_MODEL", "fake-vllm"), model)
    uvicorn.run(replica.app, host=env("FAKE_VLLM_HOST", "0.0.0.0"), port=int(env("FAKE_VLLM_PORT", "8000")),
                log_level="warning", access_log=False)


if __name__ == "__main__":
    main()
