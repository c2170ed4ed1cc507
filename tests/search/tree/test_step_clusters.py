"""ETS's step clusters (tts/search/tree/step_clusters.py) on inputs small enough to work out by hand:
the TF-IDF vectors (sublinear tf, smoothed idf, unit rows), average-linkage clusters at a
threshold, and labels per tree."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest

from tts.search.tree.step_clusters import StepClusterer, agglomerate, tfidf_vectors
from tts.search.tree.stepwise import StepState
from tts.types import Problem


def _unit(row):
    norm = math.sqrt(sum(v * v for v in row))
    return [v / norm for v in row]


def test_character_tfidf_is_sublinear_smoothed_and_of_unit_rows_worked_out_by_hand():
    # Bigrams without whitespace: "ab" -> {ab}; "abc" -> {ab, bc}; "a b a b" -> "abab" -> {ab: 2, ba: 1};
    # "" -> nothing. Columns in order of first appearance: ab, bc, ba. Four documents: idf = ln(5 / (1 + df)) + 1.
    vectors = tfidf_vectors(["ab", "abc", "a b a b", ""], ngrams=(2, 2))
    idf_ab, idf_rare = math.log(5 / 4) + 1, math.log(5 / 2) + 1
    expected = [[1.0, 0.0, 0.0], _unit([idf_ab, idf_rare, 0.0]), _unit([(1 + math.log(2)) * idf_ab, 0.0, idf_rare]),
                [0.0, 0.0, 0.0]]
    assert vectors.shape == (4, 3)
    assert np.allclose(vectors.toarray(), expected, rtol=0, atol=1e-12)


def test_character_ngrams_span_the_range_and_ignore_case():
    # "ABc" -> "abc": 2-grams ab, bc and the 3-gram abc, each once in the only document (idf 1).
    vectors = tfidf_vectors(["ABc"], ngrams=(2, 3))
    assert vectors.shape == (1, 3) and np.allclose(vectors.toarray(), [[3 ** -0.5] * 3])
    assert tfidf_vectors(["abc"], ngrams=(1, 1)).shape == (1, 3)


def test_word_tfidf_counts_words_and_punctuation_marks():
    # "x = 1." -> x, =, 1, . and "x = 2" -> x, =, 2: x and = are in both (idf 1), the rest in one
    # (idf ln(3/2) + 1); bigrams of words are joined by a space.
    vectors = tfidf_vectors(["x = 1.", "X = 2"], analyzer="word", ngrams=(1, 1)).toarray()
    rare = math.log(3 / 2) + 1
    assert vectors.shape == (2, 5)
    assert np.allclose(vectors[0], _unit([1, 1, rare, rare, 0])) and np.allclose(vectors[1], _unit([1, 1, 0, 0, rare]))
    assert tfidf_vectors(["x = 1"], analyzer="word", ngrams=(2, 2)).shape == (1, 2)  # "x =", "= 1"
    assert tfidf_vectors(["ab c", "a bc"], analyzer="word", ngrams=(2, 2)).shape == (2, 2)  # "ab c" is not "a bc"
    assert tfidf_vectors(["ab c"], analyzer="word", ngrams=(1, 1)).shape == (1, 2)  # words, not characters


def test_texts_that_are_all_empty_give_zero_columns_and_one_cluster():
    assert tfidf_vectors(["", " "]).shape == (2, 0)
    p = Problem("q", "?", "1")
    assert StepClusterer()([StepState(0, p, step=""), StepState(0, p, step=" ")]) == [0, 0]


def test_ngram_bounds_are_checked_with_what_to_change():
    for bad in ((0, 2), (3, 2)):
        message = rf"^ngrams must be \(lo, hi\) with 1 <= lo <= hi, got {re.escape(str(bad))}$"
        with pytest.raises(ValueError, match=message):
            tfidf_vectors(["ab"], ngrams=bad)
    assert tfidf_vectors(["ab"], ngrams=(1, 1)).shape == (1, 2)  # lo = hi = 1 is allowed


def test_average_linkage_merges_below_the_threshold_and_empty_steps_only_with_each_other():
    # Rows 0 and 3 point almost the same way (cosine distance 5e-5), rows 1 and 2 are empty (zero):
    # at distance 0 from each other and 1 from everything else.
    vectors = np.array([[1.0, 0.0], [0.0, 0.0], [0.0, 0.0], [1.0, 0.01]])
    assert agglomerate(vectors, 0.5) == [0, 1, 1, 0]
    assert agglomerate(vectors, 1.0) == [0, 0, 0, 0]  # everything within distance 1
    # Average linkage: {a, b} at distance 0.2 merge; c is 0.3 from a and 0.87 from b (average 0.58): apart at
    # 0.35 (single linkage would join it), together at 0.6 (complete linkage would not).
    far = np.array([[1.0, 0.0], [math.cos(math.acos(0.8)), math.sin(math.acos(0.8))],
                    [math.cos(-math.acos(0.7)), math.sin(-math.acos(0.7))]])
    assert agglomerate(far, 0.35) == [0, 0, 1] and agglomerate(far, 0.6) == [0, 0, 0]
    half = np.array([[1.0, 0.0], [0.5, math.sqrt(0.75)]])  # cosine distance 0.5
    assert agglomerate(half, 0.4) == [0, 1] and agglomerate(half, 0.5) == [0, 0]
    assert agglomerate(np.array([[1.0, 0.0]]), 0.5) == [0] and agglomerate(np.zeros((0, 2)), 0.5) == []


def test_a_clusterer_labels_each_tree_apart_and_counts_its_calls():
    p = Problem("q", "?", "1")
    states = [StepState(0, p, step="3 + 5 = 8"), StepState(1, p, step="3 + 5 = 8"), StepState(0, p, step="3+5=8."),
              StepState(1, p, step="Factor the quadratic first."), StepState(0, p, step="Factor it first.")]
    clusterer = StepClusterer()
    assert clusterer(states) == [0, 2, 0, 3, 1] and clusterer.calls == 1
    assert clusterer(states[:1]) == [0] and clusterer.calls == 2
    assert StepClusterer(threshold=2.0)(states) == [0, 1, 0, 1, 0]  # one cluster per tree
    seen = []
    embedded = StepClusterer(threshold=0.1, embed=lambda texts: seen.append(texts) or [[1.0, 0.0]] * len(texts))
    assert embedded(states) == [0, 1, 0, 1, 0] and seen == [["3 + 5 = 8", "3+5=8.", "Factor it first."],
                                                           ["3 + 5 = 8", "Factor the quadratic first."]]
    three = states + [StepState(2, p, step="x"), StepState(2, p, step="Factor it first.")]
    assert clusterer(three) == [0, 2, 0, 3, 1, 4, 5]  # each tree's labels after the last tree's
    short = StepClusterer(embed=lambda texts: [[1.0, 0.0]] * (len(texts) - 1))
    with pytest.raises(ValueError):  # an embedding that drops a text is an error, not a silent label
        short(states)
    for bad in (-0.1, 2.5):
        with pytest.raises(ValueError, match=rf"^threshold must be a cosine distance in \[0, 2\], got {bad}$"):
            StepClusterer(threshold=bad)
    assert StepClusterer(threshold=0.0).threshold == 0.0 and StepClusterer().embed is tfidf_vectors
