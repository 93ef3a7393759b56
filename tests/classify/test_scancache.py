"""The scan heads' per-window cache (router/classify/scancache.py): bounded LRU, exact round trip."""

import copy

import pytest

torch = pytest.importorskip("torch")

from router.classify.scancache import ScanCache, window_key  # noqa: E402


def test_round_trip_is_exact_and_counted():
    cache = ScanCache(4)
    row = torch.tensor([0.25, -3.5, 1e-7], dtype=torch.float32)
    cache.put(window_key([101, 7, 102]), row)
    assert torch.equal(cache.get(window_key([101, 7, 102])), row)
    assert cache.get(window_key([101, 8, 102])) is None
    assert (cache.hits, cache.misses) == (1, 1)


def test_keys_differ_by_ids_and_order():
    assert window_key([1, 2, 3]) != window_key([3, 2, 1]) != window_key([1, 2])
    assert window_key([1, 2, 3]) == window_key([1, 2, 3]) and len(window_key([1])) == 16


def test_least_recently_used_goes_first_and_size_is_bounded():
    cache = ScanCache(2)
    a, b, c = (window_key([i]) for i in range(3))
    cache.put(a, torch.zeros(1))
    cache.put(b, torch.ones(1))
    assert cache.get(a) is not None  # a is now the most recent
    cache.put(c, torch.ones(1))
    assert len(cache) == 2 and cache.get(b) is None and cache.get(a) is not None and cache.get(c) is not None
    off = ScanCache(0)
    off.put(a, torch.zeros(1))
    assert len(off) == 0 and off.get(a) is None


def test_a_copy_starts_empty_with_the_same_bound():
    cache = ScanCache(3)
    cache.put(window_key([1]), torch.zeros(2))
    twin = copy.deepcopy(cache)
    assert (len(twin), twin.capacity) == (0, 3)
    twin.put(window_key([1]), torch.ones(2))
    assert torch.equal(cache.get(window_key([1])), torch.zeros(2))
