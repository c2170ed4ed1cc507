"""AB-MCTS: adaptive branching tree search over whole answers, with Thompson sampling (Inoue et al. 2025).

Inoue, Misaki, Imajuku, Kuroki, Nakamura and Akiba, "Wider or Deeper? Scaling LLM Inference-Time
Compute with Adaptive Branching Tree Search" (arXiv:2503.04412; Sakana AI's TreeQuest). A node is
a whole answer; a child of the root is a fresh sample, a child of an answer is a *refinement* of
it (the model sees its answer and is asked to correct it). Each generation is chosen by a descent
from the root in which every node decides by Thompson sampling between

- GEN: generate a new child here (at the root: a new sample, going *wider*; at an answer:
  refine it, going *deeper*), and
- CONT: descend into one of its existing children (itself chosen by Thompson sampling),

so the search widens where fresh samples have scored well and deepens where refinements have.
The multi-LLM variant also chooses, by Thompson sampling, which model generates.

This implementation follows TreeQuest's ABMCTS-A with Beta posteriors (github.com/SakanaAI/treequest,
``algos/ab_mcts_a``; pinned in tests/parity/test_ab_mcts.py), for verifier scores in [0, 1]:

1. Statistics per node, backed up after every scored generation: GEN's posterior from the scores
   of the children the node generated; CONT's posterior from the scores of its grandchildren and
   every deeper descendant, its children's own scores NOT included (they are GEN's evidence), as
   in TreeQuest's back-propagation; and one posterior per child, from that child's own score and
   its whole subtree's (which child CONT descends into). A score s counts as a fractional success:
   Beta(a + sum s, b + sum (1 - s)) with the prior Beta(a, b) = Beta(0.5, 0.5) (Jeffreys, TreeQuest's
   ``BetaPrior``); ``prior_a = prior_b = 1`` gives the uniform prior tts used before.
2. A node without children always takes GEN. Ties go to GEN.
3. Model choice (``models`` with more than one entry): a Beta posterior per model over the scores
   of every answer that model wrote for this problem (the whole tree, not per node), as
   TreeQuest's default multi-armed-bandit Thompson sampling (``multiarm_bandit_thompson``; its
   per-node ``stack`` variant is not implemented); the model with the highest draw generates.

Departures: TreeQuest's ABMCTS-A defaults to Gaussian posteriors (``dist_type="gaussian"``); tts
implements the Beta variant only, which suits scores in [0, 1]. TreeQuest also draws GEN and CONT at
a childless node, where the outcome is fixed; tts skips those draws (same decisions in distribution).
4. Batching: each round, every problem makes ``parallel`` independent descents (default 1, the
   paper's sequential search), all generations of the round go out as ONE generator call per
   model for all problems, and all new answers are scored in ONE verifier call. ``n`` is the
   number of answers generated per problem.
5. The answer: a vote over all answers weighted by verifier score (``select="weighted_vote"``),
   the best-scored answer (``verifier``; TreeQuest's choice) or a plain vote (``vote``).

The trace records every node's action (``widen``/``deepen``), model and parent, and
``Trace.notes["ab_mcts"]`` the counts of widen and deepen choices and of generations per model.
"""

from __future__ import annotations

import dataclasses
import logging
import random
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, Field, TypeAdapter, field_validator

from tts.answers import answer_keys, extract_answer
from tts.backends.base import GenerationRequest, Generator, Message, derive_seed
from tts.backends.engine_pool import EnginePool
from tts.config import (
    BackendConfig,
    SamplingConfig,
    StrategyConfigBase,
    VerifierConfig,
    changed_settings,
    setting_text,
    settings_line,
)
from tts.search.base import BudgetUse, ExtractFn, PromptFn, StrategyInputError, VerifierStrategy, solution_item, to_sample
from tts.types import Budget, Problem, Sample, Solution, Trace, Usage
from tts.verifiers.base import Verifier, VerifierScore, clean_score, score_or_fallback

logger = logging.getLogger(__name__)

ROOT = -1
"""Key of the root (the problem, no answer) in a tree's statistics."""

POLICY = "policy"
"""The run's own model in ``models``."""

JEFFREYS = (0.5, 0.5)
"""The Beta prior's (a, b) by default: Jeffreys, as TreeQuest's ``BetaPrior``."""


@dataclass(slots=True)
class _Stats:
    """Sum and count of scores (a Beta posterior's evidence)."""

    total: float = 0.0
    count: int = 0

    def add(self, score: float) -> None:
        self.total += score
        self.count += 1

    def draw(self, rng: random.Random, prior: tuple[float, float] = JEFFREYS) -> float:
        """A Thompson draw from Beta(a + sum s, b + sum (1 - s)), the prior being Beta(a, b)."""
        return rng.betavariate(prior[0] + self.total, prior[1] + self.count - self.total)


@dataclass(slots=True)
class ABNode:
    """One answer of the tree: its parent (None: a fresh sample), the model and action that made it."""

    id: int
    parent: int | None
    depth: int
    state: Any
    score: float
    model: str
    action: str  # "widen" (a fresh sample) or "deepen" (a refinement of the parent)


@dataclass(frozen=True, slots=True)
class Job:
    """One generation a descent chose: under ``parent`` (None: from the root) with ``model``."""

    root: int
    parent: ABNode | None
    model: str


class ABTree:
    """One problem's AB-MCTS tree: its answers and the statistics Thompson sampling draws from."""

    def __init__(self, models: Sequence[str], prior: tuple[float, float] = JEFFREYS) -> None:
        self.models = list(models)
        self.prior = prior
        self.nodes: list[ABNode] = []
        self.children: dict[int, list[int]] = {ROOT: []}
        self.gen: dict[int, _Stats] = {ROOT: _Stats()}
        self.cont: dict[int, _Stats] = {ROOT: _Stats()}
        self.subtree: dict[int, _Stats] = {}
        self.by_model: dict[str, _Stats] = {m: _Stats() for m in self.models}
        self.choices: Counter[str] = Counter()

    def select(self, rng: random.Random) -> tuple[int, str]:
        """One descent: (the node to generate under, ROOT for a fresh sample; the model)."""
        key = ROOT
        while True:
            kids = self.children[key]
            if not kids or self.gen[key].draw(rng, self.prior) >= self.cont[key].draw(rng, self.prior):
                break
            key = max(kids, key=lambda c: self.subtree[c].draw(rng, self.prior))
        if len(self.models) == 1:
            return key, self.models[0]
        return key, max(self.models, key=lambda m: self.by_model[m].draw(rng, self.prior))

    def add(self, parent: int, state: Any, score: float, model: str) -> ABNode:
        """Record a scored answer generated under ``parent`` and back its score up."""
        node = ABNode(len(self.nodes), None if parent == ROOT else parent,
                      1 if parent == ROOT else self.nodes[parent].depth + 1, state, score, model,
                      "widen" if parent == ROOT else "deepen")
        self.nodes.append(node)
        self.choices[node.action] += 1
        self.children[node.id] = []
        self.gen[node.id], self.cont[node.id] = _Stats(), _Stats()
        self.subtree[node.id] = _Stats()
        self.subtree[node.id].add(score)
        self.children[parent].append(node.id)
        self.gen[parent].add(score)
        self.by_model[model].add(score)
        # CONT of every ancestor above the parent (a node's CONT never holds its children's own
        # scores), and the subtree of every ancestor from the parent up.
        key: int | None = parent
        while key is not None and key != ROOT:
            self.subtree[key].add(score)
            up = self.nodes[key].parent
            self.cont[ROOT if up is None else up].add(score)
            key = up
        return node


def ab_mcts_search(roots: int, expand: Callable[[list[Job]], list[tuple[Any, float]]], n: int,
                   models: Sequence[str] = (POLICY,), parallel: int = 1,
                   rngs: Sequence[random.Random] | None = None,
                   prior: tuple[float, float] = JEFFREYS) -> list[ABTree]:
    """AB-MCTS from ``roots`` problems in lockstep.

    Args:
        roots: Number of problems.
        expand: Generates and scores a round's jobs, all problems at once: one (state, score in
            [0, 1]) per job, in order. A score outside [0, 1] is the caller's to clean.
        n: Answers generated per problem.
        models: The models the search may call (Thompson sampling chooses among several).
        parallel: Descents per problem per round (all generated in one round).
        rngs: One random generator per problem (default: seeded 0, 1, 2, ...).
        prior: (a, b) of every posterior's Beta prior (default Jeffreys, as TreeQuest).

    Returns:
        One :class:`ABTree` per problem, with n answers each.
    """
    if n < 1 or parallel < 1:
        raise ValueError(f"n ({n}) and parallel ({parallel}) must be >= 1")
    if not models or len(set(models)) != len(models):
        raise ValueError(f"models must be distinct names, at least one; got {list(models)}")
    if min(prior) <= 0:
        raise ValueError(f"the Beta prior's (a, b) must both be > 0; got {prior}")
    trees = [ABTree(models, prior) for _ in range(roots)]
    rngs = list(rngs) if rngs is not None else [random.Random(i) for i in range(roots)]
    if len(rngs) != roots:
        raise ValueError(f"got {len(rngs)} random generators for {roots} problems; give one per problem")
    while True:
        jobs: list[Job] = []
        for i, (tree, rng) in enumerate(zip(trees, rngs, strict=True)):
            for _ in range(min(parallel, n - len(tree.nodes))):
                key, model = tree.select(rng)
                jobs.append(Job(i, None if key == ROOT else tree.nodes[key], model))
        if not jobs:
            return trees
        made = expand(jobs)
        if len(made) != len(jobs):
            raise RuntimeError(f"expand returned {len(made)} answers for {len(jobs)} jobs")
        for job, (state, score) in zip(jobs, made, strict=True):
            trees[job.root].add(ROOT if job.parent is None else job.parent.id, state, score, job.model)


# --- the strategy ------------------------------------------------------------------------------------


class ABMCTSConfig(StrategyConfigBase):
    """AB-MCTS: Thompson sampling chooses per generation between a new sample (wider) and refining an answer (deeper)."""

    kind: Literal["ab_mcts"] = "ab_mcts"
    n: int = Field(8, ge=1, le=4096)
    """Answers generated per problem (fresh samples and refinements together)."""
    verifier: VerifierConfig = Field("arithmetic", validate_default=True)
    """Scores every answer in [0, 1]: the evidence Thompson sampling learns from."""
    models: tuple[str | dict[str, Any], ...] = Field((POLICY,), min_length=1)
    """The models the search may call; with more than one, Thompson sampling chooses. ``policy``
    is the run's model; a name (``qwen2.5-coder-1.5b``) is the run's backend settings with that
    model; a mapping is backend settings on top of the run's (or a whole backend config with its
    own ``kind``)."""
    parallel: int = Field(1, ge=1, le=4096)
    """Descents per problem per round: 1 is the paper's one-at-a-time search; more makes fewer
    engine calls (n / parallel rounds) at the cost of deciding on older evidence."""
    instruction: str = Field(
        "Check your solution above for mistakes, then write a corrected solution that ends with the final answer.",
        min_length=1)
    """The user turn that asks for a refinement, after the answer being refined."""
    select: Literal["weighted_vote", "verifier", "vote"] = "weighted_vote"
    """The answer among all generated: a vote weighted by verifier score, the best-scored one, or a plain vote."""
    prior_a: float = Field(0.5, gt=0.0, le=100.0)
    """a of the Beta(a, b) prior of every Thompson-sampling posterior: 0.5 with ``prior_b = 0.5`` is
    Jeffreys' prior, TreeQuest's default; 1 and 1 is the uniform prior (tts's rule before)."""
    prior_b: float = Field(0.5, gt=0.0, le=100.0)
    """b of the Beta(a, b) prior (see ``prior_a``)."""

    @property
    def label(self) -> str:
        """``ab_mcts@8``; settings that differ from their defaults follow, the models by name
        (``ab_mcts@8,models=policy+qwen2.5-coder-1.5b,parallel=4``)."""
        parts = [f"{self.kind}@{self.n}"]
        for key, value in changed_settings(self, skip=("kind", "n", "verifier", "models")).items():
            parts.append(f"{key}={setting_text(value)}")
        if self.models != (POLICY,):
            parts.append("models=" + "+".join(_entry_text(m) for m in self.models))
        verifier = setting_text(self.verifier)
        if verifier != "arithmetic":  # the default verifier goes unsaid
            parts.append(f"verifier={verifier}")
        return ",".join(parts)

    @field_validator("models")
    @classmethod
    def _distinct(cls, models: tuple[str | dict[str, Any], ...]) -> tuple[str | dict[str, Any], ...]:
        names = [_model_name(m) for m in models]
        if len(set(names)) != len(names):
            raise ValueError(f"models must be distinct, got {names}; give each entry its own model (or a 'name').")
        return models


def _model_name(entry: str | Mapping[str, Any]) -> str:
    """The name an entry of ``models`` goes by in traces (``name``, else its ``model``, else its kind)."""
    if isinstance(entry, str):
        return entry
    return str(entry.get("name") or entry.get("model") or entry.get("kind", POLICY))


def _entry_text(entry: str | Mapping[str, Any]) -> str:
    """An entry of ``models`` in a label: its name, then any other settings (two configs that differ
    in a model's settings must get two labels)."""
    rest = {} if isinstance(entry, str) else {k: v for k, v in entry.items() if k not in ("name", "model")}
    inner = ",".join(f"{k}={setting_text(v)}" for k, v in sorted(rest.items()))
    return f"{_model_name(entry)}({inner})" if inner else _model_name(entry)


def backend_config(entry: str | Mapping[str, Any], policy: Generator) -> BaseModel | None:
    """The backend config of an entry of ``models`` (None: the policy's own generator).

    Raises:
        StrategyInputError: The entry does not make a valid backend config (says which).
    """
    if entry == POLICY:
        return None
    data = {"model": entry} if isinstance(entry, str) else {k: v for k, v in entry.items() if k != "name"}
    base = getattr(policy, "config", None)
    if not isinstance(base, BaseModel):
        from tts.backends.scripted import ScriptedGenerator
        from tts.config import ScriptedBackendConfig

        if not isinstance(policy, ScriptedGenerator):
            raise StrategyInputError(f"ab_mcts: the run's generator ({type(policy).__name__}) has no backend config "
                                     f"to derive model {_model_name(entry)!r} from; give the entry its own kind")
        base = ScriptedBackendConfig(model=policy.model_name, seed=policy.seed)
    if data.get("kind", base.kind) == base.kind:
        data = {**base.model_dump(), **data}
    try:
        return TypeAdapter(BackendConfig).validate_python(data)
    except ValueError as exc:
        raise StrategyInputError(settings_line(exc, f"ab_mcts: model {_model_name(entry)!r}")) from None


class ABMCTS(VerifierStrategy):
    """AB-MCTS over whole answers (Inoue et al. 2025); see the module docstring.

    Args:
        verifier: A ready verifier instead of building ``config.verifier`` (not closed here).
        generators: Ready generators by model name instead of opening ``config.models`` (tests,
            notebooks; not closed here).
        (the rest as :class:`~tts.search.base.Strategy`)
    """

    name = "ab_mcts"
    config_class: ClassVar[type[StrategyConfigBase]] = ABMCTSConfig
    budget_use = BudgetUse.SPENDS_ITSELF  # runs as configured, or refuses a budget below its worst case
    pool_rule = None  # refinements depend on earlier answers: not replayable from i.i.d. samples

    def __init__(self, config: Any, generator: Generator, prompt: PromptFn, sampling: SamplingConfig | None = None,
                 extract: ExtractFn = extract_answer, seed: int = 0, verifier: Verifier | None = None,
                 generators: Mapping[str, Generator] | None = None) -> None:
        super().__init__(config, generator, prompt, sampling, extract, seed, verifier)
        self._given = dict(generators or {})
        self._pool = EnginePool()
        self.model_names = [_model_name(m) for m in config.models]

    def close(self) -> None:
        """Close the verifier and the generators this strategy opened (never the run's)."""
        super().close()
        self._pool.close_all()

    def _generators(self, problems: Sequence[Problem]) -> dict[str, tuple[Generator, str]]:
        """Model name -> (generator, the model its requests are priced on; "" for the policy)."""
        out: dict[str, tuple[Generator, str]] = {}
        for entry, name in zip(self.config.models, self.model_names, strict=True):
            if name in self._given:
                gen = self._given[name]
                out[name] = (gen, "" if gen is self.generator else getattr(gen, "model_name", name))
                continue
            cfg = backend_config(entry, self.generator)
            if cfg is None or cfg == getattr(self.generator, "config", None):
                out[name] = (self.generator, "")
                continue
            if cfg.kind == "scripted":  # answers only the problems it was opened with: cheap to reopen
                self._pool.close(cfg)
            gen = self._pool.get(cfg, problems)
            out[name] = (gen, gen.model_name)
        return out

    def n_within(self, budget: Budget) -> int | None:
        """``config.n``: the search runs as configured (:meth:`solve` refuses a budget below its worst case)."""
        return self.config.n

    def _check(self, budgets: Sequence[Budget | None] | None, count: int) -> None:
        if budgets is None:
            return
        if len(budgets) != count:
            raise StrategyInputError(f"got {len(budgets)} budgets for {count} problems; give one per problem")
        for b in budgets:
            if b is None:
                continue
            if b.samples is not None and b.samples < self.config.n:
                raise StrategyInputError(f"ab_mcts: a budget of {b.samples} samples is below n={self.config.n} "
                                         f"answers; lower n to {b.samples} or raise the budget.")
            if b.tokens is not None and b.tokens < self.config.n * self.sampling.max_tokens:
                raise StrategyInputError(f"ab_mcts: a budget of {b.tokens} tokens is below the search's worst case of "
                                         f"{self.config.n * self.sampling.max_tokens} (n={self.config.n} answers of up "
                                         f"to max_tokens={self.sampling.max_tokens}); lower n or raise the budget.")

    def solve(self, problems: Sequence[Any], budgets: Sequence[Budget | None] | None = None) -> list[Solution]:
        """Search every problem in lockstep: per round, one generate call per model and one verifier call."""
        self._check(budgets, len(problems))
        if not problems:
            return []
        generators = self._generators(problems)
        usage: list[list[Usage]] = [[] for _ in problems]
        events: list[Counter[str]] = [Counter() for _ in problems]
        made = [0] * len(problems)
        label, c = self.config.label, self.config

        def request(job: Job) -> GenerationRequest:
            problem = problems[job.root]
            messages = self.prompt(problem)
            if job.parent is not None:
                messages = (*messages, Message("assistant", job.parent.state.text), Message("user", c.instruction))
            where = "root" if job.parent is None else f"node{job.parent.id}"
            drawn = made[job.root]  # requests of this problem so far: no two share a seed
            made[job.root] += 1
            return GenerationRequest(messages=messages, n=1, temperature=self.sampling.temperature,
                                     top_p=self.sampling.top_p, max_tokens=self.sampling.max_tokens,
                                     seed=derive_seed(self.seed, f"{problem.id}|{label}|{job.model}|{where}", drawn),
                                     key=problem.id)

        def expand(jobs: list[Job]) -> list[tuple[Sample, float]]:
            # 1. One generate call per model for the round's jobs of every problem.
            texts: list[Sample | None] = [None] * len(jobs)
            requests = [request(j) for j in jobs]
            for model, (gen, priced_on) in generators.items():
                mine = [i for i, j in enumerate(jobs) if j.model == model]
                if not mine:
                    continue
                results = gen.generate([requests[i] for i in mine])
                if len(results) != len(mine):
                    raise RuntimeError(f"model {model!r} returned {len(results)} results for {len(mine)} requests")
                for i, result in zip(mine, results, strict=True):
                    u = result.usage
                    if priced_on:
                        u = dataclasses.replace(u, shapes=tuple(dataclasses.replace(s, model=priced_on)
                                                                for s in u.shapes))
                    usage[jobs[i].root].append(u)
                    if result.completions:
                        texts[i] = to_sample(result.completions[0], self.extract)
                    else:
                        events[jobs[i].root]["no_completion"] += 1
                        texts[i] = Sample(text="", answer=None, completion_tokens=0)
            samples: list[Sample] = [t for t in texts if t is not None]
            # 2. One verifier call for every new answer.
            items = [solution_item(problems[j.root], s.text, self.verifier, mean_logprob=s.mean_logprob)
                     for j, s in zip(jobs, samples, strict=True)]
            scored, failed = score_or_fallback(self.verifier, items, VerifierScore((), 0.0), "answers")
            out = []
            for j, s, v in zip(jobs, samples, scored, strict=True):
                if failed:
                    events[j.root]["verifier_error"] += 1
                value, bad = clean_score(v.score)
                if bad or v.invalid:
                    events[j.root]["invalid_score"] += bad + v.invalid
                if v.usage.calls or v.usage.prompt_tokens or v.usage.completion_tokens:
                    usage[j.root].append(v.usage)
                out.append((s, value))
            return out

        rngs = [random.Random(derive_seed(self.seed, f"{p.id}|{label}|thompson", 0)) for p in problems]
        trees = ab_mcts_search(len(problems), expand, c.n, self.model_names, c.parallel, rngs, (c.prior_a, c.prior_b))
        return [self._solution(p, t, Usage.total(u), e)
                for p, t, u, e in zip(problems, trees, usage, events, strict=True)]

    def _solution(self, problem: Any, tree: ABTree, usage: Usage, events: Counter[str]) -> Solution:
        samples = tuple(node.state for node in tree.nodes)
        scores = tuple(node.score for node in tree.nodes)
        if self.config.select == "verifier":
            answered = [j for j, s in enumerate(samples) if s.answer is not None]
            best = max(answered, key=lambda j: (scores[j], -j)) if answered else None
            answer, confidence, votes = (samples[best].answer, scores[best], {}) if best is not None else (None, 0.0, {})
        else:
            weights = [max(s, 0.0) for s in scores] if self.config.select == "weighted_vote" else None
            if weights is not None and samples and not any(weights):
                events["unweighted_vote"] += 1
                weights = None
            answer, confidence, votes, best = self.vote(samples, weights)
        chosen = answer_keys([answer])[0] if answer is not None else None
        keys = answer_keys([s.answer for s in samples])
        nodes = tuple({"id": n.id, "parent": n.parent, "depth": n.depth, "text": n.state.text, "score": n.score,
                       "answer": n.state.answer, "model": n.model, "action": n.action, "finished": True,
                       "tokens": n.state.completion_tokens,
                       "kept": chosen is not None and key == chosen} for n, key in zip(tree.nodes, keys, strict=True))
        notes = {"ab_mcts": {"widen": tree.choices["widen"], "deepen": tree.choices["deepen"],
                             "models": {m: s.count for m, s in tree.by_model.items()}},
                 **({"chosen_node": tree.nodes[best].id} if best is not None else {})}
        trace = Trace(self.name, samples, scores, votes, best, tree=nodes, events=dict(sorted(events.items())),
                      notes=notes)
        return Solution(problem.id, answer, confidence, usage, trace)
