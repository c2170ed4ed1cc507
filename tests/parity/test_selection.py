"""Parity: GenSelect and recursive self-aggregation (RSA), the fixed graphs of tts/graphs/selection.py.

* genselect: GenSelect (Toshniwal et al. 2025, the AIMO-2 solution, arXiv:2504.16891) as optillm
  implements it, github.com/algorithmicsuperintelligence/optillm ``optillm/plugins/genselect_plugin.py``
  at commit 41c80023580e49cad577fbf707f87abf7f01c5de: n candidates (default 4) drawn from the
  ordinary prompt, then ONE comparison prompt that shows all of them numbered from 1 and asks for
  the best; the chosen number's candidate is the answer, and a reply that names no candidate falls
  back to the first one. tts's documented departures (module docstring of tts/graphs/selection.py
  and the Selector role): the selector answers with the number only (read from the first token's
  probabilities, greedy) where optillm asks for a reasoned comparison ending in "BEST CANDIDATE:
  N" at temperature 0.3; and more than ``group`` candidates run as a tournament of groups, where
  optillm shows all at once (``group >= n`` is optillm's one prompt).
* aggregate: RSA (Venkatraman et al. 2025, "Recursive Self-Aggregation Unlocks Deep Thinking in
  Large Language Models", Algorithm 1): a population of N solutions; for each of T steps, N new
  solutions, each written from K DISTINCT members of the previous population drawn uniformly
  without replacement; the new population replaces the old. No reference code is pinned here; the
  algorithm's lines are. tts reads the answer as the majority vote of the last population.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field

from tts.backends.base import Completion, GenerationResult, request_usage
from tts.config import SamplingConfig
from tts.graphs.selection import Aggregate, AggregateConfig, GenSelect, GenSelectConfig
from tts.prompts import MATH_PROMPT
from tts.types import Problem

PINNED = {"strategy:genselect", "strategy:aggregate"}

PROBLEMS = [Problem("p", "What is 1 + 1?", "2"), Problem("q", "What is 2 + 2?", "4")]
_SHOWN = re.compile(r"Solution (\d+):\n(.*?)(?=\n\nSolution \d+:\n|\n\n[A-Z][^\n]*$|\Z)", re.S)


@dataclass
class _Model:
    """Fresh solutions carry unique ids and answers from ``answers``; an aggregation answers with
    the most common answer it was shown (ties: the first); a selection names ``pick(shown)``."""

    answers: list[str]
    pick: object = None
    counter: int = 0
    drawn: int = 0
    aggregations: list = field(default_factory=list)
    selections: list = field(default_factory=list)

    def _solution(self, answer: str) -> Completion:
        self.counter += 1
        return Completion(f"id{self.counter} work\n\nThe answer is \\boxed{{{answer}}}", 8, finish_reason="stop",
                          ended_by_eos=True)

    def generate(self, requests):
        out = []
        for r in requests:
            ask = r.messages[-1].content
            shown = [t.strip() for _, t in _SHOWN.findall(ask)]
            if "Which solution is" in ask:
                self.selections.append(shown)
                comps = [Completion(str(self.pick(shown)), 1, finish_reason="stop") for _ in range(r.n)]
            elif shown:
                self.aggregations.append(shown)
                top = Counter(re.findall(r"boxed\{(\w+)\}", "\n".join(shown))).most_common(1)[0][0]
                comps = [self._solution(top) for _ in range(r.n)]
            else:
                comps = []
                for _ in range(r.n):
                    comps.append(self._solution(self.answers[self.drawn % len(self.answers)]))
                    self.drawn += 1
            out.append(GenerationResult(tuple(comps), request_usage(10, 0, [c.completion_tokens for c in comps], 0.0)))
        return out

    def close(self):
        pass


def _genselect(model: _Model, **cfg) -> GenSelect:
    return GenSelect(GenSelectConfig(**cfg), model, MATH_PROMPT.render, SamplingConfig(max_tokens=64))


def _answer(text: str) -> str:
    return re.findall(r"boxed\{(\w+)\}", text)[-1]


def test_genselect_is_optillms_one_prompt_when_the_group_holds_every_candidate():
    """optillm genselect_plugin (commit 41c8002): n = 4 candidates, one comparison prompt showing
    all four numbered from 1, the named candidate is the answer. Here the selector names the
    candidate with the largest answer; the answer must be that candidate's."""
    model = _Model(["3", "9", "5", "7"], pick=lambda shown: max(range(4), key=lambda i: int(_answer(shown[i]))) + 1)
    sols = _genselect(model, n=4, group=4).solve(PROBLEMS)
    assert len(model.selections) == len(PROBLEMS)  # one comparison per problem
    assert all(len(shown) == 4 for shown in model.selections)  # every candidate in it, in draw order
    for sol, shown in zip(sols, model.selections, strict=True):
        assert sol.answer == max((_answer(s) for s in shown), key=int) == "9"


def test_genselect_falls_back_to_the_first_candidate_like_optillm():
    """optillm: a comparison that names no valid candidate keeps the first candidate."""
    model = _Model(["3", "9", "5", "7"], pick=lambda shown: "none of them")
    sols = _genselect(model, n=4, group=4).solve(PROBLEMS)
    for sol, shown in zip(sols, model.selections, strict=True):
        assert sol.answer == _answer(shown[0])


def test_genselect_tournament_is_the_documented_departure_for_large_n():
    """More candidates than ``group``: groups of ``group`` in draw order, winners go on (a
    tournament of ceil(log_group n) levels). Setting ``group`` to n (at most 9, one digit) gives
    optillm's single prompt."""
    model = _Model([str(a) for a in range(10, 18)], pick=lambda shown: len(shown))  # always the last
    _genselect(model, n=8, group=4).solve(PROBLEMS[:1])
    assert [len(s) for s in model.selections] == [4, 4, 2]
    model = _Model([str(a) for a in range(10, 18)], pick=lambda shown: len(shown))
    _genselect(model, n=8, group=8).solve(PROBLEMS[:1])
    assert [len(s) for s in model.selections] == [8]


def _rsa_check(populations: list[list[str]], shown_per_round: list[list[list[str]]], n: int, k: int) -> None:
    """RSA Algorithm 1, restated as checks: every round writes N solutions; each one is written
    from K distinct members of the previous population (a draw without replacement)."""
    for t, shown_round in enumerate(shown_per_round, start=1):
        assert len(shown_round) == n
        previous = set(populations[t - 1])
        for shown in shown_round:
            assert len(shown) == k and len(set(shown)) == k
            assert set(shown) <= previous


def test_aggregate_is_rsa_population_subsets_and_steps():
    """RSA (Venkatraman et al. 2025, Algorithm 1): N = 4, K = 3, T = 2 on two problems: 4 first
    solutions, then per step 4 aggregations each shown 3 distinct members of the previous
    population, N (T + 1) = 12 generations per problem; the answer is the last population's vote."""
    n, k, t = 4, 3, 2
    model = _Model(["2", "3", "2", "2"])  # every 3-subset holds two "2"s: each aggregation writes "2"
    cfg = AggregateConfig(n=n, subset=k, rounds=t)
    sols = Aggregate(cfg, model, MATH_PROMPT.render, SamplingConfig(max_tokens=64)).solve(PROBLEMS)
    for p, sol in enumerate(sols):
        later = (len(PROBLEMS) + p) * n  # round 2's requests follow round 1's of every problem
        mine = model.aggregations[p * n: (p + 1) * n] + model.aggregations[later: later + n]
        assert len(model.aggregations) == len(PROBLEMS) * n * t
        # the populations: the solutions shown in round 1 come from population 0, and so on
        pop0 = sorted({s for shown in mine[:n] for s in shown})
        pop1 = sorted({s for shown in mine[n:] for s in shown})
        assert len(pop0) <= n and len(pop1) <= n
        _rsa_check([pop0, pop1], [mine[:n], mine[n:]], n, k)
        assert sol.answer == "2"  # the last population's majority
        assert sol.usage.completion_tokens == 8 * n * (t + 1)
    # subsets differ between requests (drawn at random, not the first K every time)
    assert len({tuple(s) for s in model.aggregations}) > 1
