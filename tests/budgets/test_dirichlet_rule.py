"""The "dirichlet" online rule (issue 36; docs/budgets.md, "Third pass"): Adaptive-Consistency's
Dirichlet criterion, P(the leader has the largest share) under Dirichlet(votes + 1).

Its probabilities are checked against a Monte Carlo estimate computed here independently (numpy
Dirichlet draws at a fixed seed) and against the closed-form Beta criterion where the two must
agree; then stop / go on on hand-made votes, the ladder, the replay's vote table against a live
run's, and the replay at many budgets making exactly the live allocator's decisions."""

from __future__ import annotations

import numpy as np
import pytest

from tests.budgets.test_online import _assert_replay_is_live, _random_votes
from tts.budgets.online import (
    OnlineAllocator,
    OnlinePolicy,
    decided,
    dirichlet_confidence,
    plan_round,
    vote_confidence,
)
from tts.budgets.replay.online import OnlineSequence, streak_table, vote_table

DRAWS = 400_000


def _monte_carlo(votes, prior=1.0, top_k=5, seed=0):
    """P(the leader's share is the largest) from Dirichlet draws, and the estimate's standard error.
    A vote with one answer gets a second answer with no votes; a tie for the lead counts for the
    first of the tied answers only when its share is strictly the largest (ties have probability 0)."""
    v = sorted(votes, reverse=True)[:top_k]
    v = v + [0] * (2 - len(v))
    shares = np.random.default_rng(seed).dirichlet(np.asarray(v, dtype=float) + prior, DRAWS)
    hit = shares[:, 0] > shares[:, 1:].max(axis=1)
    p = hit.mean()
    return p, np.sqrt(p * (1 - p) / DRAWS) + 1e-12


@pytest.mark.parametrize("votes", [(6, 4, 1), (7, 2, 2), (10, 3, 3), (12, 4, 4, 4), (20, 18, 10, 3, 1),
                                   (3, 3, 1), (2, 2, 2), (5, 1, 1, 1, 1), (9, 2, 2, 1), (30, 12, 11, 2)])
def test_the_dirichlet_probability_is_the_monte_carlo_estimate(votes):
    p, se = _monte_carlo(votes)
    assert dirichlet_confidence(np.array([votes]))[0] == pytest.approx(p, abs=5 * se)


def test_a_smaller_prior_reaches_the_monte_carlo_estimate_too():
    p, se = _monte_carlo((6, 2, 1), prior=0.5)
    assert dirichlet_confidence([6, 2, 1], prior=0.5) == pytest.approx(p, abs=5 * se)


def test_two_answers_or_fewer_give_the_beta_criterion_and_only_the_top_k_count():
    # Dirichlet over two answers is the Beta criterion (closed form: P(Beta(v1+1, v2+1) > 1/2)).
    for v1, v2 in [(4, 0), (3, 0), (7, 2), (20, 18), (1, 1), (40, 3)]:
        assert dirichlet_confidence([v1, v2]) == pytest.approx(vote_confidence(v1, v2), abs=1e-8)
        assert dirichlet_confidence([v1, v2, 0, 0]) == pytest.approx(vote_confidence(v1, v2), abs=1e-8)
    assert dirichlet_confidence([4]) == pytest.approx(1 - 0.5**5, abs=1e-9)  # one answer races a zero-vote one
    # An m-way tie for the lead: 1/m.
    assert dirichlet_confidence([3, 3, 3]) == pytest.approx(1 / 3, abs=1e-8)
    # Answers beyond the five most voted are left out, as in the authors' code.
    assert dirichlet_confidence([5, 1, 1, 1, 1, 1, 1]) == pytest.approx(dirichlet_confidence([5, 1, 1, 1, 1]))
    assert dirichlet_confidence([5, 1, 1, 1, 1, 1, 1], top_k=7) < dirichlet_confidence([5, 1, 1, 1, 1]) - 0.05
    # P(p1 > every other share) <= P(p1 > p2), and P(p1 > p2) under the Dirichlet is the Beta criterion:
    # the Dirichlet rule never stops a vote the Beta rule leaves open.
    rng = np.random.default_rng(3)
    votes = np.sort(rng.integers(0, 20, (300, 5)), axis=1)[:, ::-1]
    assert (dirichlet_confidence(votes) <= vote_confidence(votes[:, 0], votes[:, 1]) + 1e-9).all()
    # Order does not matter; a batch is evaluated row by row.
    np.testing.assert_allclose(dirichlet_confidence([[1, 7, 2], [7, 2, 1]]), dirichlet_confidence([7, 2, 1]))


@pytest.mark.parametrize("votes,n,stop", [
    ((4,), 4, True),            # unanimous 4: 1 - 0.5**5 = 0.969
    ((3,), 3, False),           # unanimous 3: 0.9375
    ((6, 1, 1), 8, False),      # Beta says stop (0.965): the third answer's vote says go on (0.935)
    ((6, 1), 7, True),          # ... without it, stop
    ((10, 3, 3), 16, False),    # Beta 0.971, Dirichlet 0.947: go on
    ((8, 2, 1), 11, True),      # 0.959: stop
    ((12, 4, 4, 4), 24, False), # 0.936
    ((11, 2, 2, 2), 17, True),  # 0.982
    ((6, 1, 1), 64, True),      # the cap stops everything
    ((10, 1, 1), 21, True),     # a lead of 9 with 8 samples left (cap 29) cannot be overtaken
])
def test_the_dirichlet_rule_stops_or_goes_on(votes, n, stop):
    v = sorted(votes, reverse=True)
    n_max = 29 if n == 21 else 64
    top2 = v[1] if len(v) > 1 else 0
    p, se = _monte_carlo(votes)
    if n < n_max and v[0] - top2 <= n_max - n:  # decided by the probability: check its side at 0.95 independently
        assert bool(p >= 0.95) is stop and abs(p - 0.95) > 5 * se
    padded = np.array([v + [0] * (5 - len(v))])
    assert bool(decided([v[0]], [top2], [n], n_max, rule="dirichlet", votes=padded)[0]) is stop
    # Beta judges only the two leaders: the cases with a third answer are where the rules part.
    if votes in ((6, 1, 1), (10, 3, 3)):
        assert decided([v[0]], [top2], [n], n_max, rule="beta")[0]


def test_the_dirichlet_rule_rises_through_betas_ladder_and_refuses_what_it_cannot_use():
    assert OnlinePolicy(rule="dirichlet").stages == [("dirichlet", 0.95), ("dirichlet", 0.99),
                                                     ("dirichlet", 0.999), ("exact", 0.95)]
    assert [c for _, c in OnlinePolicy(rule="dirichlet", ladder=(0.97, 0.99)).stages] == [0.95, 0.97, 0.99, 0.95]
    with pytest.raises(ValueError, match="votes"):
        decided([4], [0], [4], 64, rule="dirichlet")
    with pytest.raises(ValueError, match="votes="):
        plan_round(OnlinePolicy(rule="dirichlet"), np.array([4]), np.array([0]), np.array([4]), np.array([64]), 0)
    with pytest.raises(ValueError, match="top_k"):
        OnlinePolicy(rule="dirichlet", top_k=1)
    with pytest.raises(ValueError, match="length_weight"):
        OnlinePolicy(rule="dirichlet", length_weight=1.0)
    OnlinePolicy(rule="dirichlet", confirm_window=4)  # the window confirms its stop, as Beta's


def test_rounds_serve_the_least_dirichlet_confident_first_and_reopen_on_the_next_bar():
    policy = OnlinePolicy(rule="dirichlet", n_max=64, chunk=4)
    # Same two leaders (6-2, n = 8..10), more third-answer votes = less confident.
    votes = np.array([[6, 2, 0, 0, 0], [6, 2, 2, 0, 0], [6, 2, 1, 0, 0], [12, 0, 0, 0, 0]])
    top1, top2, n = votes[:, 0], votes[:, 1], votes.sum(axis=1)
    who, k, stage = plan_round(policy, top1, top2, n, np.full(4, 64), 0, votes=votes)
    assert (who.tolist(), stage) == ([1, 2, 0], 0)  # 12-0 is decided; 6-2-2 least confident
    assert k.tolist() == [4, 4, 4]
    # Every vote decided at 0.95 (4-0: 0.969, 12-0): the next bar (0.99) reopens only 4-0.
    votes = np.array([[4, 0, 0, 0, 0], [12, 0, 0, 0, 0]])
    who, _, stage = plan_round(policy, votes[:, 0], votes[:, 1], votes.sum(axis=1), np.full(2, 64), 0, votes=votes)
    assert (who.tolist(), stage) == ([0], 1)


@pytest.mark.parametrize("seed", range(3))
def test_the_replay_vote_table_is_the_live_runs_votes(seed):
    rng = np.random.default_rng(seed)
    size, width = 10, 25
    answers = np.where(rng.random((size, width)) < 0.15, -1, rng.integers(0, 7, (size, width)))
    table = vote_table(answers, 5)
    alloc = OnlineAllocator(list(range(size)), 1e12, OnlinePolicy(rule="dirichlet"))
    for t in range(width):
        for p in range(size):
            alloc.record(p, None if answers[p, t] < 0 else str(answers[p, t]), 1.0)
        np.testing.assert_array_equal(alloc.vote_matrix(), table[:, t])
        np.testing.assert_array_equal(table[:, t, 0], alloc.top1)
        np.testing.assert_array_equal(table[:, t, 1], alloc.top2)


@pytest.mark.parametrize("setting", [{}, {"confirm_window": 4}, {"top_k": 3}, {"ladder": (0.97, 0.99)}])
@pytest.mark.parametrize("seed", range(5))
def test_the_replay_at_many_budgets_makes_the_allocators_decisions(seed, setting):
    """:class:`OnlineSequence` (all budgets at once, from :func:`vote_table`) against
    :class:`OnlineAllocator` driven sample by sample: the same rounds and samples per problem at
    every budget."""
    rng = np.random.default_rng(100 + seed)
    size, width = 25, 40
    answers, costs, _, top = _random_votes(rng, size, width)
    policy = OnlinePolicy(rule="dirichlet", n_max=int(rng.integers(8, width + 1)), chunk=int(rng.integers(1, 6)),
                          escalate=bool(seed % 2), **setting)
    seq = OnlineSequence.build(top[..., -1], top[..., -2], costs, np.full(size, policy.n_max), policy,
                               streak=streak_table(answers), votes=vote_table(answers, policy.top_k))

    def worst(q, m):
        return 100.0 * np.asarray(m)

    budgets = np.sort(rng.uniform(200, costs.sum() * 1.2, 8).round())
    _assert_replay_is_live(seq, answers, costs, policy, budgets, worst)


def test_a_replay_with_the_dirichlet_rule_decides_otherwise_than_beta_and_ends_on_uniforms_vote(tmp_path):
    from tests.budgets.test_window_and_length_rules import _pool
    from tts.budgets.replay.simulate import SimulateConfig, simulate

    pool = _pool(tmp_path)  # wrong answers spread over three values: votes with three or four answers
    common = dict(target_n=16, modes=("online",), orderings=3, max_n=16, bootstrap=50)
    runs = {rule: simulate(pool, SimulateConfig(**common, rule=rule)) for rule in ("beta", "dirichlet")}
    steps = {rule: [np.concatenate(s, axis=1) for s in r.decisions["online"].steps] for rule, r in runs.items()}
    assert any(a.shape != b.shape or (a != b).any() for a, b in zip(steps["beta"], steps["dirichlet"]))
    assert runs["dirichlet"].modes["online"].acc_change.mean == pytest.approx(0.0, abs=1e-12)


def _adaptive_quadrature(votes, prior=1.0, top_k=5):
    """The same probability by scipy's adaptive quadrature of the Gamma form (another method than
    the rule's fixed Gauss-Legendre nodes): the leader's density times the others' CDFs (answers
    with no votes beyond the runner-up are no answers)."""
    from scipy import integrate, stats

    v = sorted(votes, reverse=True)[:top_k]
    v = v + [0] * (2 - len(v))
    a = [x + prior for x in v]
    others = [a[1]] + [ai for ai, vi in zip(a[2:], v[2:]) if vi > 0]

    def integrand(x):
        return stats.gamma.pdf(x, a[0]) * np.prod([stats.gamma.cdf(x, b) for b in others])

    spread = 30 * np.sqrt(a[0])
    return integrate.quad(integrand, max(0.0, a[0] - spread), a[0] + spread + 60, points=[max(a[0] - 1, 0.5)],
                          epsabs=1e-14, epsrel=1e-12, limit=2000)[0]


@pytest.mark.parametrize("votes", [(3, 2, 2, 1), (40, 38, 37, 35, 30), (64, 60, 1), (6, 251, 246, 230, 244),
                                   (266, 252, 110, 260, 252), (300, 299, 298, 297, 296, 295), (1,), (0, 0, 0)])
def test_the_probability_equals_adaptive_quadrature_to_1e_10_up_to_300_votes(votes):
    # The first version (48 nodes over +-12 sd) was off by 1.7e-5 on (266, 252, 110, 260, 252).
    assert dirichlet_confidence(np.array(votes)) == pytest.approx(_adaptive_quadrature(votes), abs=1e-10)


def test_many_problems_at_once_each_as_alone_a_single_answer_padded_and_every_value_a_probability():
    single = dirichlet_confidence(np.array([[3], [1], [0]]))  # one answer each: races an answer with none
    np.testing.assert_allclose(single, dirichlet_confidence(np.array([[3, 0], [1, 0], [0, 0]])), rtol=0, atol=1e-15)
    np.testing.assert_allclose(single, vote_confidence(np.array([3, 1, 0]), np.zeros(3)), atol=1e-10)
    rng = np.random.default_rng(0)
    votes = np.concatenate([rng.integers(0, 300, size=(200, 6)), np.array([[300, 0, 0, 0, 0, 0], [0] * 6])])
    p = dirichlet_confidence(votes)
    assert ((p >= 0.0) & (p <= 1.0)).all()
    np.testing.assert_allclose(p[:5], [dirichlet_confidence(v) for v in votes[:5]], rtol=0, atol=1e-15)
