"""Parity: CodeT's dual execution agreement (Chen et al., 2022, arXiv:2207.10397, Sec. 2).

The reference, transcribed (our words, our code): hypothetical inlier programs x and generated
tests y; programs that pass the same tests form a consensus set S = (S_x, S_y); its score is
f(S) = |S_x| * |S_y|; the answer is a program from the set with the highest score.
"""

from __future__ import annotations

import itertools
import random

from tts.search.sampling.codet import consensus

PINNED = {"strategy:codet"}


def codet_reference(passed: list[tuple[bool, ...]]) -> set[int]:
    """Every program index in a consensus set of the highest score."""
    sets: dict[tuple[bool, ...], list[int]] = {}
    for i, p in enumerate(passed):
        sets.setdefault(p, []).append(i)
    score = {k: len(v) * sum(k) for k, v in sets.items()}
    top = max(score.values())
    return {i for k, v in sets.items() if score[k] == top for i in v}


def test_the_chosen_program_is_in_a_best_scoring_consensus_set_on_random_pass_matrices():
    rng = random.Random(0)
    for _ in range(300):
        tests = rng.randint(1, 5)
        patterns = [tuple(rng.random() < 0.5 for _ in range(tests)) for _ in range(rng.randint(1, 4))]
        passed = [rng.choice(patterns) for _ in range(rng.randint(1, 10))]
        idx, score, _ = consensus(passed)
        assert idx in codet_reference(passed)
        assert score == sum(p == passed[idx] for p in passed) * sum(passed[idx])


def test_programs_that_did_not_run_are_in_no_set_and_ties_go_to_the_earliest():
    passed = [None, (True, False), (False, True), None]
    idx, score, votes = consensus(passed)
    assert (idx, score) == (1, 1.0) and votes == {"10": 1.0, "01": 1.0}
    assert consensus([None, None]) == (None, 0.0, {})
    assert all(consensus(list(p))[0] == 0 for p in itertools.permutations([(True,), (True,)]))
