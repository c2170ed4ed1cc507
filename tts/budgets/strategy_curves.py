"""Accuracy of several selection rules, per problem and sample count, replayed from a sample pool.

The cross-strategy allocator (:mod:`tts.budgets.cross_allocator`) chooses, per problem, a
selection rule and a sample count. The rules a pool can replay are those that aggregate
independent samples; each maps to the registered strategy a live run uses:

========================  =====================  ===============================================
rule (``--strategies``)   live strategy          what it picks among n samples
========================  =====================  ===============================================
``vote``                  ``self_consistency``   the most frequent answer
``best_of_n``             ``best_of_n``          the answered sample with the highest score
``weighted_vote``         ``weighted_vote``      the answer with the most score weight
``shortest``              (pool only)            the shortest answered sample (Hassid et al.
                                                 2025, "Don't Overthink It"): a score-free
                                                 rule, the score being minus its length
========================  =====================  ===============================================

``self_consistency`` is accepted as a name for ``vote``. Scores are the pool's ``score`` field (a
verifier's, or the mean token logprob of a past ``tts eval`` run, which is what best_of_n and
weighted_vote use without a verifier). Weights of weighted_vote follow ``tts sweep``'s
``weighting="auto"``: the score itself when every score lies in [0, 1], else exp(score). Scores in
[0, 1] may be 0 (a verifier that rejects a sample): as the live weighted_vote does, a prefix whose
answered samples all weigh 0 is counted as a plain vote
(:func:`~tts.benchmarks.pool_draws.vote_outcomes`). Equal best_of_n scores share credit here, where
the live strategy with a verifier breaks them by mean logprob: a tool verifier's 0/1 scores tie
often, so its replayed best_of_n is the expectation over a random pick among the top-scored.

Outcomes come from :mod:`tts.benchmarks.pool_draws` (ties share credit: the expectation over a random
tie-break). ``correct`` only grades the chosen answer; it decides nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import numpy as np

from tts.benchmarks.pool import ModelPool
from tts.budgets.allocator import AccuracyCurve, CalibrationError
from tts.benchmarks.pool_draws import RULES, best_score_outcomes, rule_name, vote_outcomes, vote_weights

SWITCH_Z = 3.0
"""Default noise guard, in standard errors: a rule is tested against the reference in about 30
(bin, n) cells (5 bins x 6 ns), and Bonferroni's bound for a 5% chance of any false switch among
them is the normal quantile of 1 - 0.05 / 30, about 2.9. Measured on the reasoning pools
(vote vs shortest): z = 1 still followed noise on 3 of 6 GPQA models, z = 2 on one, z = 3 on none."""

class UnknownRuleError(ValueError):
    """A name in ``--strategies`` that is no selection rule; the message lists the valid ones."""


def parse_rules(value: str | Iterable[str]) -> tuple[str, ...]:
    """Rule names from ``"vote,best_of_n"`` or a list; aliases resolved, order kept, no repeats.

    Raises:
        UnknownRuleError: A name that is not a rule (the message lists the valid ones).
    """
    names = [v.strip() for v in (value.split(",") if isinstance(value, str) else value) if v.strip()]
    if not names:
        raise UnknownRuleError(f"give at least one selection rule; valid: {', '.join(RULES)}")
    out: list[str] = []
    for name in names:
        rule = rule_name(name)
        if rule not in RULES:
            raise UnknownRuleError(f"unknown strategy {name!r} in --strategies; valid: {', '.join(RULES)} "
                                   f"(self_consistency is another name for vote)")
        if rule not in out:
            out.append(rule)
    return tuple(out)


def check_pool_supports(pool: ModelPool, rules: Sequence[str], source: str = "the calibration source") -> None:
    """Raise unless ``pool`` has what every rule needs (scores, token counts), naming what is missing.

    Raises:
        CalibrationError: e.g. "best_of_n needs a score for every sample; ... has none".
    """
    for rule in rules:
        info = RULES[rule]
        answered = pool.mask & (pool.answers >= 0)
        if info.needs_scores and not np.all(np.isfinite(pool.scores[answered])):
            raise CalibrationError(
                f"{source} (model {pool.model}) has no score for some samples, which strategy {rule!r} needs; "
                f"drop {rule} from the strategies, or calibrate on a run that recorded scores (a tts eval/sweep "
                "run of best_of_n or weighted_vote records each sample's mean logprob)")
        if info.needs_tokens and not pool.has_tokens:
            raise CalibrationError(f"{source} (model {pool.model}) has samples without num_tokens, which strategy "
                                   f"{rule!r} needs; drop it from the strategies")


def _weighting(scores: np.ndarray) -> str:
    finite = scores[np.isfinite(scores)]
    return "score" if finite.size and finite.min() >= 0.0 and finite.max() <= 1.0 else "exp"


def rule_outcomes(pool: ModelPool, orders: np.ndarray, rules: Sequence[str], n_max: int) -> dict[str, np.ndarray]:
    """Per rule, the (tie-shared) correctness of its choice among the first n samples of each ordering.

    Args:
        pool: One model's samples.
        orders: ``(R, P, S)`` slot indices, a random permutation of each problem's real samples
            (:func:`tts.budgets.replay.prefix.random_orders`).
        rules: Rule names (:data:`RULES`).
        n_max: Longest prefix; at most the fewest samples of any problem.

    Returns:
        Rule -> ``(R, P, n_max)`` floats in [0, 1]; index t is the prefix of t + 1 samples.
    """
    if n_max > int(pool.counts.min()):
        raise CalibrationError(f"{n_max} samples per problem requested but some problem of {pool.model} has only "
                               f"{int(pool.counts.min())}; lower the largest n")
    check_pool_supports(pool, rules)
    o = np.ascontiguousarray(np.asarray(orders)[:, :, :n_max].transpose(2, 0, 1))  # (n, R, P)
    out = {}
    for rule in rules:
        if rule == "vote":
            res = vote_outcomes(pool, o)
        elif rule == "weighted_vote":
            res = vote_outcomes(pool, o, vote_weights(pool, _weighting(pool.scores[pool.mask])))
        elif rule == "best_of_n":
            res = best_score_outcomes(pool, o)
        else:  # shortest: the score is minus the length
            res = best_score_outcomes(pool, o, scores=np.where(pool.mask, -np.nan_to_num(pool.tokens), 0.0))
        out[rule] = np.ascontiguousarray(res.transpose(1, 2, 0))
    return out


def fit_rule_curves(outcomes: Mapping[str, np.ndarray], bins: np.ndarray, ns: Sequence[int]
                    ) -> dict[tuple[str, int], AccuracyCurve]:
    """Accuracy-vs-n curve per (rule, difficulty bin), averaged over the given cases.

    Args:
        outcomes: Rule -> ``(cases, n_max)`` prefix correctness (orderings x problems flattened).
        bins: ``(cases,)`` bin of each case.
        ns: The n values of the curves.
    """
    bins = np.asarray(bins)
    cols = np.asarray(ns) - 1
    out = {}
    for rule, table in outcomes.items():
        for b in np.unique(bins).tolist():
            acc = np.asarray(table)[bins == b][:, cols].mean(axis=0)
            out[(rule, int(b))] = AccuracyCurve(rule, tuple(int(n) for n in ns), tuple(float(a) for a in acc))
    return out


def guard_rule_switches(curves: Mapping[tuple[str, int], AccuracyCurve], outcomes: Mapping[str, np.ndarray],
                        bins: np.ndarray, groups: np.ndarray, ns: Sequence[int], z: float = SWITCH_Z
                        ) -> tuple[dict[tuple[str, int], AccuracyCurve], str, dict[tuple[str, int], list[int]]]:
    """Keep a rule's advantage over the reference rule in a bin only where it exceeds ``z`` standard errors.

    Where two rules' curves nearly tie, an allocator that trusts the curves follows noise (fitted on
    other problems, the ranking flips). The reference is the rule with the highest accuracy pooled
    over all bins and ns (the most data behind it). In each bin and at each n, another rule's curve
    keeps its value only when its mean paired gain over the reference exceeds ``z`` times that
    gain's standard error, clustered by problem (a problem's cases over orderings are not
    independent); elsewhere it is capped just below the reference, so the allocator never switches
    to it on a tie. ``z = 0`` keeps every curve as fitted.

    Args:
        curves: :func:`fit_rule_curves`'s output.
        outcomes: Rule -> ``(cases, n_max)`` prefix correctness, as given to :func:`fit_rule_curves`.
        bins: ``(cases,)`` bin of each case.
        groups: ``(cases,)`` problem of each case (the clusters of the standard error).
        ns: The n values of the curves.
        z: Standard errors a gain must exceed (:data:`SWITCH_Z`).

    Returns:
        The guarded curves, the reference rule, and per (rule, bin) the ns where a switch is allowed.
    """
    if z < 0:
        raise ValueError(f"z must be >= 0 standard errors, got {z}")
    rules = list(outcomes)
    cols = np.asarray(ns) - 1
    ref = max(rules, key=lambda r: float(np.asarray(outcomes[r])[:, cols].mean()))
    bins, groups = np.asarray(bins), np.asarray(groups)
    out = dict(curves)
    allowed: dict[tuple[str, int], list[int]] = {}
    for b in np.unique(bins).tolist():
        sel = bins == b
        _, cluster = np.unique(groups[sel], return_inverse=True)
        size = np.bincount(cluster)
        base = np.asarray(outcomes[ref])[sel][:, cols]
        ref_acc = np.asarray(curves[(ref, int(b))].accuracy)
        for rule in rules:
            if rule == ref:
                continue
            diff = np.asarray(outcomes[rule])[sel][:, cols] - base  # (cases, ns)
            per = np.stack([np.bincount(cluster, weights=diff[:, j]) / size for j in range(len(cols))], axis=1)
            m = len(size)
            se = per.std(axis=0, ddof=1) / np.sqrt(m) if m > 1 else np.full(len(cols), np.inf)
            ok = per.mean(axis=0) > z * se if z > 0 else np.ones(len(cols), dtype=bool)
            acc = np.asarray(curves[(rule, int(b))].accuracy)
            capped = np.where(ok, acc, np.minimum(acc, ref_acc - 1e-9))
            out[(rule, int(b))] = AccuracyCurve(rule, tuple(int(n) for n in ns), tuple(float(a) for a in capped))
            allowed[(rule, int(b))] = [int(n) for n, k in zip(ns, ok.tolist()) if k]
    return out, ref, allowed


def curve_for(curves: Mapping[tuple[str, int], AccuracyCurve], rule: str, b: int) -> AccuracyCurve:
    """The curve of (rule, bin), or of the rule's nearest fitted bin (the harder one on ties)."""
    if (rule, b) in curves:
        return curves[(rule, b)]
    have = [c for r, c in curves if r == rule]
    if not have:
        raise CalibrationError(f"no calibration curve for strategy {rule!r}; calibrate with it")
    best = min(have, key=lambda c: (abs(c - b), -c))
    return curves[(rule, best)]
