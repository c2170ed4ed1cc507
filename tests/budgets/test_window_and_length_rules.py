"""Online stopping settings measured for issue 36 (docs/budgets.md): ESC's window rule
("window"), length as confidence in the Beta race (``length_weight``) and giving up on
spread-out votes (``give_up_after``). Hand-made votes where
each must stop or go on, the replay's tables against a live run's own bookkeeping, and the replay
at many budgets making exactly the live allocator's decisions."""

from __future__ import annotations

import numpy as np
import pytest

from tests.budgets.test_online import _assert_replay_is_live, _random_votes
from tests.pool_fakes import write_contested_pool
from tts.budgets.online import (
    OnlineAllocator,
    OnlinePolicy,
    decided,
    plan_round,
    race_votes,
    race_log_weight,
    stopping_stages,
)
from tts.budgets.replay.online import OnlineSequence, race_table, streak_table

# --- the window rule (ESC) ------------------------------------------------------------------------


@pytest.mark.parametrize("top1,top2,n,streak,window,stop", [
    (4, 0, 4, 4, 4, True),       # one unanimous window
    (3, 1, 4, 3, 4, False),      # the last three agree, the window holds four
    (6, 4, 10, 4, 4, True),      # contested, but the latest four agree: ESC stops
    (6, 4, 10, 4, 8, False),     # ... not with a window of eight
    (5, 0, 6, 0, 4, False),      # the latest sample had no answer: the run starts again
    (2, 1, 64, 1, 8, True),      # the cap stops everything
])
def test_the_window_rule_stops_on_a_run_of_equal_answers(top1, top2, n, streak, window, stop):
    assert bool(decided([top1], [top2], [n], 64, rule="window", confidence=window, streak=[streak])[0]) is stop


def test_the_window_rule_needs_the_runs_and_its_window_doubles_while_budget_is_left():
    with pytest.raises(ValueError, match="streak"):
        decided([4], [0], [4], 64, rule="window", confidence=4)
    assert stopping_stages("window", 4) == [("window", 4), ("window", 8), ("window", 16), ("exact", 0.95)]
    assert OnlinePolicy(rule="window", window=5).stages[0] == ("window", 5.0)
    with pytest.raises(ValueError, match="window must be >= 1"):
        OnlinePolicy(rule="window", window=0)


def test_a_live_run_counts_runs_of_equal_answers_as_the_replay_table_does():
    seq = ["7", "7", None, "7", "7", "7", "3", "7"]
    alloc = OnlineAllocator(["p"], budget=1e9, policy=OnlinePolicy(rule="window", window=3))
    live = []
    for a in seq:
        alloc.record("p", a, 1.0)
        live.append(int(alloc.streak[0]))
    ids = np.array([[-1 if a is None else int(a) for a in seq]])
    assert live == [1, 2, 0, 1, 2, 3, 1, 1]
    assert streak_table(ids)[0].tolist() == live


# --- length as confidence --------------------------------------------------------------------------


def test_the_race_is_resplit_by_mean_length_and_keeps_its_votes():
    assert race_votes(6, 12_000, 2, 16_000, 0.0) == (6.0, 2.0)        # alpha 0: plain votes
    r1, r2 = race_votes(6, 6 * 2000, 2, 2 * 8000, 1.0)                 # the leader's samples 4x shorter
    assert r1 + r2 == pytest.approx(8) and r1 == pytest.approx(8 * (6 / 2000) / (6 / 2000 + 2 / 8000))
    r1, r2 = race_votes(6, 6 * 8000, 2, 2 * 2000, 1.0)                 # ... 4x longer: the runner-up leads
    assert r1 < r2 and r1 == pytest.approx(8 * (6 / 8000) / (6 / 8000 + 2 / 2000)) and r1 + r2 == pytest.approx(8)
    assert race_votes(4, 9000, 0, 0, 1.0) == (4.0, 0.0)                # no runner-up: unchanged


def test_problems_without_votes_have_an_empty_race_without_numpy_warnings():
    # At a run's start no problem has votes: the race is 0 to 0, with no 0/0 division warned about.
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        r1, r2 = race_votes(np.array([0, 3]), np.array([0, 300]), np.array([0, 1]), np.array([0, 100]), 1.0)
    np.testing.assert_allclose([r1, r2], [[0.0, 3.0], [0.0, 1.0]])  # equal mean lengths: the plain votes


def test_an_answers_race_weight_is_its_votes_times_its_mean_length_to_the_minus_alpha():
    # 1 vote of 100 tokens, 2 votes of 50 on average, a one-token answer, no votes; a sample of no
    # tokens weighs as one of one token (not infinitely).
    np.testing.assert_allclose(np.exp(race_log_weight([1, 2, 1, 0, 1], [100, 100, 1, 50, 0], 1.0)),
                               [1 / 100, 2 / 50, 1.0, 0.0, 1.0])
    np.testing.assert_allclose(np.exp(race_log_weight([2, 3], [100, 900], 0.5)), [2 * 50 ** -0.5, 3 * 300 ** -0.5])


def test_the_race_keeps_its_split_where_the_weights_underflow():
    # At alpha 200 both weights of 3 samples of 5,000 tokens against 1 of 4,000 are below 1e-300
    # (0.0 in floats); the split is the ratio of the weights all the same: in logs,
    # log(e1 / e2) = log 3 - 200 log(5000) - (log 1 - 200 log(4000)) = log 3 - 200 log(1.25) < 0.
    r1, r2 = race_votes(3, 15_000, 1, 4_000, 200.0)
    share = 1 / (1 + np.exp(-(np.log(3) - 200 * np.log(1.25))))
    assert r1 + r2 == pytest.approx(4) and r1 == pytest.approx(4 * share) and r1 < r2  # the shorter one leads
    # Equal mean lengths: the plain votes, at any alpha.
    assert race_votes(3, 3_000, 1, 1_000, 500.0) == pytest.approx((3.0, 1.0))
    # The replay ranks two answers tied on votes by it too: the shorter one (8,000 tokens against
    # 8,100) leads, by the weights' ratio, not by underflowed zeros (which gave the later answer
    # all the votes).
    r1, r2 = race_table(np.array([[0, 1]]), np.array([[8_000, 8_100]]), 200.0)
    lead = 2 / (1 + np.exp(-200 * np.log(8_100 / 8_000)))
    assert r1[0, 1] == pytest.approx(lead) and r2[0, 1] == pytest.approx(2 - lead) and 1.8 < lead < 1.9


@pytest.mark.parametrize("lead_len,other_len,stop", [
    (2000, 8000, True),     # 6-2 whose leader thinks four times shorter: settled
    (5000, 5000, False),    # equal lengths: the plain horizon rule (6-2 at 8: risk 0.08 > 0.05)
    (8000, 2000, False),    # the leader thinks four times longer: not settled
])
def test_a_short_leader_stops_a_vote_that_plain_votes_leave_open(lead_len, other_len, stop):
    race = race_votes(np.array([6]), np.array([6 * lead_len]), np.array([2]), np.array([2 * other_len]), 1.0)
    assert bool(decided([6], [2], [8], 64, rule="horizon", race=race)[0]) is stop
    assert not decided([6], [2], [8], 64, rule="horizon")[0]


def test_the_exact_lead_test_reads_plain_votes_not_the_race():
    # 10-1 with 8 samples left cannot be overtaken, whatever the lengths say.
    race = race_votes(np.array([10]), np.array([10 * 9000]), np.array([1]), np.array([100]), 1.0)
    assert race[0][0] < race[1][0]
    assert decided([10], [1], [11], 19, rule="horizon", race=race)[0]


def test_length_weight_is_refused_where_there_is_no_race():
    with pytest.raises(ValueError, match="length_weight"):
        OnlinePolicy(rule="window", length_weight=1.0)
    with pytest.raises(ValueError, match="length_weight must be >= 0"):
        OnlinePolicy(length_weight=-1.0)


@pytest.mark.parametrize("seed", range(4))
def test_the_replay_race_table_is_the_live_runs_race(seed):
    rng = np.random.default_rng(seed)
    size, width = 12, 30
    answers = np.where(rng.random((size, width)) < 0.15, -1, rng.integers(0, 4, (size, width)))
    tokens = rng.integers(100, 9000, (size, width)).astype(float)
    r1, r2 = race_table(answers, tokens, 1.5)
    alloc = OnlineAllocator(list(range(size)), 1e12, OnlinePolicy(length_weight=1.5))
    for t in range(width):
        for p in range(size):
            alloc.record(p, None if answers[p, t] < 0 else str(answers[p, t]), tokens[p, t])
        live = alloc.race()
        np.testing.assert_allclose(live[0], r1[:, t], rtol=1e-12)
        np.testing.assert_allclose(live[1], r2[:, t], rtol=1e-12)


@pytest.mark.parametrize("top1,top2,n,streak,stop", [
    (4, 0, 4, 4, True),       # unanimous: the race and the window agree
    (7, 1, 8, 3, False),      # 7-1 (risk 0.015) whose runner-up vote is in the last four: go on
    (7, 1, 8, 4, True),       # ... the runner-up's vote came first: stop
    (20, 18, 38, 6, False),   # a near tie on a lucky run: the race says go on
    (10, 1, 11, 0, True),     # a lead 8 samples left cannot overturn stops whatever the window
])
def test_the_window_confirms_the_races_stop(top1, top2, n, streak, stop):
    n_max = 19 if n == 11 else 64
    got = decided([top1], [top2], [n], n_max, rule="horizon", streak=[streak], confirm=4)[0]
    assert bool(got) is stop
    with pytest.raises(ValueError, match="streak"):
        decided([4], [0], [4], 64, rule="horizon", confirm=4)
    with pytest.raises(ValueError, match="confirm_window"):
        OnlinePolicy(rule="window", confirm_window=4)


# --- giving up on spread-out votes -----------------------------------------------------------------


def test_a_spread_out_vote_is_given_up_in_the_first_stage_and_reopened_later():
    policy = OnlinePolicy(n_max=64, chunk=4, give_up_after=16, give_up_share=1 / 3)
    top1, top2, n = np.array([5, 5, 5, 7]), np.array([4, 4, 4, 6]), np.array([16, 12, 15, 16])
    who, _, stage = plan_round(policy, top1, top2, n, np.full(4, 64), 0)
    # 5 of 16 (< 1/3): given up; 5 of 12 and 5 of 15 are not (too few samples, share 1/3);
    # 7 of 16 leads with 0.44: goes on.
    assert (sorted(who.tolist()), stage) == ([1, 2, 3], 0)
    assert 0 in plan_round(OnlinePolicy(n_max=64, chunk=4), top1, top2, n, np.full(4, 64), 0)[0]  # without: open
    # Once every other vote is decided, the next stage reopens it.
    who, _, stage = plan_round(policy, np.array([5, 16]), np.array([4, 0]), np.array([16, 16]), np.full(2, 64), 0)
    assert (who.tolist(), stage) == ([0], 1)
    with pytest.raises(ValueError, match="give_up"):
        OnlinePolicy(give_up_after=-1)


def test_a_finer_ladder_reopens_the_riskiest_stopped_votes_first():
    fine = OnlinePolicy(n_max=64, chunk=4, ladder=(0.96, 0.97, 0.98, 0.99, 0.999))  # explicit
    assert [c for _, c in fine.stages] == [0.95, 0.96, 0.97, 0.98, 0.99, 0.999, 0.95]
    # Stopped at 0.95: 4-0 (risk 0.029) and 10-4 of 16 (risk 0.043). Once both are decided, the
    # coarse ladder's next bar (0.99) reopens both; the finer one (0.96) only the riskier.
    top1, top2, n = np.array([4, 10]), np.array([0, 4]), np.array([4, 16])
    coarse = OnlinePolicy(n_max=64, chunk=4, ladder=(0.99, 0.999))
    assert sorted(plan_round(coarse, top1, top2, n, np.full(2, 64), 0)[0].tolist()) == [0, 1]
    # The default "horizon" ladder is the fine one (0.995 between 0.99 and 0.999); "beta" keeps the coarse one.
    assert [c for _, c in OnlinePolicy().stages] == [0.95, 0.96, 0.97, 0.98, 0.99, 0.995, 0.999, 0.95]
    assert [c for _, c in OnlinePolicy(rule="beta").stages] == [0.95, 0.99, 0.999, 0.95]
    assert plan_round(fine, top1, top2, n, np.full(2, 64), 0)[0].tolist() == [1]
    with pytest.raises(ValueError, match="ladder"):
        OnlinePolicy(ladder=(0.4,))


# --- replay = live ---------------------------------------------------------------------------------


@pytest.mark.parametrize("setting", [{"rule": "window", "window": 4}, {"rule": "window", "window": 3},
                                     {"rule": "horizon", "length_weight": 1.0},
                                     {"rule": "horizon", "give_up_after": 8, "give_up_share": 0.5},
                                     {"rule": "horizon", "ladder": (0.96, 0.97, 0.98, 0.99, 0.999)},
                                     {"rule": "horizon", "confirm_window": 4}])
@pytest.mark.parametrize("seed", range(5))
def test_the_replay_at_many_budgets_makes_the_allocators_decisions(seed, setting):
    """:class:`OnlineSequence` (all budgets at once, from the replay's tables) against
    :class:`OnlineAllocator` driven sample by sample: the same rounds and samples per problem at
    every budget."""
    rng = np.random.default_rng(seed)
    size, width = 25, 40
    answers, costs, votes, top = _random_votes(rng, size, width)
    policy = OnlinePolicy(n_max=int(rng.integers(8, width + 1)), chunk=int(rng.integers(1, 6)),
                          escalate=bool(seed % 2), **setting)
    race = race_table(answers, costs, policy.length_weight) if policy.length_weight else None
    seq = OnlineSequence.build(top[..., -1], top[..., -2], costs, np.full(size, policy.n_max), policy,
                               race=race, streak=streak_table(answers))

    def worst(q, m):
        return 100.0 * np.asarray(m)

    budgets = np.sort(rng.uniform(200, costs.sum() * 1.2, 8).round())
    _assert_replay_is_live(seq, answers, costs, policy, budgets, worst)


# --- the benchmark's settings reach the replay ------------------------------------------------------


def _savings_script():
    """benchmarks/allocator_savings.py loaded by its path (scripts are not a package)."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "benchmarks" / "allocator_savings.py"
    spec = importlib.util.spec_from_file_location("allocator_savings", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _pool(tmp_path):
    """30 problems x 32 samples: most easy, some contested, right answers shorter than wrong ones."""
    from tts.benchmarks.pool import load_pool

    path = write_contested_pool(tmp_path / "pool.jsonl", samples=32, easy=18, seed=1, contested=(0.35, 0.65),
                                length=lambda p, ok: 400 if ok else 1600, spread=(0.6, 1.4))
    return load_pool(path)["m"]


def test_the_benchmarks_rule_settings_reach_the_replay(tmp_path):
    from tts.budgets.replay.simulate import SimulateConfig, simulate

    settings = _savings_script().rule_settings
    assert settings("horizon") == {"rule": "horizon"}
    assert settings("window:window=4") == {"rule": "window", "window": 4}
    assert settings("horizon:give_up_after=16;give_up_share=0.5") == {"rule": "horizon", "give_up_after": 16,
                                                                       "give_up_share": 0.5}
    assert settings("horizon:ladder=0.97/0.99") == {"rule": "horizon", "ladder": (0.97, 0.99)}
    with pytest.raises(SystemExit, match="SimulateConfig field"):
        settings("horizon:windw=4")
    pool = _pool(tmp_path)
    common = dict(target_n=16, modes=("online",), orderings=3, max_n=16, bootstrap=50)
    plain = simulate(pool, SimulateConfig(**common, rule="horizon"))
    for spec in ("window:window=4", "horizon:length_weight=1", "horizon:confirm_window=4",
                 "horizon:give_up_after=8;give_up_share=0.5"):
        other = simulate(pool, SimulateConfig(**common, **settings(spec)))
        steps = [np.concatenate(s, axis=1) for s in other.decisions["online"].steps]
        base = [np.concatenate(s, axis=1) for s in plain.decisions["online"].steps]
        assert any(a.shape != b.shape or (a != b).any() for a, b in zip(steps, base)), spec  # it decided otherwise
        # Capped at the target's n, every setting ends on uniform's vote: no accuracy change there.
        assert other.modes["online"].acc_change.mean == pytest.approx(0.0, abs=1e-12), spec
