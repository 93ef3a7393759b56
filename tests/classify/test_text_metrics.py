"""Input bounding and metric maths (no torch needed)."""

from hypothesis import given
from hypothesis import strategies as st

from router.classify import metrics
from router.classify.text import CHAR_WINDOW, clean, head_tail


def test_auc_known_values():
    assert metrics.auc([0.1, 0.4, 0.35, 0.8], [0, 0, 1, 1]) == 0.75
    assert metrics.auc([1, 1, 1], [0, 1, 1]) == 0.5  # ties count half
    assert metrics.auc([0.2, 0.3], [1, 1]) is None


def test_macro_f1_and_ece():
    assert metrics.macro_f1([0, 1, 1], [0, 1, 1]) == 1.0
    assert metrics.macro_f1([0, 0, 0], [0, 1, 1]) == (0.5 + 0.0) / 2
    assert metrics.ece([0.0, 1.0], [0, 1]) == 0.0


def test_head_tail_keeps_both_ends():
    ids = list(range(100))
    assert head_tail(ids, 10, 3) == [0, 1, 2, 93, 94, 95, 96, 97, 98, 99]
    assert head_tail(ids[:5], 10, 3) == ids[:5]


@given(st.text(max_size=20_000))
def test_clean_is_bounded_and_encodable(text):
    out = clean(text)
    assert len(out) <= 2 * CHAR_WINDOW + 3
    out.encode("utf-8")  # never raises, whatever the input


def test_clean_replaces_lone_surrogates():
    raw = b"caf\xe9 \xff\xfe".decode("utf-8", "surrogateescape")
    assert clean(raw).encode("utf-8")
    assert clean("x" * 100_000).endswith("x")


def test_scan_windows_cover_the_middle_then_both_ends_of_it():
    from router.classify.text import head_tail, scan_windows

    ids = list(range(1000))
    assert scan_windows(ids[:100], 126, 30, 8) == ([], 100)  # fits the main window
    assert scan_windows(ids, 126, 30, 0) == ([], 126)
    windows, seen = scan_windows(ids, 126, 30, 100)
    main = set(head_tail(ids, 126, 30))
    assert seen == 1000 and set().union(main, *map(set, windows)) == set(ids)
    assert all(len(w) <= 126 for w in windows)
    assert all(len(set(a) & set(b)) >= 16 for a, b in zip(windows, windows[1:]))  # overlapping, phrases stay whole
    every, seen_every = scan_windows(ids, 126, 30, None)  # no limit: the whole prompt
    assert seen_every == 1000 and set().union(main, *map(set, every)) == set(ids)
    assert all(len(set(a) & set(b)) >= 32 for a, b in zip(every, every[1:]))
    longer, _ = scan_windows(ids + [7] * 500, 126, 30, None)
    assert longer[:len(every) - 2] == every[:-2]  # fixed offsets: a shared prefix, shared windows
    few, seen_few = scan_windows(ids, 126, 30, 4, overlap=16)
    covered = set().union(main, *map(set, few))
    assert len(few) == 4 and seen_few == len(covered) < 1000
    assert {30, 249, 750, 903} <= covered and 500 not in covered  # both ends of the middle, not its centre
