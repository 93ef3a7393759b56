"""Fixtures shared by the backend tests (and reusable by the gateway tests).

- ``upstream``: the fake OpenAI-compatible upstream (:mod:`tests.backends.fake_upstream`)
  served by uvicorn on 127.0.0.1 for the whole session; its state is reset per test by
  ``upstream_state``.
- ``KINDS``: the backend kinds the conformance suite runs against. Each :class:`Kind` builds
  the :class:`BackendConfig` for a behaviour (``""`` normal, ``"-error-429"``,
  ``"-error-500"``, ``"-error-400"``, ``"-error-context"``, ``"-drop-mid-stream"``, ``"-slow"``). To add a kind
  (e.g. ``replay``), append a :class:`Kind` to ``KINDS``.
"""

from __future__ import annotations

from pathlib import Path

import os
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import pytest  # noqa: E402

from backends.base import Backend  # noqa: E402
from backends.config import BackendConfig  # noqa: E402
from backends.registry import build_backend  # noqa: E402
from tests.backends.fake_upstream import RunningServer, UpstreamState, serve_in_thread  # noqa: E402

ALL_BEHAVIOURS = frozenset({"", "-error-429", "-error-500", "-error-400", "-error-context", "-drop-mid-stream",
                            "-slow"})


@dataclass(frozen=True)
class Kind:
    """A backend kind under conformance test.

    Attributes:
        name: the policy ``kind``.
        config: builds the backend's config for a behaviour suffix, given the upstream.
        behaviours: the behaviour suffixes this kind can produce.
        reaches_upstream: requests go to the fake upstream over HTTP (so the test can check
            what the upstream received and that a disconnect reaches it).
        tools: the kind can answer with tool calls (replay answers only with recorded text).
    """

    name: str
    config: Callable[[str, RunningServer], BackendConfig]
    behaviours: frozenset[str] = ALL_BEHAVIOURS
    reaches_upstream: bool = True
    tools: bool = True


def _fake(suffix: str, upstream: RunningServer) -> BackendConfig:
    return BackendConfig(name=f"fake{suffix}", kind="fake", model=f"demo{suffix}",
                         options={"first_token_delay_s": 0.05, "token_delay_s": 0.01})


def _vllm(suffix: str, upstream: RunningServer) -> BackendConfig:
    return BackendConfig(name=f"vllm{suffix}", kind="vllm", model=f"m{suffix}",
                         endpoints=[upstream.v1("r1"), upstream.v1("r2")], timeout_s=10, connect_timeout_s=2)


def _hosted(suffix: str, upstream: RunningServer) -> BackendConfig:
    return BackendConfig(name=f"hosted{suffix}", kind="hosted", model=f"openai/m{suffix}",
                         api_base=upstream.v1(), api_key="sk-test", timeout_s=10, connect_timeout_s=2)


def _replay(suffix: str, upstream: RunningServer) -> BackendConfig:
    """A replay backend over a tiny RouteLLM-format file (one model, recorded correctness,
    no response text: answers are the labelled placeholder)."""
    import atexit
    import shutil
    import tempfile

    folder = tempfile.mkdtemp(prefix="mixroute-replay-")
    atexit.register(shutil.rmtree, folder, ignore_errors=True)  # left behind in /tmp before
    data = Path(folder) / "tiny.csv"
    data.write_text('prompt,model-a\n"What is the weather in Paris?",True\n"Say hello",False\n')
    return BackendConfig(name=f"replay{suffix}", kind="replay", model="model-a", data=[data])


KINDS: list[Kind] = [
    Kind("fake", _fake, behaviours=frozenset({"", "-error-429", "-error-500", "-drop-mid-stream", "-slow"}),
         reaches_upstream=False),
    Kind("vllm", _vllm),
    Kind("hosted", _hosted),
    Kind("replay", _replay, behaviours=frozenset({""}), reaches_upstream=False, tools=False),
]


@pytest.fixture(scope="session")
def upstream() -> RunningServer:
    """The fake upstream server, one per test session."""
    server = serve_in_thread(UpstreamState())
    yield server
    server.stop()


@pytest.fixture
def upstream_state(upstream: RunningServer) -> UpstreamState:
    """The upstream's recorded state, cleared for this test."""
    upstream.state.reset()
    return upstream.state


@pytest.fixture(params=KINDS, ids=lambda k: k.name)
def kind(request) -> Kind:
    return request.param


MakeBackend = Callable[[str], Awaitable[Backend]]


@pytest.fixture
async def make_backend(kind: Kind, upstream: RunningServer, upstream_state) -> AsyncIterator[MakeBackend]:
    """Factory: ``await make_backend("-error-429")`` -> a started backend of ``kind``
    with that behaviour (skips the test if the kind cannot produce it); closed afterwards."""
    made: list[Backend] = []

    async def make(suffix: str = "") -> Backend:
        if suffix not in kind.behaviours:
            pytest.skip(f"{kind.name} has no {suffix!r} behaviour")
        backend = build_backend(kind.config(suffix, upstream))
        await backend.start()
        made.append(backend)
        return backend

    yield make
    for backend in made:
        await backend.aclose()
