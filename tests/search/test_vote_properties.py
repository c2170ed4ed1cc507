"""The plurality vote as properties over generated answers (tests/answer_forms.py): the order in
which samples arrive changes neither the votes each value gets nor, without a tie, the winner."""

from __future__ import annotations

from collections import Counter

from hypothesis import given
from hypothesis import strategies as st

from tests.answer_forms import values, written
from tts.search.base import vote
from tts.types import Sample

# A few values, each written several ways, so that groups merge across forms.
pools = st.lists(values, min_size=1, max_size=3, unique=True).flatmap(
    lambda vs: st.lists(st.sampled_from(vs).flatmap(written), min_size=1, max_size=8))


@given(pools, st.randoms(use_true_random=False))
def test_votes_ignore_sample_order(answers, random):
    shuffled = list(answers)
    random.shuffle(shuffled)
    results = []
    for order in (answers, shuffled):
        _, share, votes, idx = vote([Sample(a.text, a.text) for a in order])
        results.append((order[idx].value, share, sorted(votes.values())))
    truth = Counter(a.value for a in answers)
    assert results[0][2] == results[1][2] == sorted(float(c) for c in truth.values())
    assert results[0][1] == results[1][1] == max(truth.values()) / len(answers)
    top = [v for v, c in truth.items() if c == max(truth.values())]
    if len(top) == 1:  # without a tie the winner is the most common value, in any order
        assert results[0][0] == results[1][0] == top[0]
