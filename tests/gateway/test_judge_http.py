"""The judge over HTTP: a real gateway grades sampled answers with a judge backend that is
a fake OpenAI-compatible provider at the HTTP edge (``kind: hosted`` with ``api_base``)."""

from __future__ import annotations

import asyncio
import logging
import re
import time

import httpx
import orjson
import pytest
import sqlalchemy as sa
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from tests.backends.fake_upstream import serve_in_thread
from tests.gateway.conftest import start_gateway, wait_row

RUBRIC = "Answers must be polite and in English."


class Provider:
    """A fake judge provider: answers ``reply`` (or fails with ``status``) after ``delay_s``."""

    def __init__(self) -> None:
        self.reply, self.status, self.delay_s, self.seen = "SCORE: 0.8", 200, 0.0, []
        app = Starlette(routes=[Route("/v1/chat/completions", self.handle, methods=["POST"])])
        self.server = serve_in_thread(app=app)

    async def handle(self, request: Request) -> Response:
        body = orjson.loads(await request.body())
        self.seen.append(body)
        await asyncio.sleep(self.delay_s)
        if self.status != 200:
            return Response(orjson.dumps({"error": {"message": "judge down", "type": "server_error"}}),
                            status_code=self.status, media_type="application/json")
        return Response(orjson.dumps({
            "id": "chatcmpl-judge", "object": "chat.completion", "created": 1, "model": body["model"],
            "choices": [{"index": 0, "message": {"role": "assistant", "content": self.reply}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 100, "completion_tokens": 2, "total_tokens": 102}}),
            media_type="application/json")


def policy(url: str, cap: float = 100.0, sample: float = 1.0) -> str:
    # The judge costs 1 USD per output token and nothing per input token: each grade's worst
    # case is max_tokens (2) USD, and the provider bills 2 completion tokens, so 2 USD.
    return f"""version: 1
backends:
  - {{name: answerer, kind: fake, model: good-model, quality: 0.9, pricing: {{input_per_1m: 1, output_per_1m: 2}}}}
  - {{name: grader, kind: hosted, model: openai/judge-model, api_base: "{url}/v1", api_key: sk-judge,
     options: {{num_retries: 0}}, pricing: {{input_per_1m: 0, output_per_1m: 1000000}}}}
routes:
  - {{name: auto, backends: [answerer]}}
rules:
  - {{name: private, when_header: x-private, allow_backends: [answerer]}}
learning:
  judge: {{backend: grader, sample: {sample}, rubric: "{RUBRIC}", max_usd_per_day: {cap}, max_tokens: 2}}
"""


@pytest.fixture(scope="module")
def provider():
    p = Provider()
    yield p
    p.server.stop()


@pytest.fixture()
def gw(tmp_path, provider):
    provider.reply, provider.status, provider.delay_s = "SCORE: 0.8", 200, 0.0
    gateway = start_gateway(tmp_path, policy(provider.server.url), store_flush_interval_s=0.02,
                            learning_refresh_s=0.1)
    yield gateway
    gateway.stop()


def _ask(gw, text: str = "Say hello", **headers) -> httpx.Response:
    resp = httpx.post(gw.v1 + "/chat/completions", json={"messages": [{"role": "user", "content": text}]},
                      headers=headers, timeout=30)
    assert resp.status_code == 200, resp.text
    return resp


def _metric(gw, name: str, **labels) -> float:
    text = httpx.get(gw.url + "/metrics", timeout=10).text
    total = 0.0
    for line in text.splitlines():
        m = re.match(rf"^{name}(?:{{(.*)}})? (\S+)$", line)
        if m and all(f'{k}="{v}"' in (m.group(1) or "") for k, v in labels.items()):
            total += float(m.group(2))
    return total


def _until(check, timeout: float = 10.0):
    deadline = time.monotonic() + timeout
    while True:
        got = check()
        if got or time.monotonic() > deadline:
            return got
        time.sleep(0.05)


def _rows(gw, sql: str, **params) -> list[dict]:
    engine = sa.create_engine(gw.settings.database_url)
    try:
        with engine.connect() as conn:
            return [dict(r) for r in conn.execute(sa.text(sql), params).mappings()]
    finally:
        engine.dispose()


def test_a_sampled_answer_is_graded_off_the_request_path_and_its_cost_recorded(gw, provider):
    provider.delay_s = 2.0  # a slow judge: the client must not wait for it
    started = time.perf_counter()
    resp = _ask(gw, "Say hello politely")
    assert time.perf_counter() - started < 1.5
    rid = resp.headers["x-mixroute-request-id"]
    # while it grades, the call counts on its backend (a reload drains it; the router sees the load)
    grader = gw.server.config.app.state.policies.current.backends["grader"]
    assert _until(lambda: len(grader.in_flight) == 1, timeout=1.5)
    fb = _until(lambda: _rows(gw, "SELECT * FROM feedback WHERE request_id = :r", r=rid))
    assert [(f["score"], f["source"]) for f in fb] == [(0.8, "judge")]
    assert len(grader.in_flight) == 0
    # what the judge read: the rubric, the prompt and the answer, within max_tokens
    sent = provider.seen[-1]
    assert sent["model"] == "judge-model" and sent["max_tokens"] == 2
    text = " ".join(m["content"] for m in sent["messages"])
    answer = resp.json()["choices"][0]["message"]["content"]
    assert RUBRIC in text and "Say hello politely" in text and answer in text
    # the judge's call is a recorded request of route (judge), costed at the judge's prices
    [call] = _until(lambda: _rows(gw, "SELECT d.request_id, d.tenant, d.pinned, d.reason, o.cost_usd, o.status, "
                                      "o.tokens_out FROM decisions d JOIN outcomes o USING (request_id) "
                                      "WHERE d.route = '(judge)'"))
    assert (call["reason"], call["status"], call["tokens_out"], call["cost_usd"]) == ("judge", "ok", 2, 2.0)
    assert call["tenant"] is None and call["pinned"]
    # ... which becomes an observation with source judge of the backend that answered
    obs = _until(lambda: _rows(gw, "SELECT * FROM observations WHERE request_id = :r", r=rid))
    assert [(o["id"], o["source"], o["backend"], o["score"]) for o in obs] == [
        (f"judge/{rid}", "judge", "answerer", 0.8)]
    assert _metric(gw, "mixroute_judge_total", result="graded") == 1
    assert _metric(gw, "mixroute_judge_cost_usd_total") == 2.0
    assert _metric(gw, "mixroute_cost_usd_total", route="(judge)", backend="grader") == 2.0
    spend = httpx.get(gw.url + "/metrics", timeout=10).text
    assert 'mixroute_requests_total{backend="grader",route="(judge)",status="ok"} 1.0' in spend


def test_a_streamed_answer_is_graded_too(gw, provider):
    with httpx.stream("POST", gw.v1 + "/chat/completions", timeout=30,
                      json={"messages": [{"role": "user", "content": "stream it"}], "stream": True}) as resp:
        assert resp.status_code == 200
        rid = resp.headers["x-mixroute-request-id"]
        answer = "".join(orjson.loads(line[6:])["choices"][0]["delta"].get("content") or ""
                         for line in resp.read().decode().splitlines()
                         if line.startswith("data: {") and orjson.loads(line[6:]).get("choices"))
    fb = _until(lambda: _rows(gw, "SELECT score, source FROM feedback WHERE request_id = :r", r=rid))
    assert fb == [{"score": 0.8, "source": "judge"}]
    assert answer and provider.seen[-1]["messages"][1]["content"].endswith("Answer:\n" + answer)


def test_an_answer_on_the_messages_door_is_graded(gw, provider):
    import anthropic

    client = anthropic.Anthropic(base_url=gw.url, api_key="unused", max_retries=0)
    raw = client.messages.with_raw_response.create(
        model="auto", max_tokens=100, messages=[{"role": "user", "content": "Bonjour, ca va?"}])
    rid = raw.headers["x-mixroute-request-id"]
    answer = raw.parse().content[0].text
    fb = _until(lambda: _rows(gw, "SELECT score, source FROM feedback WHERE request_id = :r", r=rid))
    assert fb == [{"score": 0.8, "source": "judge"}]
    graded = provider.seen[-1]["messages"][1]["content"]
    assert "Bonjour, ca va?" in graded and graded.endswith(answer)


def test_a_judge_that_is_down_is_counted_and_logged_once(gw, provider, caplog):
    provider.status = 500
    caplog.set_level(logging.WARNING, logger="mixroute.judge")
    rids = [_ask(gw, f"question {i}").headers["x-mixroute-request-id"] for i in range(3)]
    assert _until(lambda: _metric(gw, "mixroute_judge_total", result="error") == 3)
    lines = [r for r in caplog.records if r.name == "mixroute.judge"]
    assert len(lines) == 1 and "grader" in lines[0].getMessage() and "\n" not in lines[0].getMessage()
    assert not _rows(gw, "SELECT * FROM feedback")
    failed = _until(lambda: _rows(gw, "SELECT o.status, o.cost_usd FROM decisions d JOIN outcomes o "
                                      "USING (request_id) WHERE d.route = '(judge)'"))
    assert {(r["status"], r["cost_usd"]) for r in failed} == {("error", 0.0)}
    assert httpx.get(gw.url + "/readyz", timeout=5).status_code == 200
    provider.status = 200  # back up: the next answer is graded
    rid = _ask(gw).headers["x-mixroute-request-id"]
    assert _until(lambda: _rows(gw, "SELECT * FROM feedback WHERE request_id = :r", r=rid))
    assert rid not in rids


def test_an_answer_without_a_score_is_paid_but_not_an_observation(gw, provider):
    provider.reply = "The answer looks fine to me."
    rid = _ask(gw).headers["x-mixroute-request-id"]
    assert _until(lambda: _metric(gw, "mixroute_judge_total", result="unparsed") == 1)
    assert _metric(gw, "mixroute_judge_cost_usd_total") == 2.0
    time.sleep(0.3)
    assert not _rows(gw, "SELECT * FROM feedback WHERE request_id = :r", r=rid)


def test_a_prompt_a_rule_keeps_from_the_judge_is_not_sent_to_it(gw, provider):
    before = len(provider.seen)
    _ask(gw, "my card number is 4111", **{"x-private": "1"})
    assert _until(lambda: _metric(gw, "mixroute_judge_total", result="not_allowed") == 1)
    assert len(provider.seen) == before


def test_the_daily_cap_skips_grades_and_survives_a_restart(tmp_path, provider, caplog):
    provider.reply, provider.status, provider.delay_s = "SCORE: 1", 200, 0.0
    caplog.set_level(logging.WARNING, logger="mixroute.judge")
    text = policy(provider.server.url, cap=3.0)  # room for one 2-USD grade, not two
    gw = start_gateway(tmp_path, text, store_flush_interval_s=0.02)
    try:
        before = len(provider.seen)
        _ask(gw, "first")
        assert _until(lambda: _metric(gw, "mixroute_judge_total", result="graded") == 1)
        _ask(gw, "second")
        assert _until(lambda: _metric(gw, "mixroute_judge_total", result="over_cap") == 1)
        _ask(gw, "third")
        assert _until(lambda: _metric(gw, "mixroute_judge_total", result="over_cap") == 2)
        assert len(provider.seen) == before + 1
        [line] = [r.getMessage() for r in caplog.records if r.name == "mixroute.judge"]  # once, not per grade
        assert "daily cap reached" in line and "max_usd_per_day 3.0000" in line
    finally:
        gw.stop()
    again = start_gateway(tmp_path, text, store_flush_interval_s=0.02)  # the store remembers today's spend
    try:
        _ask(again, "fourth")
        assert _until(lambda: _metric(again, "mixroute_judge_total", result="over_cap") == 1)
        assert len(provider.seen) == before + 1
    finally:
        again.stop()


def test_a_client_cannot_pass_for_the_judge(gw):
    rid = _ask(gw).headers["x-mixroute-request-id"]
    wait_row(gw.settings.database_url, "decisions", rid)
    resp = httpx.post(gw.v1 + "/feedback", json={"request_id": rid, "score": 1, "source": "judge"}, timeout=10)
    assert resp.status_code == 400
    err = resp.json()["error"]
    assert (err["code"], err["param"]) == ("invalid_value", "source") and "judge" in err["message"]


def test_a_policy_reload_turns_the_judge_off_and_a_bad_judge_edit_keeps_it(tmp_path, provider, caplog):
    gw = start_gateway(tmp_path, policy(provider.server.url), store_flush_interval_s=0.02, policy_watch=True)
    try:
        path = tmp_path / "policy.yaml"
        time.sleep(0.5)  # let the watcher start
        first = httpx.get(gw.url + "/readyz", timeout=5).json()["policy_hash"]
        path.write_text(policy(provider.server.url).replace("backend: grader,", "backend: nobody,"))
        time.sleep(1.0)
        assert httpx.get(gw.url + "/readyz", timeout=5).json()["policy_hash"] == first  # refused, judge kept
        assert any("learning.judge.backend: unknown backend 'nobody'" in r.getMessage() for r in caplog.records)
        _ask(gw, "still judged")
        assert _until(lambda: _metric(gw, "mixroute_judge_total", result="graded") == 1)
        path.write_text(policy(provider.server.url, sample=0.0))
        assert _until(lambda: httpx.get(gw.url + "/readyz", timeout=5).json()["policy_hash"] != first)
        before = len(provider.seen)
        for i in range(5):
            _ask(gw, f"not judged {i}")
        time.sleep(0.5)
        assert len(provider.seen) == before and _metric(gw, "mixroute_judge_total") == 1
    finally:
        gw.stop()
