"""Stored responses across gateway replicas sharing one store, and their retention."""

from __future__ import annotations

import time
from contextlib import ExitStack

import openai
import pytest
from sqlalchemy import event
from sqlalchemy.engine import Engine

from tests.gateway.conftest import start_gateway
from tests.store.conftest import fresh_pg_schema


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def replicas(request, tmp_path_factory):
    """Two gateways on one store: a SQLite file, or a fresh PostgreSQL schema
    (``MIXROUTE_TEST_DATABASE_URL``)."""
    tmp = tmp_path_factory.mktemp("replicas")
    with ExitStack() as stack:
        db = (f"sqlite:///{tmp}/shared.db" if request.param == "sqlite"
              else stack.enter_context(fresh_pg_schema()))
        gateways = []
        for name in ("a", "b"):
            (tmp / name).mkdir()
            gw = start_gateway(tmp / name, database_url=db, store_journal_path=str(tmp / name / "journal.jsonl"))
            stack.callback(gw.stop)
            gateways.append(gw)
        yield gateways


def _client(gw) -> openai.OpenAI:
    return openai.OpenAI(base_url=gw.v1, api_key="unused", max_retries=0)


def test_the_next_turn_on_another_replica_finds_the_response(replicas):
    one, two = (_client(gw) for gw in replicas)
    for turn in range(3):  # written before the answer, never through the batched writer
        first = one.responses.create(model="auto", input=f"Hello {turn}")
        second = two.responses.create(model="auto", input="And then?", previous_response_id=first.id)
        assert second.previous_response_id == first.id
        assert two.responses.retrieve(first.id).output_text == first.output_text


@pytest.fixture
def slow_response_inserts():
    """Every insert into ``responses`` in this process takes 0.3 s longer (a slow store)."""

    def slow(conn, cursor, statement, *_):
        if statement.lstrip().upper().startswith("INSERT INTO RESPONSES"):
            time.sleep(0.3)

    event.listen(Engine, "before_cursor_execute", slow)
    yield
    event.remove(Engine, "before_cursor_execute", slow)


def test_a_streamed_response_is_stored_before_its_last_event(replicas, slow_response_inserts):
    one, two = (_client(gw) for gw in replicas)
    for turn in range(3):
        stream = one.responses.create(model="auto", input=f"Stream {turn}", stream=True)
        # A client acts on response.completed without waiting for the connection to end.
        done = next(e for e in stream if e.type == "response.completed")
        # At once, on the other replica: the row was committed before response.completed went out.
        assert two.responses.retrieve(done.response.id).output_text == done.response.output_text
        assert two.responses.create(model="auto", input="more", previous_response_id=done.response.id).output_text
        stream.close()


def test_responses_expire_after_the_retention(tmp_path):
    gw = start_gateway(tmp_path, responses_retention_s=0.5)
    try:
        client = _client(gw)
        created = client.responses.create(model="auto", input="Short-lived")
        assert client.responses.retrieve(created.id).id == created.id
        time.sleep(0.8)
        with pytest.raises(openai.NotFoundError):
            client.responses.retrieve(created.id)
        with pytest.raises(openai.NotFoundError) as err:
            client.responses.create(model="auto", input="more", previous_response_id=created.id)
        assert err.value.body["param"] == "previous_response_id"
    finally:
        gw.stop()
