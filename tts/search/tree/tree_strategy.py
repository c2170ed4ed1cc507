"""Strategies that search over solution steps with a verifier: the config and Strategy they share.

Beam search (:mod:`tts.search.tree.beam`), DVTS (:mod:`tts.search.tree.dvts`), REBASE
(:mod:`tts.search.tree.rebase`), MCTS (:mod:`tts.search.tree.mcts`) and ETS (:mod:`tts.search.tree.ets`) differ
only in their algorithm. Each runs it over the step-wise space (:mod:`tts.search.tree.stepwise`) with
the configured verifier, and turns each problem's search into a Solution:

- ``Trace.samples``: the finished candidates, with their answers (so pass@n is their coverage);
- ``Trace.scores``: their verifier scores (:data:`~tts.search.tree.tree_search.PENALTY`, -1, where
  the verifier gave no valid score);
- ``Trace.tree``: every node (id, parent, depth, text, score, kept, finished, answer, forced, and
  ``tokens``: the step's generated tokens), which ``tts show`` prints, built when first read (:class:`~tts.types.LazyRecords`);
- ``Trace.events``: verifier failures and invalid scores, empty steps, forced answers;
- ``Trace.notes``: ``chosen_node``, the id of the chosen candidate's node, and what the search
  recorded (particle filtering: ``particles``, the weights of every resampling);
- the answer: the best-scored candidate (``select="verifier"``) or a vote weighted by verifier
  score (``select="weighted_vote"``, the "weighted best-of-N" of Beeching et al. 2024);
- ``Solution.usage``: generator usage plus verifier usage.

``n`` keeps its meaning of candidates per problem, so ``tts eval -s beam -n 4 -n 16`` is a ladder of
independent searches (each with its own seeds).
"""

from __future__ import annotations

import math
from abc import abstractmethod
from collections import Counter
from collections.abc import Sequence
from functools import partial
from typing import Any, ClassVar, Literal

from pydantic import Field, model_validator

from tts.config import StrategyConfigBase, VerifierConfig, changed_settings, setting_text
from tts.search.base import BudgetUse, StrategyInputError, VerifierStrategy
from tts.search.tree.stepwise import StepScorer, StepState, StepwiseSpace, slots_builder
from tts.search.tree.tree_search import SearchResult, TreeNode
from tts.types import Budget, LazyRecords, Problem, RequestShape, Sample, Solution, Trace

ANSWER_TOKENS = 32
"""Most tokens of a forced answer."""

_new_sample = slots_builder(Sample, Sample(""), ("text", "answer", "completion_tokens", "mean_logprob",
                                                 "finish_reason"))
"""``Sample(text, answer, completion_tokens, mean_logprob, finish_reason)`` (no tool calls) in half
the time of its frozen constructor: a search builds one per candidate (1024 for 64 problems at
n = 16). Its fields need no check (see :func:`~tts.search.tree.stepwise.slots_builder`)."""


def default_beam_width(n: int) -> int:
    """The largest divisor of ``n`` that is at most 4 (Snell et al. 2024 and Beeching et al.
    2024 use M = 4), so that any ``-n`` ladder (1, 2, 4, 8, ...) is valid by default."""
    return max(m for m in (4, 3, 2, 1) if n % m == 0)


class TreeSearchConfig(StrategyConfigBase):
    """What step-wise searches with a verifier share (each strategy subclasses it with its kind)."""

    n: int = Field(8, ge=1, le=4096)
    """Candidates per problem (N): the search samples at most N steps per problem at every depth
    and returns at most N finished solutions."""
    max_depth: int = Field(8, ge=1, le=256)
    """Most steps of a solution; one still unfinished at this depth has its answer forced (or is
    stopped as it is: ``force_answer``)."""
    step_tokens: int = Field(128, ge=1, le=65536)
    """Most tokens of one step (the run's ``max_tokens`` caps the whole solution)."""
    step_separator: str = Field("\n\n", min_length=1)
    """Text that ends a step (a stop string of every step request)."""
    heal_separator: bool = True
    """Continue a partial solution from all but the last character of the separator, so that the
    model writes it (a prompt ending on a whole blank line shifts the model's next step:
    :meth:`~tts.search.tree.stepwise.StepwiseSpace.continuation`). False: the continuation ends with the
    whole separator, as tts did before (and as a text-level reimplementation of the references
    does)."""
    force_answer: bool = True
    """What happens to a solution that must stop without having stated an answer (it reached
    ``max_depth``, the run's token cap, or the model ended its message): True (default) continues
    it with "Therefore, the final answer is $\\boxed{" and reads the answer from what the model
    writes (one more request per such path, in one extra engine call per step); False stops it as
    it is, its answer read off its text (None when there is none), with no more requests: the
    reference implementations' behaviour (its_hub's particle filtering, search-and-learn's beam
    search), for matched comparisons with them (docs/faithfulness.md)."""
    verifier: VerifierConfig = Field("arithmetic", validate_default=True)
    """Verifier that scores every partial and finished solution: a registered name
    (``arithmetic``, ``logprob``, ``judge``, ...) or a mapping with its ``kind`` and settings."""
    select: Literal["verifier", "weighted_vote"] = "weighted_vote"
    """How the answer is chosen among the finished candidates: ``verifier`` takes the best-scored
    one; ``weighted_vote`` votes with verifier scores as weights."""

    def _label_parts(self) -> list[str]:
        """Label parts after ``kind@n`` for settings this class shows specially (none here)."""
        return []

    @property
    def label(self) -> str:
        """``rebase@16``; settings that differ from their defaults follow (``beam@16,beam_width=2,select=verifier``)."""
        parts = [f"{self.kind}@{self.n}", *self._label_parts()]
        for key, value in changed_settings(self, skip=("kind", "n", "beam_width", "verifier")).items():
            parts.append(f"{key}={setting_text(value)}")
        verifier = setting_text(self.verifier)
        if verifier != "arithmetic":  # the default verifier goes unsaid
            parts.append(f"verifier={verifier}")
        return ",".join(parts)


class WidthSearchConfig(TreeSearchConfig):
    """A search that continues nodes a fixed M ways (beam search, DVTS, MCTS)."""

    beam_width: int | None = Field(None, ge=1, le=4096)
    """M, the children of each node the search continues (Snell et al. 2024's M, the
    ``beam_width`` of Hugging Face's search-and-learn): beam search keeps the N/M best nodes per
    step and expands each M ways; DVTS runs N/M subtrees that each expand their best node M ways.
    Must divide n. Default: the largest divisor of n up to 4."""

    @model_validator(mode="before")
    @classmethod
    def _default_width(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("beam_width") is None:
            n = data.get("n", cls.model_fields["n"].default)
            if isinstance(n, int) and not isinstance(n, bool) and n >= 1:
                data = {**data, "beam_width": default_beam_width(n)}
        return data

    @model_validator(mode="after")
    def _width_divides_n(self) -> WidthSearchConfig:
        m = self.width
        if m > self.n or self.n % m:
            divisors = [d for d in range(1, self.n + 1) if self.n % d == 0]
            shown = ", ".join(map(str, divisors[:8])) + (", ..." if len(divisors) > 8 else "")
            raise ValueError(f"n ({self.n}) must be a multiple of beam_width ({m}): the search keeps n/beam_width "
                             f"nodes and expands each beam_width ways. Set beam_width to a divisor of n ({shown}) "
                             f"or n to a multiple of {m}.")
        return self

    @property
    def width(self) -> int:
        """M, resolved (``beam_width`` is always set once validated)."""
        return int(self.beam_width or default_beam_width(self.n))

    def _label_parts(self) -> list[str]:
        return [f"beam_width={self.width}"] if self.width != default_beam_width(self.n) else []


class TreeSearchStrategy(VerifierStrategy):
    """A step-wise search with a verifier; subclasses name the algorithm (:meth:`search`).

    Args:
        verifier: A ready verifier to use instead of building ``config.verifier`` (tests,
            notebooks); the strategy then does not close it.
        (the rest as :class:`~tts.search.base.Strategy`)
    """

    config_class: ClassVar[type[StrategyConfigBase]] = TreeSearchConfig
    budget_use = BudgetUse.SPENDS_ITSELF
    """A search runs as configured, or refuses a budget below its worst case before generating."""
    pool_rule = None

    @abstractmethod
    def search(self, space: StepwiseSpace, scorer: StepScorer) -> list[SearchResult[StepState]]:
        """Run the algorithm from every root of ``space``; one result per root, in order."""

    def solve(self, problems: Sequence[Any], budgets: Sequence[Budget | None] | None = None) -> list[Solution]:
        """Search every problem in lockstep: each step is one generator and one verifier call for all."""
        if budgets is not None:
            if len(budgets) != len(problems):
                raise StrategyInputError(f"got {len(budgets)} budgets for {len(problems)} problems; "
                                         "give one per problem")
            for b in budgets:
                self._check_budget(b)
        if not problems:
            return []
        c = self.config
        space = StepwiseSpace(self.generator, self.prompt, problems, self.sampling, separator=c.step_separator,
                              max_depth=c.max_depth, step_tokens=c.step_tokens, extract=self.extract, seed=self.seed,
                              seed_key=c.label, answer_tokens=ANSWER_TOKENS, heal_separator=c.heal_separator,
                              force_answer=c.force_answer)
        scorer = StepScorer(self.verifier, len(problems))
        results = self.search(space, scorer)
        return [self._solution(i, p, r, space, scorer) for i, (p, r) in enumerate(zip(problems, results, strict=True))]

    def n_within(self, budget: Budget) -> int | None:
        """``config.n``: a search runs as configured (:meth:`solve` refuses a budget below its worst case)."""
        return self.config.n

    def _check_budget(self, budget: Budget | None) -> None:
        """A search runs as configured; a budget below its worst case is refused, not overspent."""
        if budget is None:
            return
        c = self.config
        if budget.samples is not None and budget.samples < c.n:
            raise StrategyInputError(f"{self.name}: a budget of {budget.samples} samples is below n={c.n} candidates; "
                                     f"lower n to {budget.samples} or raise the budget.")
        answer = ANSWER_TOKENS if c.force_answer else 0
        worst = c.n * (c.max_depth * min(c.step_tokens, self.sampling.max_tokens) + answer)
        if budget.tokens is not None and budget.tokens < worst:
            raise StrategyInputError(f"{self.name}: a budget of {budget.tokens} tokens is below the search's "
                                     f"worst case of {worst} (n={c.n} x max_depth={c.max_depth} steps of up to "
                                     f"{min(c.step_tokens, self.sampling.max_tokens)} tokens"
                                     f"{', plus forced answers' if c.force_answer else ''}); "
                                     "lower n, max_depth or step_tokens, or raise the budget.")

    # --- one problem's solution -----------------------------------------------------------------

    def _solution(self, i: int, problem: Problem, result: SearchResult[StepState], space: StepwiseSpace,
                  scorer: StepScorer) -> Solution:
        leaves = result.leaf_nodes
        samples = tuple(self._sample(n.state) for n in leaves)
        scores = tuple(n.score for n in leaves)
        events: Counter[str] = Counter(result.events)
        events.update(space.events[i])
        answer, confidence, votes, selected = self._select(samples, scores, events)
        tree = LazyRecords(partial(self._tree, result.nodes), len(result.nodes))
        # The chosen candidate's node, so a viewer marks its path (``tts show --html``); the search's
        # own records (particle weights per step) beside it.
        notes = {**result.notes, **({"chosen_node": result.leaves[selected]} if selected is not None else {})}
        trace = Trace(self.name, samples, scores, votes, selected, tree=tree,
                      events=dict(sorted(events.items())), notes=notes)
        return Solution(problem.id, answer, confidence, space.usage[i] + scorer.usage[i], trace)

    def _sample(self, state: StepState) -> Sample:
        logprobs = state.logprobs  # the mean of the steps' means, where every step has one
        return _new_sample(
            self.config.step_separator.join(state.steps),  # text (StepState.text, inlined)
            state.answer,  # answer
            state.tokens,  # completion_tokens
            sum(logprobs) / len(logprobs) if logprobs and None not in logprobs else None,  # mean_logprob
            # finish_reason; "unfinished": a partial solution kept as a candidate (DVTS with siblings="all").
            "forced" if state.forced else ("stop" if state.finished else "unfinished"),
        )

    def _select(self, samples: Sequence[Sample], scores: Sequence[float],
                events: Counter[str]) -> tuple[str | None, float, dict[str, float], int | None]:
        """(answer, confidence, votes, index of the chosen sample)."""
        if self.config.select == "verifier":
            answered = [j for j, s in enumerate(samples) if s.answer is not None]
            if not answered:
                return None, 0.0, {}, None
            best = max(answered, key=lambda j: (scores[j], -j))
            return samples[best].answer, max(scores[best], 0.0), {}, best
        weights = [max(s, 0.0) for s in scores]
        if samples and not any(weights):
            events["unweighted_vote"] += 1  # no candidate has a valid score: a plain vote
            weights = [1.0] * len(samples)
        answer, share, votes, idx = self.vote(samples, weights)
        return answer, share, votes, idx

    @staticmethod
    def _tree(nodes: Sequence[TreeNode[StepState]]) -> tuple[dict[str, Any], ...]:
        """``Trace.tree``: every node as a JSON-ready dict, built in one comprehension (one dict per
        node of the search, thousands per problem: a call per node would cost a third more), when
        the tree is first read (:class:`~tts.types.LazyRecords`: a reply or ``tts.solve`` never
        reads it)."""
        return tuple([{"id": n.id, "parent": n.parent, "depth": n.depth, "text": n.state.step, "score": n.score,
                       "kept": n.kept, "finished": n.state.finished, "answer": n.state.answer,
                       "forced": n.state.forced,
                       # the step's own generated tokens (a forced answer's included): the path's less its parent's
                       "tokens": n.state.tokens - (0 if n.parent is None else nodes[n.parent].state.tokens)}
                      for n in nodes])

    # --- cost hook --------------------------------------------------------------------------------

    @classmethod
    def planned_requests(cls, n: int, prompt_tokens: int, gen_tokens: int,
                         cached_tokens: int = 0) -> list[RequestShape]:
        """Cost hook (``tts cost``): the requests of one problem in the worst case, with default settings.

        No solution finishes early: ``max_depth`` steps of ``gen_tokens / max_depth`` tokens. The
        first step samples n steps from the prompt; each later one sends n/M requests of M samples
        whose prompt (the question and the steps so far) is in the prefix cache from the step
        before. Verifier calls and forced answers are not included.
        """
        depth = cls.config_class.model_fields["max_depth"].default
        m = default_beam_width(n)
        g = math.ceil(gen_tokens / depth)
        shapes = [RequestShape(prompt_tokens, cached_tokens, (g,) * n)]
        for t in range(1, depth):
            p = prompt_tokens + t * g
            shapes += [RequestShape(p, p, (g,) * m) for _ in range(n // m)]
        return shapes
