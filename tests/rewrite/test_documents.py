"""Retrieved documents moved before the conversation (router/rewrite/documents.py), example
by example; the invariants are in test_properties.py."""

from __future__ import annotations

import hashlib

import pytest

from bench.fake_vllm import block_hashes, prompt_tokens
from router.policy.loader import PolicyError, parse_policy
from router.rewrite import DocumentOptions, RewriteOptions, rewrite
from router.rewrite.documents import MAX_DOCUMENTS, SECTION_END, SECTION_HEADER, find_documents

A = '<document id="a">Alpha was founded on 2019-04-01.</document>'
B = '<document id="b">Beta ships weekly.</document>'
C = "<document>Gamma: no id.</document>"


def by_hash(*docs: str) -> list[str]:
    return sorted(docs, key=lambda d: hashlib.sha256(d.encode()).hexdigest())


def test_user_documents_move_to_a_sorted_section_before_the_conversation():
    body = {"messages": [
        {"role": "system", "content": "You answer from the documents."},
        {"role": "user", "content": f"Context:\n{B}\nWhen was Alpha founded?"},
        {"role": "assistant", "content": "I need Alpha's record."},
        {"role": "user", "content": [{"type": "text", "text": f"{A} Here it is."}]},
    ]}
    out = rewrite(body)
    first, last = out.body["messages"][1]["content"], out.body["messages"][3]["content"]
    assert first.startswith(SECTION_HEADER + "\n")
    label = {doc: f"[document-{i + 1}]" for i, doc in enumerate(by_hash(A, B))}
    assert first == (f"{SECTION_HEADER}\n" + "\n".join(f"{label[d]}\n{d}" for d in by_hash(A, B)) +
                     f"\n{SECTION_END}\n\nContext:\n{label[B]}\nWhen was Alpha founded?")
    assert last == [{"type": "text", "text": f"{label[A]} Here it is."}]
    assert out.documents == {"user": 2} and out.moved == {} and out.notes == []
    assert out.signals()["documents"] == {"user": 2}
    assert body["messages"][1]["content"].startswith("Context:")  # input not mutated


def test_same_documents_in_other_turns_and_order_share_the_prefix():
    def session(first: str, second: str) -> dict:
        return {"messages": [
            {"role": "system", "content": "You are the support bot of Acme."},
            {"role": "user", "content": f"{first}\nFirst question?"},
            {"role": "assistant", "content": "An answer."},
            {"role": "user", "content": f"Second question?\n{second}"},
        ]}

    one, two = rewrite(session(A + B, C)), rewrite(session(C, B + "\n" + A))
    other_docs = rewrite(session(A, C))
    assert one.prefix_hash == two.prefix_hash != other_docs.prefix_hash
    assert one.documents == two.documents == {"user": 3}
    # a vLLM-style replica sees the same leading blocks up to the end of the documents section
    section = one.body["messages"][1]["content"].split(SECTION_END)[0] + SECTION_END
    doc_blocks = len(prompt_tokens({"messages": [one.body["messages"][0], {"role": "user", "content": section}]})) // 16
    assert shared_blocks(one.body, two.body) >= doc_blocks > 0
    keep = RewriteOptions(documents=DocumentOptions(enabled=False))
    assert shared_blocks(rewrite(session(A + B, C), keep).body, rewrite(session(C, B + "\n" + A), keep).body) < 2


def shared_blocks(x: dict, y: dict) -> int:
    bx, by = block_hashes(prompt_tokens(x), 16), block_hashes(prompt_tokens(y), 16)
    return next((i for i, (p, q) in enumerate(zip(bx, by)) if p != q), min(len(bx), len(by)))


def test_system_documents_stay_in_the_system_message_after_the_instructions():
    system = f"Today is 2025-06-01T10:00:00Z.\n<documents>\n{B}\n{A}\n</documents>\nCite sources.  "
    out = rewrite({"messages": [{"role": "system", "content": system}, {"role": "user", "content": "hi"}]})
    text = out.body["messages"][0]["content"]
    head, section = text.split("\n\n" + SECTION_HEADER + "\n")
    label = {doc: f"[document-{i + 1}]" for i, doc in enumerate(by_hash(A, B))}
    assert head == f"Today is [timestamp-1].\n<documents>\n{label[B]}\n{label[A]}\n</documents>\nCite sources."
    assert "2019-04-01" in section  # a date in a document is content, not a volatile value
    assert out.moved == {"timestamp": 1} and out.documents == {"system": 2}
    assert out.body["messages"][1]["content"].endswith("[timestamp-1] = 2025-06-01T10:00:00Z")


def test_as_sent_order_keeps_the_retrieval_rank():
    body = {"messages": [{"role": "user", "content": f"{B}{A}{C} q"}]}
    out = rewrite(body, RewriteOptions(documents=DocumentOptions(order="as_sent")))
    content = out.body["messages"][0]["content"]
    assert content.index(B) < content.index(A) < content.index(C)
    assert content.endswith("[document-1][document-2][document-3] q")


def test_documents_wrapper_without_inner_documents_is_one_document():
    wrapped = "<documents>\n1. Alpha\n2. Beta\n</documents>"
    out = rewrite({"messages": [{"role": "user", "content": f"{wrapped}\nq"}]})
    assert out.body["messages"][0]["content"].endswith(f"[document-1]\n{wrapped}\n{SECTION_END}\n\n[document-1]\nq")


def test_policy_markers_and_tags():
    opts = DocumentOptions(tags=("doc",), markers=(("-----BEGIN-----", "-----END-----"),))
    text = "x <doc>1</doc> <document>2</document> -----BEGIN-----3-----END----- -----BEGIN----- open"
    spans = [text[s:e] for s, e in find_documents(text, opts)]
    assert spans == ["<doc>1</doc>", "-----BEGIN-----3-----END-----"]


def test_unclosed_and_already_rewritten_are_left_with_a_note():
    unclosed = {"messages": [{"role": "user", "content": "<document>never closed " * 3}]}
    assert rewrite(unclosed).body is not unclosed and rewrite(unclosed).body["messages"] == unclosed["messages"]
    clash = {"messages": [{"role": "user", "content": f"see [document-1] and {A}"}]}
    out = rewrite(clash)
    assert out.body["messages"] == clash["messages"] and any("left in place" in n for n in out.notes)
    many = {"messages": [{"role": "user", "content": "<document>x</document>" * (MAX_DOCUMENTS + 1)}]}
    out = rewrite(many)
    assert out.body["messages"] == many["messages"] and any("more than" in n for n in out.notes)


def test_assistant_and_tool_messages_are_not_touched():
    msgs = [{"role": "user", "content": "q"}, {"role": "assistant", "content": A},
            {"role": "tool", "tool_call_id": "c1", "content": B}]
    assert rewrite({"messages": msgs}).body["messages"] == msgs


async def test_decision_records_documents():
    from router.engine import Router, RoutingRequest

    router = Router(parse_policy(POLICY))
    body = {"model": "auto", "messages": [{"role": "user", "content": f"{A}\n{B}\nq"}]}
    decision = await router.decide(RoutingRequest(endpoint="chat", body=body, tenant="acme"))
    assert decision.record.signals["rewrite"]["documents"] == {"user": 2}
    content = decision.body["messages"][0]["content"]
    first, second = by_hash(A, B)
    assert content.startswith(SECTION_HEADER) and content.index(first) < content.index(second)
    as_sent = Router(parse_policy(POLICY.replace("order: sorted", "order: as_sent")))
    decision = await as_sent.decide(RoutingRequest(endpoint="chat", body=body, tenant="acme"))
    content = decision.body["messages"][0]["content"]
    assert content.index(A) < content.index(B)
    off = Router(parse_policy(POLICY.replace("order: sorted", "enabled: false")))
    decision = await off.decide(RoutingRequest(endpoint="chat", body=body, tenant="acme"))
    assert decision.body["messages"] == body["messages"] and decision.record.signals["rewrite"]["documents"] == {}


@pytest.mark.parametrize(("snippet", "line", "message"), [
    ("tags: [document, '<doc>']", 9, "documents.tags[1]: '<doc>' is not a tag name"),
    ("markers: [{start: '[document-', end: 'x'}]", 9, "documents.markers[0].start: '[document-' contains text the rewriter itself writes"),
    ("order: random", 9, "documents.order: Input should be 'sorted' or 'as_sent'"),
    ("tags: [doc, doc]", 9, "documents: tags: duplicates doc"),
])
def test_policy_rejects_bad_document_config(snippet, line, message):
    text = POLICY.replace("order: sorted", snippet)
    with pytest.raises(PolicyError) as err:
        parse_policy(text, source="policy.yaml")
    assert f"policy.yaml:{line} rewrite.{message}" in str(err.value)


POLICY = """
version: 1
backends:
  - {name: f, kind: fake, model: demo}
routes:
  - {name: auto, backends: [f]}
rewrite:
  documents:
    order: sorted
"""
