"""REBASE's width split, stated as properties over random scores (hypothesis): both roundings spend
the width exactly, never give a node a negative width, give nothing to unscored nodes while any node
is scored, and never give a lower-scored node more than a higher-scored one beyond rounding."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from tts.search.tree.rebase import balanced_widths, ceil_widths

SCORES = st.lists(st.one_of(st.floats(0.0, 1.0), st.just(-1.0)), min_size=1, max_size=12)
WIDTH = st.integers(0, 64)
TEMPERATURE = st.floats(0.05, 5.0)


@given(SCORES, WIDTH, TEMPERATURE)
def test_both_roundings_spend_the_width_exactly_and_never_negatively(scores, width, temperature):
    for split in (balanced_widths(scores, width, temperature), ceil_widths(scores, width, temperature)):
        assert len(split) == len(scores) and all(w >= 0 for w in split)
        assert sum(split) == width


@given(SCORES, WIDTH, TEMPERATURE)
def test_unscored_nodes_get_nothing_while_any_node_is_scored(scores, width, temperature):
    if any(s >= 0 for s in scores):
        for split in (balanced_widths(scores, width, temperature), ceil_widths(scores, width, temperature)):
            assert all(w == 0 for s, w in zip(scores, split, strict=True) if s < 0)


@given(st.lists(st.floats(0.0, 1.0), min_size=2, max_size=12), WIDTH, TEMPERATURE)
def test_a_better_node_never_gets_less_than_a_worse_one_minus_one(scores, width, temperature):
    """Largest remainder rounds each share down or up by at most one child, so order holds within one."""
    split = balanced_widths(scores, width, temperature)
    for i, a in enumerate(scores):
        for j, b in enumerate(scores):
            if a > b:
                assert split[i] >= split[j] - 1
