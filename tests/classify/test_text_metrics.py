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
