"""The online replay of ``simulate`` against the live allocator: for every rule setting, the replay's
decisions, samples per problem at uniform's tokens, accuracy and tokens are those of
:class:`~tts.budgets.online.OnlineAllocator` driven sample by sample on the same orderings, as a
``tts eval --allocate`` run with the config's settings would be (:mod:`tts.budgets.replay.simulate`)."""

from __future__ import annotations

import logging

import numpy as np
import pytest

from tests.budgets.replay.test_simulate import _pool
from tests.budgets.test_online import _drive
from tts.budgets.online import OnlineAllocator, OnlinePolicy
from tts.budgets.rate_models.vote_value import VoteValue
from tts.budgets.replay.prefix import random_orders, replay_prefixes
from tts.budgets.replay.simulate import SimulateConfig, simulate

COMMON = dict(target_n=16, modes=("online",), orderings=2, folds=3, bootstrap=10)
POLICY_FIELDS = ("chunk", "rule", "confidence", "escalate", "prior", "window", "length_weight", "give_up_after",
                 "give_up_share", "ladder", "confirm_window", "top_k")


def _orders(pool, cfg: SimulateConfig) -> np.ndarray:
    """The replay's orderings: the seed draws the folds first, then the orderings."""
    rng = np.random.default_rng(cfg.seed)
    rng.permutation(pool.n_problems)
    return random_orders(pool.mask, cfg.orderings, rng)


def _live(pool, order, cfg: SimulateConfig, budget: float, rate_model=None) -> OnlineAllocator:
    """A live run on one ordering: each problem's samples arrive in the ordering's order, each
    request paid at its worst case (``max_tokens`` per sample: the config's, else the pool's longest)."""
    n_max = min(cfg.max_n or cfg.target_n, pool.n_samples)
    policy = OnlinePolicy(n_max=n_max, min_gain=cfg.min_gain, rate_model=rate_model,
                          **{f: getattr(cfg, f) for f in POLICY_FIELDS})
    longest = cfg.max_tokens or float(pool.tokens[pool.mask].max())

    def answer(p, i):
        a = pool.answers[p, order[p, i]]
        return None if a < 0 else str(a)

    return _drive(OnlineAllocator(list(range(pool.n_problems)), budget, policy), answer,
                  lambda p, i: float(pool.tokens[p, order[p, i]]), lambda p, k: longest * np.asarray(k, dtype=float))


SETTINGS = [{}, {"rule": "beta", "confidence": 0.8}, {"escalate": False}, {"prior": 4.0},
            {"rule": "window", "window": 3}, {"length_weight": 1.0}, {"give_up_after": 8, "give_up_share": 0.6},
            {"ladder": (0.97, 0.99)}, {"confirm_window": 3}, {"rule": "dirichlet", "top_k": 2},
            {"rule": "dirichlet"}, {"max_n": 8}, {"chunk": 3}, {"max_tokens": 5000},
            {"rule": "rate", "min_gain": 5e-3}, {"rule": "rate", "min_gain": 2e-2}]


@pytest.mark.parametrize("setting", SETTINGS, ids=lambda s: ",".join(f"{k}={v}" for k, v in s.items()) or "defaults")
def test_the_online_replay_decides_what_a_live_run_with_its_settings_decides(setting) -> None:
    pool = _pool()
    cfg = SimulateConfig(**COMMON, **setting)
    # Rule "rate" with a closed-form rate model (not fitted on grades: one run over every problem).
    rates = VoteValue(1.0) if cfg.rule == "rate" else None
    res = simulate(pool, cfg, rate_model=rates)
    decisions = res.decisions["online"]
    acc_u, tok_u, acc_all, tok_all = [], [], [], []
    for r, order in enumerate(_orders(pool, cfg)):
        rep = replay_prefixes(pool, order)
        # Unlimited budget: the same requests, round by round, problem by problem.
        everything = _live(pool, order, cfg, 1e12, rates)
        requests = [[p, k] for rnd in everything.rounds for p, k in rnd.items()]
        steps = decisions.steps[r]
        assert len(steps) == 1
        assert steps[0].T.tolist() == requests
        acc_all.append(rep.correct_at(everything.n).mean())
        tok_all.append(rep.tokens_at(everything.n).sum())
        # At uniform's tokens (self-consistency at target_n on every problem of this ordering).
        uniform_tokens = float(rep.tokens_at(np.full(pool.n_problems, cfg.target_n)).sum())
        at_uniform = _live(pool, order, cfg, uniform_tokens, rates)
        assert decisions.n_at_uniform[r].tolist() == at_uniform.n.tolist()
        acc_u.append(rep.correct_at(at_uniform.n).mean())
        tok_u.append(rep.tokens_at(at_uniform.n).sum())
    online = res.modes["online"]
    assert online.mode == "online"
    assert online.acc_at_uniform_tokens.mean == pytest.approx(np.mean(acc_u))
    assert online.tokens_at_uniform_budget.mean == pytest.approx(np.mean(tok_u))
    # The curve's last budget buys everything the rule draws.
    assert online.curve_acc[-1] == pytest.approx(np.mean(acc_all))
    assert online.curve_tokens[-1] == pytest.approx(np.mean(tok_all))


def test_the_result_names_its_model_orderings_and_uniforms_cost_and_logs_each_mode(caplog) -> None:
    pool = _pool()
    cfg = SimulateConfig(**COMMON)
    with caplog.at_level(logging.INFO, logger="tts.budgets.replay.simulate"):
        res = simulate(pool, cfg)
    reps = [replay_prefixes(pool, o) for o in _orders(pool, cfg)]
    target = np.full(pool.n_problems, 16)
    tokens = [rep.tokens_at(target).sum() for rep in reps]
    acc = [rep.correct_at(target).mean() for rep in reps]
    assert (res.model, res.n_problems, res.orderings, res.target_n) == ("m", 45, 2, 16)
    assert res.uniform_tokens.mean == pytest.approx(np.mean(tokens))
    assert (res.uniform_tokens.lo, res.uniform_tokens.hi) == pytest.approx(
        (np.percentile(tokens, 2.5), np.percentile(tokens, 97.5)))
    assert res.uniform_acc.mean == pytest.approx(np.mean(acc))
    ratio = res.modes["online"].token_ratio
    assert f"m online: {ratio}" in caplog.text
