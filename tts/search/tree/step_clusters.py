"""Clusters of search nodes by what their latest step says, for ETS's semantic-coverage term.

ETS (Hooper et al. 2025, arXiv:2502.13575) rewards keeping nodes from distinct clusters of step
meaning, which its authors find with a sentence-embedding model and average-linkage clustering.
No embedding model can be downloaded here, so the default embedding is lexical: TF-IDF over
character n-grams of the step (:func:`tfidf_vectors`). It groups steps worded nearly alike
("3 + 5 = 8" and "3+5=8."), not paraphrases; pass ``embed=`` (e.g. a sentence-transformers
model's ``encode``) to cluster by meaning.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any, Literal

from tts.search.tree.stepwise import StepState

CLUSTER_THRESHOLD = 0.3
"""Cosine distance at which the lexical clusterer stops merging (the paper's 0.05 is for its
embedding model; TF-IDF distances run larger)."""


_WORD = re.compile(r"\w+|[^\w\s]")


def tfidf_vectors(texts: Sequence[str], analyzer: Literal["char", "word"] = "char",
                  ngrams: tuple[int, int] = (2, 4)) -> Any:
    """TF-IDF vectors of ``texts`` (sublinear tf, smoothed idf, rows of unit length; an empty text is a zero row).

    Args:
        texts: The documents (one tree's steps: the idf is over them).
        analyzer: ``"char"``: character n-grams of the lower-cased text without whitespace;
            ``"word"``: n-grams of words and punctuation marks.
        ngrams: Smallest and largest n.

    Returns:
        A ``scipy.sparse`` CSR array, one row per text.
    """
    lo, hi = ngrams
    if not 1 <= lo <= hi:
        raise ValueError(f"ngrams must be (lo, hi) with 1 <= lo <= hi, got {ngrams}")
    counts: list[Counter[str]] = []
    for text in texts:
        # Characters ignore whitespace, so "x^2-5x+6" and "x^2 - 5x + 6" are one step.
        units: Sequence[str] = "".join(text.lower().split()) if analyzer == "char" else _WORD.findall(text.lower())
        joiner = "" if analyzer == "char" else " "
        counts.append(Counter(joiner.join(units[i:i + k]) for k in range(lo, hi + 1)
                              for i in range(len(units) - k + 1)))
    df: Counter[str] = Counter(g for c in counts for g in c)
    vocab = {g: j for j, g in enumerate(df)}
    import numpy as np
    from scipy.sparse import csr_array

    docs = len(texts)
    data, cols, indptr = [], [], [0]
    for c in counts:
        row = [(1.0 + math.log(k)) * (math.log((1 + docs) / (1 + df[g])) + 1.0) for g, k in c.items()]
        norm = math.sqrt(sum(v * v for v in row)) or 1.0
        data.extend(v / norm for v in row)
        cols.extend(vocab[g] for g in c)
        indptr.append(len(data))
    return csr_array((np.asarray(data, dtype=float), np.asarray(cols, dtype=np.int64), np.asarray(indptr)),
                     shape=(docs, len(vocab)))


def agglomerate(vectors: Any, threshold: float) -> list[int]:
    """Average-linkage agglomerative clustering at a cosine-distance threshold (labels 0, 1, ... by first appearance).

    A zero vector (an empty step) is at distance 1 from every other vector and 0 from other zero vectors.
    """
    import numpy as np
    from scipy.cluster.hierarchy import fcluster, linkage
    from scipy.spatial.distance import squareform

    dense = vectors.toarray() if hasattr(vectors, "toarray") else np.asarray(vectors, dtype=float)
    count = dense.shape[0]
    if count < 2:
        return [0] * count
    norms = np.linalg.norm(dense, axis=1)
    zero = norms == 0
    unit = dense / np.where(zero, 1.0, norms)[:, None]
    distance = np.clip(1.0 - unit @ unit.T, 0.0, 2.0)
    distance[zero, :] = 1.0
    distance[:, zero] = 1.0
    distance[np.ix_(zero, zero)] = 0.0
    distance = (distance + distance.T) / 2.0
    np.fill_diagonal(distance, 0.0)
    raw = fcluster(linkage(squareform(distance, checks=False), method="average"), t=threshold, criterion="distance")
    first: dict[int, int] = {}
    return [first.setdefault(int(r), len(first)) for r in raw]


class StepClusterer:
    """Clusters the nodes of each tree by their latest step (:attr:`StepState.step`), for ETS's coverage term.

    The default embedding is lexical (:func:`tfidf_vectors`), a stand-in for the paper's
    sentence-embedding model, which cannot be downloaded here: it groups steps worded nearly
    alike, not paraphrases. Pass ``embed`` to use a real embedding model.

    Args:
        threshold: Cosine distance at which average-linkage clustering stops merging (the paper
            uses 0.05 with its embedding model; TF-IDF distances need a looser one).
        embed: Texts -> one vector per text (rows of an array or sparse matrix), e.g. a
            sentence-transformers model's ``encode``. Called once per tree per depth.

    Example:
        >>> from tts.types import Problem
        >>> p = Problem("q", "?", "1")
        >>> steps = ["3 + 5 = 8", "3 + 5 = 8.", "Factor the quadratic first."]
        >>> StepClusterer()([StepState(0, p, step=s) for s in steps])
        [0, 0, 1]
    """

    def __init__(self, threshold: float = CLUSTER_THRESHOLD, embed: Callable[[list[str]], Any] | None = None) -> None:
        if not 0.0 <= threshold <= 2.0:
            raise ValueError(f"threshold must be a cosine distance in [0, 2], got {threshold}")
        self.threshold = threshold
        self.embed = embed or tfidf_vectors
        self.calls = 0

    def __call__(self, states: Sequence[StepState]) -> list[int]:
        """One label per state; states of different roots never share a label."""
        self.calls += 1
        groups: dict[int, list[int]] = {}
        for i, state in enumerate(states):
            groups.setdefault(state.root, []).append(i)
        labels = [0] * len(states)
        offset = 0
        for idx in groups.values():
            local = agglomerate(self.embed([states[i].step for i in idx]), self.threshold)
            for i, label in zip(idx, local, strict=True):
                labels[i] = offset + label
            offset += max(local) + 1
        return labels


