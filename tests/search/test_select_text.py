"""Free-text votes (search.base.select_text via vote(free_text=True)): minimum Bayes risk, where a
verifier's weights decide whose agreement counts."""

from __future__ import annotations

import pytest

from tts.search.base import vote
from tts.types import Sample

CAT = ["the cat sat on the mat", "the cat sat on a mat"]
DOG = ["a dog ran in the park", "a dog ran in a park", "the dog ran in the park"]
TEXTS = CAT + DOG


def samples(texts):
    return [Sample(t, t) for t in texts]


def test_unweighted_the_text_most_like_the_others_wins():
    answer, share, utilities, idx = vote(samples(TEXTS), free_text=True)
    assert answer in DOG and TEXTS[idx] == answer
    assert set(utilities) == set(TEXTS) and all(0.0 <= u <= 1.0 for u in utilities.values())
    assert share == utilities[answer] == max(utilities.values())
    # all weights zero: as unweighted
    assert vote(samples(TEXTS), [0.0] * 5, free_text=True)[:3] == (answer, share, utilities)


def test_weights_decide_whose_agreement_counts():
    answer = vote(samples(TEXTS), [0.9, 0.9, 0.1, 0.1, 0.1], free_text=True)[0]
    assert answer in CAT
    assert vote(samples(TEXTS), [0.1, 0.1, 0.9, 0.9, 0.9], free_text=True)[0] in DOG
    # a negative score counts as no weight, not as weight against
    assert vote(samples(TEXTS), [5, 5, -1, -1, -1], free_text=True)[:3] == vote(
        samples(TEXTS), [5, 5, 0, 0, 0], free_text=True)[:3]


def test_unanswered_samples_abstain_and_repeated_texts_keep_their_best_utility():
    texts = samples(TEXTS)
    mixed = [Sample("no answer", None)] + texts + [Sample(CAT[0], CAT[0])]
    answer, share, utilities, idx = vote(mixed, free_text=True)
    assert mixed[idx].answer == answer and idx != 0
    assert set(utilities) == set(TEXTS) and share == pytest.approx(max(utilities.values()))
    assert vote([Sample("x", None)] * 3, free_text=True) == (None, 0.0, {}, None)
