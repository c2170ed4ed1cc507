"""The online rule replayed on a sample pool: every budget of one ordering at once.

A run with budget B draws a prefix of the run with unlimited budget (rounds never depend on the
budget; see :mod:`tts.budgets.online`). :class:`OnlineSequence` computes that unlimited sequence of
rounds once from prefix votes, and :func:`within_each` finds, for many budgets and orderings at
once, how much of it each budget pays for under the same worst-case rule (:func:`cut_call`) that a
live run applies.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from tts.budgets.online import (
    OnlinePolicy,
    WorstCase,
    cut_call,
    plan_round,
    race_votes,
    race_log_weight,
)


@dataclass(frozen=True, eq=False)
class OnlineSequence:
    """An online run replayed at unlimited budget: every round, flattened into one sequence.

    Built by :meth:`build` from one ordering of a pool's samples; :meth:`within` then finds, for
    many budgets at once, where a run with that budget stops (the real run's calls, replayed).

    Args:
        p, k: Every request of every round, in order: problem index and samples.
        round_end: Per request, the index after the last request of its round.
        first: Per request, its first sample's position in the flattened sample sequence.
        sample_problem: Per flattened sample, its problem.
        sample_cost: Per flattened sample, its actual cost.
        n_problems: Number of problems.
    """

    p: np.ndarray
    k: np.ndarray
    round_end: np.ndarray
    first: np.ndarray
    sample_problem: np.ndarray
    sample_cost: np.ndarray
    n_problems: int

    @classmethod
    def build(cls, top1: np.ndarray, top2: np.ndarray, sample_cost: np.ndarray, cap: np.ndarray,
              policy: OnlinePolicy, rates: np.ndarray | None = None,
              race: tuple[np.ndarray, np.ndarray] | None = None,
              streak: np.ndarray | None = None, votes: np.ndarray | None = None) -> OnlineSequence:
        """Replay the rounds of :func:`plan_round` on prefix votes.

        Args:
            top1, top2: ``(n_problems, n_samples)`` votes of the two leading answers after each
                prefix of the ordering (column t = the first t+1 samples).
            sample_cost: ``(n_problems, n_samples)`` actual cost of each sample of the ordering.
            cap: Most samples per problem (at most the samples the pool holds).
            policy: The rule's settings.
            rates: Rule "rate": ``(n_problems, n_samples + 1)`` predicted gain per sample after
                ``n`` samples (column n), fitted on other problems
                (:meth:`tts.budgets.online.RateModel.replay_rates`).
            race: ``policy.length_weight > 0``: ``(n_problems, n_samples)`` race votes after each
                prefix (:func:`race_table`).
            streak: Rule "window" and ``policy.confirm_window``: ``(n_problems, n_samples)`` run
                of equal answers ending at each prefix (:func:`streak_table`).
            votes: Rule "dirichlet": ``(n_problems, n_samples, K)`` votes of the most voted
                answers after each prefix (:func:`vote_table`).
        """
        size = len(cap)
        rows = np.arange(size)
        n = np.zeros(size, dtype=np.int64)
        t1 = np.zeros(size, dtype=np.int64)
        t2 = np.zeros(size, dtype=np.int64)
        stage, ps, ks, ends = 0, [], [], []
        while True:
            rate = None if rates is None else rates[rows, n]
            col = np.maximum(n, 1) - 1
            r = None if race is None else tuple(np.where(n > 0, x[rows, col], 0.0) for x in race)
            st = None if streak is None else np.where(n > 0, streak[rows, col], 0)
            vt = None if votes is None else np.where((n > 0)[:, None], votes[rows, col], 0)
            who, k, stage = plan_round(policy, t1, t2, n, cap, stage, rate, r, st, vt)
            if not len(who):
                break
            ps.append(who)
            ks.append(k)
            ends.append(np.full(len(who), sum(map(len, ps))))
            n[who] += k
            seen = n > 0
            t1[seen], t2[seen] = top1[rows[seen], n[seen] - 1], top2[rows[seen], n[seen] - 1]
        p = np.concatenate(ps) if ps else np.zeros(0, np.int64)
        k = np.concatenate(ks) if ks else np.zeros(0, np.int64)
        sample_problem = np.repeat(p, k)
        cost = np.asarray(sample_cost, dtype=float)[sample_problem, _ranks(sample_problem, size)]
        return cls(p, k, np.concatenate(ends) if ends else np.zeros(0, np.int64),
                   np.concatenate([[0], np.cumsum(k)]), sample_problem, cost, size)

    @property
    def columns(self) -> np.ndarray:
        """Per flattened sample, its position in its problem's ordering (0 = first drawn)."""
        return _ranks(self.sample_problem, self.n_problems)

    def within(self, budgets: np.ndarray, worst: WorstCase) -> np.ndarray:
        """Per budget, how many samples of the sequence a run with that budget draws.

        Replays the real run's engine calls (:func:`cut_call`): calls never cross a round, and a
        run ends at its first empty call. See :func:`within_each` for several sequences at once.
        """
        return within_each([self], np.asarray(budgets, dtype=float)[None], worst)[0]

    def n_at(self, drawn: int) -> np.ndarray:
        """Samples per problem after the first ``drawn`` samples of the sequence."""
        return np.bincount(self.sample_problem[:drawn], minlength=self.n_problems)

    def rounds_at(self, drawn: int) -> list[dict[int, int]]:
        """Samples given per problem in each round, for a run that drew ``drawn`` samples."""
        out = []
        req_round = np.searchsorted(np.unique(self.round_end), self.round_end)
        sample_round = np.repeat(req_round, self.k)[:drawn]
        for r in np.unique(sample_round).tolist():
            got = np.bincount(self.sample_problem[:drawn][sample_round == r], minlength=self.n_problems)
            out.append({int(i): int(c) for i, c in enumerate(got) if c})
        return out


def race_table(answers: np.ndarray, tokens: np.ndarray, alpha: float) -> tuple[np.ndarray, np.ndarray]:
    """The length-weighted race votes (:func:`tts.budgets.online.race_votes`) after every prefix.

    Args:
        answers: ``(n_problems, n_samples)`` answer ids in drawing order (-1: no answer, padding).
        tokens: The same samples' generated tokens (what a live run records per sample).
        alpha: The policy's ``length_weight``.

    Returns:
        ``(r1, r2)``, each ``(n_problems, n_samples)``: column t after the first t+1 samples. The
        two answers are the first by votes, then by weight, as a live run ranks them.
    """
    answers = np.asarray(answers)
    n_ans = int(answers.max(initial=-1)) + 1
    if n_ans == 0:
        z = np.zeros(answers.shape)
        return z, z.copy()
    onehot = (answers[..., None] == np.arange(n_ans)) & (answers[..., None] >= 0)
    count = np.cumsum(onehot, axis=1).astype(float)
    length = np.cumsum(onehot * np.asarray(tokens, dtype=float)[..., None], axis=1)
    weight = race_log_weight(count, length, alpha)
    top = np.lexsort((weight, count), axis=-1)[..., ::-1][..., :2]
    if n_ans == 1:
        top = np.concatenate([top, top], axis=-1)
    pick = [np.take_along_axis(x, top, axis=-1) for x in (count, length)]
    c2 = np.where(top[..., 1] == top[..., 0], 0.0, pick[0][..., 1])
    return race_votes(pick[0][..., 0], pick[1][..., 0], c2, pick[1][..., 1], alpha)


def vote_table(answers: np.ndarray, top_k: int) -> np.ndarray:
    """``(n_problems, n_samples, top_k)``: after each prefix, the votes of its ``top_k`` most voted
    answers, most first, zero-padded (what :meth:`OnlineAllocator.vote_matrix` holds live): the
    input of the "dirichlet" rule.

    Args:
        answers: ``(n_problems, n_samples)`` answer ids in drawing order (-1: no answer, padding).
        top_k: The policy's ``top_k``.
    """
    answers = np.asarray(answers)
    n_ans = int(answers.max(initial=-1)) + 1
    out = np.zeros((*answers.shape, top_k))
    if n_ans == 0:
        return out
    onehot = (answers[..., None] == np.arange(n_ans)) & (answers[..., None] >= 0)
    count = np.sort(np.cumsum(onehot, axis=1), axis=-1)[..., ::-1][..., :top_k]
    out[..., :count.shape[-1]] = count
    return out


def streak_table(answers: np.ndarray) -> np.ndarray:
    """``(n_problems, n_samples)``: how many samples in a row, ending at each prefix, gave the
    same answer (0 at a sample without one): the input of the "window" rule and of
    ``confirm_window``."""
    answers = np.asarray(answers)
    valid = answers >= 0
    same = np.zeros(answers.shape, dtype=bool)
    same[:, 1:] = valid[:, 1:] & valid[:, :-1] & (answers[:, 1:] == answers[:, :-1])
    t = np.arange(answers.shape[1])
    start = np.maximum.accumulate(np.where(same, 0, t[None, :]), axis=1)
    return np.where(valid, t[None, :] - start + 1, 0)


def within_each(seqs: Sequence[OnlineSequence], budgets: np.ndarray, worst: WorstCase) -> np.ndarray:
    """``(len(seqs), G)`` samples drawn by a run of each sequence with each of its ``G`` budgets.

    All runs advance together, one :func:`cut_call` per iteration for every run still going (the
    sequences are laid end to end; a call never crosses a round, hence never a sequence).
    """
    budgets = np.asarray(budgets, dtype=float)
    n_req = np.array([len(s.p) for s in seqs])
    n_smp = np.array([len(s.sample_problem) for s in seqs])
    req0 = np.concatenate([[0], np.cumsum(n_req)])
    smp0 = np.concatenate([[0], np.cumsum(n_smp)])
    p = np.concatenate([s.p for s in seqs])
    k = np.concatenate([s.k for s in seqs])
    if not len(p):
        return np.zeros(budgets.shape, dtype=np.int64)
    round_end = np.concatenate([s.round_end + o for s, o in zip(seqs, req0)])
    first = np.concatenate([s.first[:-1] + o for s, o in zip(seqs, smp0)] + [[smp0[-1]]])
    cum_cost = np.concatenate([[0.0], np.cumsum(np.concatenate([s.sample_cost for s in seqs]))])
    cum_worst = np.concatenate([[0.0], np.cumsum(np.asarray(worst(p, k), dtype=float))])
    shape = budgets.shape
    flat = budgets.reshape(-1)
    seq_of = np.repeat(np.arange(len(seqs)), shape[1])
    j = req0[seq_of].copy()
    stop_at = req0[seq_of + 1]
    pos = smp0[seq_of].copy()
    done = np.zeros_like(j)
    spent = np.zeros(len(flat))
    active = np.nonzero(j < stop_at)[0]
    while len(active):
        ja = j[active]
        e, part = cut_call(p, k, worst, ja, done[active], flat[active] - spent[active], round_end[ja], cum_worst)
        whole = e > ja
        start = pos[active]
        stop = np.where(whole, first[e], start + part)
        spent[active] += cum_cost[stop] - cum_cost[start]
        pos[active] = stop
        j[active] = np.where(whole, e, ja)
        done[active] = np.where(whole, 0, done[active] + part)
        active = active[(whole | (part > 0)) & (j[active] < stop_at[active])]
    return (pos - smp0[seq_of]).reshape(shape)


def _ranks(groups: np.ndarray, size: int) -> np.ndarray:
    """Per element, how many earlier elements share its group (its rank within the group)."""
    order = np.argsort(groups, kind="stable")
    starts = np.searchsorted(groups[order], np.arange(size))
    out = np.empty(len(groups), dtype=np.int64)
    out[order] = np.arange(len(groups)) - starts[groups[order]]
    return out
