"""The rewriter's documented behaviour, example by example."""

from __future__ import annotations

import pytest

from router.policy.models import RewriteConfig
from router.rewrite import NOTE_HEADER, RewriteOptions, prefix_hash, rewrite
from router.rewrite.canonical import MAX_TOOLS
from router.rewrite.core import MAX_SCAN_CHARS
from router.rewrite.volatile import BUILTIN, find_spans


def chat(system, user="hello", **extra) -> dict:
    return {"model": "auto", "messages": [{"role": "system", "content": system}, {"role": "user", "content": user}],
            **extra}


def tool(name: str, **params) -> dict:
    return {"type": "function", "function": {"name": name, "parameters": {"type": "object", "properties": params}}}


def test_volatile_spans_move_to_a_note_on_the_last_user_message():
    body = chat("You help.  \r\nNow: 2025-06-01T10:04:05Z, request id: abc123XYZ, ref "
                "123e4567-e89b-12d3-a456-426614174000.", user="what time is it?")
    out = rewrite(body)
    system, user = out.body["messages"][0]["content"], out.body["messages"][1]["content"]
    assert system == "You help.\nNow: [timestamp-1], request id: [request-id-1], ref [uuid-1]."
    assert user == ("what time is it?\n\n" + NOTE_HEADER + "\n[timestamp-1] = 2025-06-01T10:04:05Z\n"
                    "[request-id-1] = abc123XYZ\n[uuid-1] = 123e4567-e89b-12d3-a456-426614174000")
    assert out.moved == {"timestamp": 1, "request-id": 1, "uuid": 1} and out.notes == []


def test_prefix_hash_is_stable_across_volatile_values_tool_order_and_whitespace():
    a = rewrite(chat("Be kind.\nToday: 2025-06-01 req_1a2b3c4d5e", tools=[tool("b", y={}, x={}), tool("a")]))
    b = rewrite(chat("Be kind.   \r\nToday: 2031-12-24 req_9f9f9f9f9f", tools=[tool("a"), tool("b", x={}, y={})]))
    assert a.prefix_hash == b.prefix_hash
    assert [t["function"]["name"] for t in a.body["tools"]] == ["a", "b"]
    assert a.body["tools"] == b.body["tools"]


def test_response_schema_keys_sorted_but_property_order_kept():
    fmt = {"type": "json_schema", "json_schema": {"schema": {"type": "object", "properties": {"z": {"type": "string"},
           "a": {"type": "integer", "description": "d"}}, "required": ["z", "a"]}, "name": "x"}}
    out = rewrite(chat("s", response_format=fmt)).body["response_format"]
    assert list(out) == ["json_schema", "type"] and list(out["json_schema"]) == ["name", "schema"]
    assert list(out["json_schema"]["schema"]["properties"]) == ["z", "a"]
    assert out["json_schema"]["schema"]["required"] == ["z", "a"]
    assert list(out["json_schema"]["schema"]["properties"]["a"]) == ["description", "type"]


def test_policy_patterns_with_value_group():
    opts = RewriteOptions(volatile_patterns=(r"build (?P<value>\d+\.\d+\.\d+)",))
    out = rewrite(chat("Running build 4.12.9 now"), opts)
    assert out.body["messages"][0]["content"] == "Running build [pattern-1] now"
    assert out.body["messages"][1]["content"].endswith("[pattern-1] = 4.12.9")


def test_off_switch_sends_the_body_as_received():
    body = chat("Now: 2025-06-01T10:04:05Z")
    out = rewrite(body, RewriteOptions(enabled=False))
    assert out.body is body and not out.enabled and out.prefix_hash == prefix_hash(body)


def test_unpacks_as_body_and_hash():
    body, phash = rewrite(chat("x"))
    assert phash == prefix_hash(body)


def test_what_cannot_be_canonicalised_is_left_and_noted():
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAA"}}
    bad_tools = [{"type": "function", "function": {"parameters": "not a schema"}}, tool("a")]
    body = {"messages": [{"role": "system", "content": [{"type": "text", "text": "At 2025-06-01"}, image]},
                         "junk", {"role": "user", "content": [image]}], "tools": bad_tools}
    out = rewrite(body)
    assert out.body["tools"] == bad_tools
    assert out.body["messages"][0]["content"][1] == image and out.body["messages"][1] == "junk"
    assert out.body["messages"][2]["content"][-1]["text"].endswith("[date-1] = 2025-06-01")
    assert any("tools left as sent" in n for n in out.notes)
    assert any("content[1] left as sent: non-text part (image_url)" in n for n in out.notes)
    assert any("messages[1] left as sent" in n for n in out.notes)


def test_huge_tool_lists_are_left_as_sent():
    tools = [tool(f"t{i}") for i in reversed(range(MAX_TOOLS + 1))]
    out = rewrite(chat("s", tools=tools))
    assert out.body["tools"] == tools and any("more than" in n for n in out.notes)


def test_no_user_message_gets_a_new_one():
    out = rewrite({"messages": [{"role": "system", "content": "id 123e4567-e89b-12d3-a456-426614174000"}]})
    assert out.body["messages"][-1]["role"] == "user" and NOTE_HEADER in out.body["messages"][-1]["content"]


def test_completions_bodies_are_left_alone():
    body = {"prompt": "At 2025-06-01T10:00:00Z"}
    assert rewrite(body).body is body


def test_never_raises_on_garbage():
    for body in ({"messages": None}, {"messages": [None, 3, {"role": "system", "content": 5}]},
                 {"messages": [{"role": "system", "content": "x"}], "tools": {"a": 1}, "response_format": "text"}):
        rewrite(body)


def test_policy_rejects_bad_patterns():
    with pytest.raises(ValueError, match="not a valid regex"):
        RewriteConfig(volatile_patterns=["("])
    with pytest.raises(ValueError, match="empty string"):
        RewriteConfig(volatile_patterns=[r"\d*"])


async def test_engine_records_rewrite_and_scope():
    from router.engine import Router, RoutingRequest
    from router.policy.loader import parse_policy

    loaded = parse_policy(POLICY)
    router = Router(loaded)
    req = RoutingRequest(endpoint="chat", body=chat("Now 2025-06-01T10:04:05Z", model="auto"), tenant="acme")
    decision = await router.decide(req)
    assert decision.record.signals["rewrite"]["moved"] == {"timestamp": 1}
    context = decision.call_context()
    assert (context.tenant, context.prefix_hash) == ("acme", decision.record.prefix_hash)
    assert not {k for k in decision.body if k.startswith("x_")}  # the scope travels beside the body
    off = await router.decide(RoutingRequest(endpoint="chat", body=chat("Now 2025-06-01T10:04:05Z", model="raw")))
    assert off.record.signals["rewrite"]["enabled"] is False
    assert off.body["messages"][0]["content"] == "Now 2025-06-01T10:04:05Z"


POLICY = """
version: 1
backends:
  - {name: f, kind: fake, model: demo}
routes:
  - {name: auto, backends: [f]}
  - {name: raw, backends: [f], rewrite: false}
"""


def test_a_backtracking_policy_pattern_cannot_stall_the_rewrite(caplog):
    """Policy patterns run on the request path: one with catastrophic backtracking on some
    client's text moves nothing for that text (logged) instead of running for minutes
    (``re`` needs seconds for 30 characters of this one; exponential in the length)."""
    import time

    opts = RewriteOptions(volatile_patterns=(r"(z+)+$", r"(x+x+)+y", r"build (?P<value>\d+)"))
    system = "build 42 " + "z" * 5000 + "!" + " " + "x" * 5000
    body = {"model": "m", "messages": [{"role": "system", "content": system}, {"role": "user", "content": "hi"}]}
    start = time.perf_counter()
    with caplog.at_level("WARNING", logger="mixroute.rewrite"):
        result = rewrite(body, opts)
    assert time.perf_counter() - start < 5  # two 10 ms budgets, not an exponential search
    assert "[pattern-1]" in result.body["messages"][0]["content"]  # the well-behaved pattern still moved 42
    assert "z" * 5000 + "! " + "x" * 5000 in result.body["messages"][0]["content"]
    assert "took over" in caplog.text


def test_policy_patterns_are_validated_with_the_engine_that_runs_them():
    with pytest.raises(ValueError, match="not a valid regex"):
        RewriteConfig(volatile_patterns=["(unclosed"])
    assert RewriteConfig(volatile_patterns=[r"(a+)+$"]).volatile_patterns == [r"(a+)+$"]


def test_a_system_prompt_of_many_volatile_values_rewrites_in_linear_time():
    """Each value was checked against every value taken before it: 8,000 timestamps took 2 s
    and the 10 MB body cap allows a few hundred thousand (the event loop stayed blocked
    for minutes). 40,000 timestamps and UUIDs (2.4 MB) now take about a second here."""
    import time

    system = " ".join(f"2024-01-{i % 28 + 1:02d}T{i % 24:02d}:{i % 60:02d}:00Z id {i:08x}-e89b-12d3-a456-426614174000"
                      for i in range(40_000))
    start = time.perf_counter()
    spans = find_spans(system, BUILTIN)  # the search itself: rewrite() stops at MAX_SCAN_CHARS
    assert time.perf_counter() - start < 10  # was about a minute (quadratic)
    assert sum(s.kind == "timestamp" for s in spans) == 40_000


def test_system_text_over_the_scan_limit_is_left_in_place_and_noted():
    # A multi-megabyte system prompt would hold the event loop for seconds (about 1 s per MB
    # of detectors): past MAX_SCAN_CHARS per request the text is not searched.
    small = "Now: 2025-06-01T10:04:05Z."
    big = "Log  line at 2025-06-01T10:04:05Z. " * (MAX_SCAN_CHARS // 30)
    assert len(big) > MAX_SCAN_CHARS
    body = {"model": "m", "messages": [{"role": "system", "content": small}, {"role": "developer", "content": big},
                                       {"role": "user", "content": "hi"}]}
    out = rewrite(body)
    assert out.body["messages"][0]["content"] == "Now: [timestamp-1]."
    assert out.body["messages"][1]["content"] == big  # untouched, whitespace included
    assert out.moved == {"timestamp": 1}
    assert out.notes == [f"volatile values not looked for in 1 text(s) of the system prompt: over the "
                         f"{MAX_SCAN_CHARS:,}-character scan limit per request (left in place)"]
    assert rewrite(out.body).body == out.body  # still idempotent
