"""The replay backend on tiny data files and on real RouterBench rows."""

from __future__ import annotations

import pytest

from backends.call import CallReport
from backends.config import BackendConfig
from backends.data import DataFormatError
from backends.registry import build_backend
from backends.replay.backend import ReplayBackend
from router.policy import parse_policy
from tests.replay.tiny import write_bench, write_routellm


def _backend(model: str, *data) -> ReplayBackend:
    backend = build_backend(BackendConfig(name="b", kind="replay", model=model, data=list(data)))
    assert isinstance(backend, ReplayBackend)
    return backend


def _chat(*user: str, system: str = "Answer briefly.") -> dict:
    return {"messages": [{"role": "system", "content": system}, *({"role": "user", "content": u} for u in user)]}


async def test_recorded_response_and_cost(tmp_path):
    backend = _backend("big/model-1", write_bench(tmp_path))
    await backend.start()
    report = CallReport()
    out = await backend.send("chat", _chat("  What is 2+2?\n\n  A) 3 B) 4 "), report=report)
    assert out["choices"][0]["message"]["content"] == "B"
    assert report.cost_usd == 0.004 and out["model"] == "big/model-1"
    small = _backend("small model", tmp_path / "bench.csv")
    report = CallReport()
    out = await small.send("completions", {"prompt": "Capital of France?"}, report=report)
    assert out["choices"][0]["text"] == "Paris." and report.cost_usd == 0.0002


async def test_lookup_falls_back_to_the_whole_prompt(tmp_path):
    backend = _backend("big/model-1", write_bench(tmp_path))
    # The two prompt parts sent as two user messages: the last one alone is not a prompt.
    body = _chat("What is 2+2?", "A) 3\nB) 4", system="")
    body["messages"] = body["messages"][1:]
    assert (await backend.answer("chat", body)).text == "B"
    assert await backend.recorded_score("chat", body) == 1.0


async def test_duplicate_prompt_answers_from_the_first_row(tmp_path):
    backend = _backend("big/model-1", write_bench(tmp_path))
    answer = await backend.answer("chat", _chat("Capital of France?"))
    assert (answer.text, answer.cost_usd) == ("Paris", 0.003)


async def test_placeholder_without_recorded_response(tmp_path):
    backend = _backend("strong", write_routellm(tmp_path))
    answer = await backend.answer("chat", _chat("Q one?"))
    assert answer.text == "[replay: no recorded response for strong; recorded score 1.0]"
    assert answer.cost_usd is None  # the gateway prices it from the policy


async def test_unknown_prompt_is_a_labelled_200_answer(tmp_path):
    backend = _backend("big/model-1", write_bench(tmp_path))
    report = CallReport()
    out = await backend.send("chat", _chat("Something never recorded"), report=report)
    assert out["choices"][0]["message"]["content"] == "[replay: prompt not in the recorded data for big/model-1]"
    assert report.cost_usd is None and out["usage"]["completion_tokens"] > 0


async def test_stream_carries_the_recorded_cost(tmp_path):
    backend = _backend("small model", write_bench(tmp_path))
    report = CallReport()
    chunks = [c async for c in backend.stream("chat", _chat("Hard one"), report=report)]
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    assert text == "42" and report.cost_usd == 0.0003 and chunks[-1]["usage"]["completion_tokens"] >= 1


async def test_backends_share_one_loaded_index(tmp_path):
    path = write_bench(tmp_path)
    a, b = _backend("big/model-1", path), _backend("small model", path)
    await a.start()
    await b.start()
    assert await a.index() is await b.index()


async def test_model_missing_from_data_fails_at_start(tmp_path):
    with pytest.raises(DataFormatError, match="model 'gpt-5' is not in the data"):
        await _backend("gpt-5", write_bench(tmp_path)).start()


async def test_missing_file_fails_at_start(tmp_path):
    with pytest.raises(DataFormatError, match="no such file"):
        await _backend("x", tmp_path / "nope.csv").start()


def test_policy_entry_with_relative_data(tmp_path):
    write_bench(tmp_path)
    text = ("version: 1\nbackends:\n  - {name: big, kind: replay, model: big/model-1, data: [bench.csv],"
            " pricing: {per_request: 0.004}}\nroutes:\n  - {name: auto, backends: [big]}\n")
    loaded = parse_policy(text, base_dir=tmp_path)
    assert loaded.policy.backends[0].data == [tmp_path / "bench.csv"]


async def test_real_routerbench_rows(data_dir):
    path = data_dir / "routerbench" / "winograde_train.csv"
    from backends.data import load

    row = load(path).rows[0]
    backend = _backend("gpt-4-1106-preview", path)
    await backend.start()
    report = CallReport()
    out = await backend.send("chat", _chat(row.prompt), report=report)
    assert out["choices"][0]["message"]["content"] == row.responses["gpt-4-1106-preview"] == "A"
    assert report.cost_usd == pytest.approx(0.00354)
    assert await backend.recorded_score("chat", _chat(row.prompt)) == 0.0
