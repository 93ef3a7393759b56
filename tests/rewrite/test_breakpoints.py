"""A client's ``cache_control`` breakpoints as the stable-prefix boundary: the conversation
up to the last breakpoint after the system messages joins the prefix hash and the stable
prefix text; the marks themselves change neither."""

from __future__ import annotations

from backends.openai_shapes import breakpoint_messages, stable_prefix_text
from router.rewrite import prefix_hash

MARK = {"type": "ephemeral"}
SYSTEM = {"role": "system", "content": "You answer questions about the attached contract."}


def _user(text: str, marked: bool = False) -> dict:
    part = {"type": "text", "text": text, **({"cache_control": MARK} if marked else {})}
    return {"role": "user", "content": [part]}


def test_marks_do_not_change_the_hash():
    plain = {"messages": [{"role": "system", "content": [{"type": "text", "text": "Be brief."}]}, _user("hi")],
             "tools": [{"type": "function", "function": {"name": "f"}}]}
    marked = {"messages": [{"role": "system", "content": [{"type": "text", "text": "Be brief.", "cache_control": MARK}]},
                           _user("hi")],
              "tools": [{"type": "function", "function": {"name": "f"}, "cache_control": MARK}]}
    assert prefix_hash(plain) == prefix_hash(marked)


def test_without_a_breakpoint_after_the_system_the_conversation_is_not_in_the_prefix():
    a = {"messages": [SYSTEM, _user("first question")]}
    b = {"messages": [SYSTEM, _user("another question")]}
    assert breakpoint_messages(a["messages"]) == [] and prefix_hash(a) == prefix_hash(b)


def test_the_conversation_up_to_the_last_breakpoint_is_in_the_prefix():
    contract = _user("<contract text> " * 50, marked=True)
    one = {"messages": [SYSTEM, contract, _user("Who signs it?")]}
    two = {"messages": [SYSTEM, contract, _user("When does it end?")]}
    other = {"messages": [SYSTEM, _user("<another contract> " * 50, marked=True), _user("Who signs it?")]}
    assert breakpoint_messages(one["messages"]) == [contract]
    # Questions after the breakpoint share the prefix; another document before it does not.
    assert prefix_hash(one) == prefix_hash(two) != prefix_hash(other)
    assert prefix_hash(one) != prefix_hash({"messages": [SYSTEM, _user("Who signs it?")]})
    text = stable_prefix_text(one)
    assert "<contract text>" in text and SYSTEM["content"] in text and "Who signs it?" not in text


def test_the_last_breakpoint_wins_and_message_level_marks_count():
    turns = [SYSTEM, _user("doc", marked=True), {"role": "assistant", "content": "ok"},
             {"role": "user", "content": "more", "cache_control": MARK}, _user("now?")]
    assert [m["content"] for m in breakpoint_messages(turns)] == [turns[1]["content"], "ok", "more"]


def test_system_text_parts_count_in_the_stable_text():
    body = {"messages": [{"role": "system", "content": [{"type": "text", "text": "Part one."},
                                                        {"type": "text", "text": "Part two."}]}, _user("hi")]}
    assert stable_prefix_text(body) == "Part one.\nPart two."
