"""``strategy="auto"``: per problem, the selection rule and sample count that buy the most accuracy.

One :meth:`AutoStrategy.solve` over a batch of problems, under ``budget`` per problem on average
(``tts eval --strategy auto --budget B`` passes B / problems, and runs all problems as one batch):

1. Calibration (once): the source's samples (:func:`~tts.budgets.calibration_source.load_calibration`)
   give a difficulty model, bins and per-(rule, bin) accuracy-vs-n curves
   (:func:`~tts.budgets.cross_allocator.calibrate`).
2. Minimum: the pilot of every problem at the calibration's mean sample length (prompts assumed
   cached, so a lower bound); a smaller total budget is refused before anything is drawn, naming
   that minimum. A pilot that turns out to cost more than the budget is refused after it.
3. Pilot: ``pilot`` samples per problem in ONE generator call (with logprobs when a rule reads
   scores); their measured cost is paid from the budget.
4. Plan: :func:`~tts.budgets.cross_allocator.choose` gives each problem a rule and an n from its
   pilot (difficulty bin, predicted length = pilot mean) within the rest of the budget.
5. The extra samples, in ONE generator call; each problem's samples are aggregated by its rule's
   strategy (self_consistency, best_of_n, weighted_vote). The trace's ``notes`` say what was
   chosen and why (bin, expected accuracy, gain per unit cost, what the other rules would give).

With ``verifier``, best_of_n and weighted_vote score their samples with that verifier (every
sample of the batch that such a rule aggregates, in ONE verifier call) instead of by mean logprob,
and their calibration curves are replays of the same verifier's scores, read from a calibration
run of best_of_n or weighted_vote configured with it. The plan prices generation only: a verifier
that runs a model (a PRM, a judge) costs more than the plan counts, and that cost is in each
solution's usage all the same.

With ``escalate`` (past ``tts eval`` runs of search strategies on the calibration problems), step
4 also offers each problem those searches at its bin's measured accuracy and cost
(:mod:`tts.budgets.escalation`): the pilot is the online stage, and a contested problem whose bin
the search measurably wins goes to the search (its pilot stays paid; the trace keeps its votes).
Each search runs once over all its problems. The noise guard (``switch_z``) keeps the allocator on
the best overall rule wherever another option's gain is within noise.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar, Literal

import numpy as np
from pydantic import Field, field_validator, model_validator

from tts.backends.base import GenerationResult, count_prompt_tokens
from tts.budgets.allocator import BudgetTooSmallError
from tts.budgets.cross_allocator import (
    Calibration,
    Pricer,
    calibrate,
    choose,
    efficiency_from_report,
    ladder,
    make_pricer,
    pilot_feature_rows,
)
from tts.budgets.escalation import Escalation, fit_escalation, read_escalation_runs, reuses_pilot
from tts.budgets.replay.prefix import random_orders
from tts.budgets.strategy_curves import RULES, SWITCH_Z, check_pool_supports, parse_rules
from tts.cost.deployment import deployment_of
from tts.config import SamplingStrategyConfig, StrategyConfigBase, VerifierConfig
from tts.registry import STRATEGIES
from tts.search.base import BudgetUse, Strategy, StrategyInputError, to_sample
from tts.search.sampling.self_consistency import SelfConsistency, SelfConsistencyConfig
from tts.types import Budget, Solution

logger = logging.getLogger(__name__)


class AutoConfig(StrategyConfigBase):
    """Choose the strategy and n per problem under a budget, from curves of a calibration run."""

    kind: Literal["auto"] = "auto"
    budget: float = Field(gt=0)
    """Budget per problem on average, in ``budget_unit`` (pilot included); a batch of P problems
    may spend P times this. ``tts eval --budget`` gives the total and divides it. Any form of
    :class:`tts.budgets.pricing.ComputeBudget` is read (``0.01 dollars``, ``{"eflops": 1e15}``):
    its unit becomes ``budget_unit``."""
    budget_unit: Literal["tokens", "eflops", "gpu_seconds", "dollars"] = "tokens"
    """tokens (generated + uncached prompt), eflops (Kinetics), gpu_seconds (roofline x efficiency),
    dollars (those seconds at the GPU's hourly price); the last three price on ``gpu``."""
    calibration: str
    """A sample-pool file, a past ``tts eval`` run directory or a ``tts sweep`` directory of this model
    on OTHER problems."""
    strategies: tuple[str, ...] = ("self_consistency", "best_of_n", "weighted_vote")
    """Strategies to choose from: self_consistency (vote), best_of_n and weighted_vote (both by mean
    token logprob, which the calibration source must record, or by ``verifier``)."""
    verifier: VerifierConfig | None = None
    """Score best_of_n's and weighted_vote's samples with this verifier rather than their mean
    logprob. The calibration must then be a ``tts eval`` run (or sweep) with best_of_n or
    weighted_vote configured with the same verifier, every setting equal: their curves replay its
    scores."""
    pilot: int = Field(4, ge=1)
    """Pilot samples per problem (kept: every strategy here aggregates them)."""
    n_max: int = Field(64, ge=2)
    """Most samples per problem (also capped by the calibration's samples per problem)."""
    gpu: str = "h100"
    """GPU that prices eflops, gpu_seconds and dollars."""
    efficiency: float = Field(1.0, gt=0)
    """Measured seconds per roofline second for gpu_seconds and dollars: a number, or the JSON file of
    ``tts cost calibrate --engine --json`` (its median ratio)."""
    difficulty: Literal["learned", "pilot"] = "learned"
    """Difficulty: logistic model on pilot features fitted on the calibration problems, or pilot agreement."""
    n_bins: int = Field(5, ge=1)
    """Quantile difficulty bins."""
    prompt_length: bool = False
    """Add each problem's log prompt length (tokens) to the learned difficulty's pilot features: for
    problems whose question's length tracks their difficulty (``chains``: its number of operations),
    which the pilot's answers alone may not show. The calibration source must record prompt lengths
    (a ``tts eval`` run does; pool files need a per-problem ``prompt_tokens`` field)."""
    escalate: tuple[str, ...] = ()
    """Past ``tts eval`` runs of search or verification strategies (rebase, beam, lookahead, ...) on
    the calibration problems: each config in them becomes an option a problem can be escalated to
    after its pilot, at its difficulty bin's measured accuracy and cost (``RUN`` for every config of
    the run, ``RUN::LABEL`` for one, e.g. ``runs/cal_rebase::rebase@4``; a string lists several
    separated by ``;``, since labels hold commas)."""
    escalate_accuracy: Literal["bin", "learned"] = "bin"
    """An escalation option's expected accuracy on a problem: ``bin``, the mean over its difficulty
    bin's calibration problems; ``learned``, a logistic model of that option's own correctness on
    the pilot features (the calibration's, ``prompt_length`` included), per problem. ``learned``
    suits options whose gain does not follow the predicted pass rate the bins sort by (a search
    that wins on two-step chains and cannot on four-step ones in the same bin). The noise guard
    applies per bin either way."""
    switch_z: float = Field(SWITCH_Z, ge=0)
    """Noise guard: choose a strategy other than the calibration's best overall one only in a bin
    where its gain exceeds this many standard errors (0 trusts every fitted curve)."""

    @field_validator("strategies", mode="before")
    @classmethod
    def _strategies(cls, value: Any) -> Any:
        names = value.split(",") if isinstance(value, str) else list(value)
        for name in names:
            rule = parse_rules([name])[0]
            if RULES[rule].strategy is None:
                raise ValueError(f"{name} is a pool-only rule (no live strategy runs it); choose from "
                                 + ", ".join(i.strategy for i in RULES.values() if i.strategy))
        return tuple(RULES[parse_rules([n])[0]].strategy for n in names)

    @field_validator("escalate", mode="before")
    @classmethod
    def _escalate(cls, value: Any) -> Any:
        return tuple(v.strip() for v in value.split(";") if v.strip()) if isinstance(value, str) else value

    @field_validator("efficiency", mode="before")
    @classmethod
    def _efficiency(cls, value: Any) -> Any:
        if isinstance(value, (str, Path)):
            try:
                return float(value)
            except ValueError:
                return efficiency_from_report(value)
        return value

    @model_validator(mode="before")
    @classmethod
    def _one_budget_type(cls, data: Any) -> Any:
        """``budget`` in any form ComputeBudget reads, as the solve, the session and the server take it."""
        if isinstance(data, dict) and not isinstance(data.get("budget", 0), (int, float)):
            from tts.budgets.pricing import BudgetError, ComputeBudget

            try:
                parsed = ComputeBudget.parse(data["budget"], data.get("budget_unit"))
            except BudgetError as exc:
                raise ValueError(str(exc)) from None
            if parsed is not None:
                if data.get("budget_unit") not in (None, parsed.unit):
                    raise ValueError(f"budget {parsed} and budget_unit {data['budget_unit']!r} disagree; give one unit")
                data = {**data, "budget": parsed.amount, "budget_unit": parsed.unit}
        return data

    @model_validator(mode="after")
    def _prompt_length_needs_learned(self) -> AutoConfig:
        if self.prompt_length and self.difficulty != "learned":
            raise ValueError("prompt_length adds a feature to the learned difficulty; set difficulty=learned "
                             "or leave prompt_length off")
        return self

    @model_validator(mode="after")
    def _verifier_needs_a_scored_rule(self) -> AutoConfig:
        if self.verifier is not None and not any(RULES[r].needs_scores for r in parse_rules(self.strategies)):
            raise ValueError(f"verifier scores the samples of best_of_n and weighted_vote, and strategies "
                             f"{list(self.strategies)} has neither; add one or leave the verifier out")
        return self


def _joined(pilot: GenerationResult, extra: GenerationResult) -> GenerationResult:
    """A problem's pilot and its later samples as one draw (their usages added)."""
    return GenerationResult(pilot.completions + extra.completions, pilot.usage + extra.usage)


class AutoStrategy(Strategy):
    """Pilot, plan (strategy, n) per problem with the cross-strategy allocator, draw, aggregate."""

    name = "auto"
    config_class: ClassVar[type] = AutoConfig
    budget_use = BudgetUse.PRICES_ITSELF  # plans in the budget's own unit with the Pricer

    def __init__(self, config: AutoConfig, generator: Any, prompt: Any, sampling: Any = None,
                 extract: Any = None, seed: int = 0) -> None:
        kwargs = {} if extract is None else {"extract": extract}
        super().__init__(config, generator, prompt, sampling, seed=seed, **kwargs)
        self.rules = parse_rules(config.strategies)
        self._sampler = SelfConsistency(SelfConsistencyConfig(n=config.pilot), generator, prompt, self.sampling,
                                        self.extract, seed)
        self._aggregators = {}
        for rule in self.rules:
            cls = STRATEGIES.load(RULES[rule].strategy)
            fields: dict[str, Any] = {"n": 1} if issubclass(cls.config_class, SamplingStrategyConfig) else {}
            if config.verifier is not None and RULES[rule].needs_scores:
                fields["verifier"] = config.verifier
            self._aggregators[rule] = cls(cls.config_class(**fields), generator, prompt, self.sampling,
                                          self.extract, seed)
        # With a verifier, every verifier-scored rule's samples are scored in one call, by the first
        # such aggregator's verifier (they share its config).
        self._scorer = next((a for r, a in self._aggregators.items()
                             if config.verifier is not None and RULES[r].needs_scores), None)
        self._logprobs = any(RULES[r].needs_scores for r in self.rules)
        self._calibration: Calibration | None = None
        self._pricer: Pricer | None = None
        self._escalations: list[Escalation] = []
        self._searches: dict[str, Strategy] = {}
        self._lock = threading.Lock()

    # 1. Calibration and pricing, once per strategy object.
    def _setup(self) -> tuple[Calibration, Pricer]:
        with self._lock:
            if self._calibration is None:
                from tts.budgets.calibration_source import load_calibration

                cfg = self.config
                pool = load_calibration(cfg.calibration, getattr(self.generator, "model_name", None), cfg.verifier)
                check_pool_supports(pool, self.rules, f"--calibration {cfg.calibration}")
                have = int(pool.counts.min())
                if have <= cfg.pilot:
                    from tts.budgets.allocator import CalibrationError

                    raise CalibrationError(f"--calibration {cfg.calibration} has {have} samples for some problem; auto "
                                           f"needs more than the pilot's {cfg.pilot} (calibrate with a larger n)")
                if have < cfg.n_max:  # said, not silent: a plan capped here can leave budget unspent
                    logger.warning("auto: n is capped at %d, the fewest samples of any problem in --calibration %s "
                                   "(n_max is %d); calibrate with more samples per problem to let auto spend more "
                                   "on a problem", have, cfg.calibration, cfg.n_max)
                ns = ladder(cfg.pilot, min(cfg.n_max, have))
                orders = random_orders(pool.mask, 8, np.random.default_rng(self.seed))
                calibration = calibrate(pool, self.rules, cfg.pilot, ns, orders=orders,
                                        difficulty=cfg.difficulty, n_bins=cfg.n_bins,
                                        switch_z=cfg.switch_z, prompt_length=cfg.prompt_length)
                try:
                    pricer = make_pricer(cfg.budget_unit, getattr(self.generator, "model_name", None), cfg.gpu,
                                         cfg.efficiency, deployment=deployment_of(getattr(self.generator, "config", None)))
                except ValueError as exc:
                    raise StrategyInputError(f"auto: budget unit {cfg.budget_unit}: {exc}") from None
                escalations, searches = self._fit_escalations(pool, orders, calibration, pricer)
                # All or nothing: a setup that failed part-way leaves nothing set, so a retried solve
                # refuses again with the same message instead of running half set up.
                self._calibration, self._pricer = calibration, pricer
                self._escalations, self._searches = escalations, searches
            assert self._pricer is not None
            return self._calibration, self._pricer

    def _fit_escalations(self, pool: Any, orders: np.ndarray, calibration: Calibration, pricer: Pricer
                         ) -> tuple[list[Escalation], dict[str, Strategy]]:
        """Fit each escalation run's per-bin accuracy and cost, and build its strategy."""
        escalations: list[Escalation] = []
        searches: dict[str, Strategy] = {}
        for spec in self.config.escalate:
            source, _, label = spec.partition("::")
            for run in read_escalation_runs(source, label or None):
                kind = str(run.strategy.get("kind"))
                if kind not in STRATEGIES.names():
                    raise StrategyInputError(f"auto: --escalate {spec}: strategy {kind!r} is not registered")
                cls = STRATEGIES.load(kind)
                esc = fit_escalation(run, pool, calibration, orders, pricer, self.config.switch_z,
                                     self.config.escalate_accuracy)
                escalations.append(esc)
                searches[esc.label] = cls(cls.config_class(**run.strategy), self.generator, self.prompt,
                                          self.sampling, self.extract, self.seed)
        return escalations, searches

    def close(self) -> None:
        for strategy in [*self._searches.values(), *self._aggregators.values()]:
            strategy.close()
        super().close()

    def _complete_pilots(self, option: Any, problems: Sequence[Any], pilots: Sequence[Any]) -> list[Solution]:
        """A verifier-scored sampling option on escalated problems: each pilot completed to the
        option's n in ONE generator call, every sample scored in one verifier call, then aggregated."""
        k, n = self.config.pilot, option.config.n
        extra = self.generator.generate([option.request(p, n=n - k, drawn=k) for p in problems])
        merged = [_joined(a, b) for a, b in zip(pilots, extra, strict=True)]
        scored = option.score_samples(problems, merged)
        return [option.aggregate_result(p.id, r, scored=sc) for p, r, sc in zip(problems, merged, scored, strict=True)]

    def _request(self, problem: Any, n: int, drawn: int) -> Any:
        top = self._scorer.top_logprobs_needed() if self._scorer is not None else 0
        return dataclasses.replace(self._sampler.request(problem, n=n, drawn=drawn), logprobs=self._logprobs,
                                   top_logprobs=top)

    def solve(self, problems: Sequence[Any], budgets: Sequence[Budget | None] | None = None) -> list[Solution]:
        if budgets is not None and any(b is not None for b in budgets):
            raise StrategyInputError("auto spends its own budget (AutoConfig.budget); it takes no per-problem budgets")
        if not problems:
            return []
        cal, pricer = self._setup()
        cfg, k = self.config, self.config.pilot
        total = cfg.budget * len(problems)
        prompts = [count_prompt_tokens(self.generator, self._request(p, k, 0)) or 0 for p in problems]
        # 2. Refuse a budget below the cheapest plan (the pilot) before drawing anything.
        length = self._check_pilot_budget(len(problems), prompts, cal, pricer, total)
        # 3. Pilot, one call.
        pilots = self.generator.generate([self._request(p, k, 0) for p in problems])
        samples = [[to_sample(c, self.extract) for c in r.completions] for r in pilots]
        spent = sum(pricer.usage(r.usage) for r in pilots)
        # 4. Plan from the pilot.
        plan = self._plan(problems, pilots, samples, prompts, length, cal, pricer, total - spent)
        # 5. Extra samples, one call, then each problem's rule aggregates all its samples.
        more = [(i, c.n - k) for i, c in enumerate(plan.choices) if c.n > k and c.escalation is None]
        extra = dict(zip([i for i, _ in more], self.generator.generate(
            [self._request(problems[i], m, k) for i, m in more]) if more else []))
        # 5b. Escalated problems: each search runs once over its problems (its own batched calls).
        searched, reused = self._run_escalations(plan, problems, pilots)
        # 5c. Each other problem's samples (pilot and extra) as one draw; with a verifier, those of the
        # verifier-scored rules scored in one call.
        drawn = {i: _joined(pilots[i], extra[i]) if i in extra else pilots[i]
                 for i in range(len(problems)) if i not in searched}
        scored: dict[int, Any] = {}
        if self._scorer is not None:
            which = [i for i in drawn if RULES[plan.choices[i].rule].needs_scores]
            scored = dict(zip(which, self._scorer.score_samples([problems[i] for i in which],
                                                                [drawn[i] for i in which]), strict=True))
        out = []
        for i, (p, choice) in enumerate(zip(problems, plan.choices, strict=True)):
            usage = pilots[i].usage
            if i in reused:  # the pilot's samples are among the option's; its usage already counts them
                sol, pilot_votes = searched[i], None
                usage = sol.usage
            elif i in searched:  # the search's answer; the pilot was paid for and is kept in the trace's notes
                sol = searched[i]
                usage = usage + sol.usage
                sol = dataclasses.replace(sol, usage=usage)
                pilot_votes = dict(Counter(s.answer for s in samples[i] if s.answer is not None))
            else:
                sol = self._aggregators[choice.rule].aggregate_result(p.id, drawn[i], scored=scored.get(i))
                usage, pilot_votes = sol.usage, None
            notes = {**choice.to_json(), "unit": cfg.budget_unit, "pilot": k,
                     "spent": pricer.usage(usage), "batch_budget": total, "batch_problems": len(problems)}
            if pilot_votes is not None:
                notes["pilot_votes"] = pilot_votes
            trace = dataclasses.replace(sol.trace, strategy=f"auto:{choice.strategy}", notes=notes)
            out.append(dataclasses.replace(sol, trace=trace))
        logger.info("auto: %d problems, spent %.6g of %.6g %s; %s", len(problems),
                    sum(pricer.usage(s.usage) for s in out), total, cfg.budget_unit,
                    {r: sum(c.rule == r for c in plan.choices)
                     for r in [*self.rules, *(e.label for e in self._escalations)]})
        return out

    def _check_pilot_budget(self, n_problems: int, prompts: list[int], cal: Any, pricer: Any, total: float) -> float:
        """Refuse a total budget below the cheapest plan, a k-sample pilot per problem of the
        calibration's mean length (or max_tokens when it has none), prompts counted as cached: a
        lower bound, as only the generation is sure to be paid. Returns that sample length."""
        cfg, k = self.config, self.config.pilot
        length = cal.mean_tokens if np.isfinite(cal.mean_tokens) else float(self.sampling.max_tokens)
        # A lower bound: the prompts may come from the prefix cache, so only the generation is sure to be paid.
        minimum = sum(pricer.request(pt, [max(1, int(round(length)))] * k, cached=pt) for pt in prompts)
        if total < minimum:
            raise BudgetTooSmallError(
                f"auto: a budget of {total:.6g} {cfg.budget_unit} for {n_problems} problems is below the cheapest "
                f"plan, a {k}-sample pilot each (at least {minimum:.6g} {cfg.budget_unit}: {k} samples of the "
                f"calibration's mean length, {length:.0f} tokens, prompts cached); raise --budget to at least {minimum:.6g} or lower --pilot", minimum)
        return length

    def _plan(self, problems: Sequence[Any], pilots: list[Any], samples: list[list[Any]], prompts: list[int],
              length: float, cal: Any, pricer: Any, budget: float) -> Any:
        """Choose each problem's option (rule and n, or an escalation) from its pilot: the pilot's
        answer features and mean length (``length`` for an empty pilot), its prompt as the engine
        counted it, and the prompt tokens the extra request will find cached; ``budget`` is what is
        left after the pilot."""
        from tts.answers import answer_keys
        from tts.budgets.offline_plan import _answer_ids

        k = self.config.pilot
        keys = [answer_keys([s.answer for s in ss]) for ss in samples]
        toks = [[s.completion_tokens for s in ss] for ss in samples]
        lengths = [float(np.mean(t)) if t else length for t in toks]
        # The extra request finds in the prefix cache what the engine cached for the pilot (vLLM caches
        # whole blocks, so a problem's own tail of the prompt is usually paid again).
        prompts = [max(pt, r.usage.prompt_tokens) for pt, r in zip(prompts, pilots, strict=True)]
        feats = pilot_feature_rows(_answer_ids(keys, k), np.asarray(toks, dtype=float),
                                   prompts if cal.prompt_length else None)
        cached = [r.usage.cached_prompt_tokens for r in pilots]
        return choose([p.id for p in problems], feats, prompts, lengths, cal, pricer, budget, cached,
                      self._escalations)

    def _run_escalations(self, plan: Any, problems: Sequence[Any], pilots: list[Any]
                         ) -> tuple[dict[int, Solution], set[int]]:
        """Run each escalation search once over the problems the plan sent to it. A verifier-scored
        sampling option keeps the pilot and draws only the rest of its n (those problems are also
        returned as reusing their pilot). Returns the solutions by problem index, and that set."""
        k = self.config.pilot
        searched: dict[int, Solution] = {}
        reused: set[int] = set()
        for label, search in self._searches.items():
            which = [i for i, c in enumerate(plan.choices) if c.escalation == label]
            if not which:
                continue
            if reuses_pilot(search.config.model_dump(), k):
                searched.update(zip(which, self._complete_pilots(search, [problems[i] for i in which],
                                                                 [pilots[i] for i in which]), strict=True))
                reused.update(which)
            else:
                searched.update(zip(which, search.solve([problems[i] for i in which]), strict=True))
        return searched, reused

