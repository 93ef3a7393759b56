"""The fake vLLM replica's cache model: tail-first eviction (as vLLM) and miss causes."""

from bench.fake_vllm import ReplicaModel, ReplicaState


def test_a_requests_tail_is_evicted_before_its_shared_head():
    st = ReplicaState(ReplicaModel(capacity_blocks=3))
    st.insert([1, 2, 3])
    st.insert([9])
    assert list(st.cache) == [2, 1, 9] and st.lookup([1, 2, 3]) == 2


def test_misses_are_classified_by_cause():
    ledger: dict[int, int] = {}
    a = ReplicaState(ReplicaModel(capacity_blocks=2, block_tokens=16), index=0, ledger=ledger)
    b = ReplicaState(ReplicaModel(capacity_blocks=2, block_tokens=16), index=1, ledger=ledger)
    a.insert([1, 2])
    a.insert([3, 4])  # evicts 1 and 2 from a
    b.classify_misses([3, 5], b.lookup([3, 5]), 40)  # 3 only ever cached on a; 5 never; 8 tokens partial
    a.classify_misses([1, 2], a.lookup([1, 2]), 32)
    assert b.misses == {"new": 16, "partial": 8, "evicted": 0, "elsewhere": 16}
    assert a.misses == {"new": 0, "partial": 0, "evicted": 32, "elsewhere": 0}
