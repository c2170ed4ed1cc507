"""strategy="auto" in detail: the requests it sends (sizes, seeds, logprobs), the minimum budget it
refuses below, what each trace says it expected to spend, and which escalation runs it reads."""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from tests.budgets.test_auto_strategy import _auto, _problems
from tests.budgets.test_cross_strategy import _write_pool
from tests.budgets.test_escalation import _write_search_run
from tts.backends.base import derive_seed
from tts.backends.scripted import ScriptedGenerator
from tts.benchmarks.pool import load_pool
from tts.budgets.allocator import BudgetTooSmallError, CalibrationError
from tts.budgets.auto_strategy import AutoConfig, AutoStrategy
from tts.config import SamplingConfig
from tts.prompts import MATH_PROMPT
from tts.search.base import StrategyInputError
from tts.types import Problem


def _recording(auto: AutoStrategy) -> list:
    calls: list = []
    real = auto.generator.generate
    auto.generator.generate = lambda requests: calls.append(list(requests)) or real(requests)
    return calls


def _buying(tmp_path: Path) -> AutoStrategy:
    """Odd problems contested (70% on the right answer, about 400 tokens a sample), even ones sure:
    with 6000 tokens a problem, auto buys more samples for some of them."""
    cal = _write_pool(tmp_path / "cal.jsonl", n_samples=16)
    dists = {f"q{i}": {"1": 0.7, "2": 0.1, "3": 0.1, "4": 0.1} if i % 2 else {"1": 1.0} for i in range(6)}
    cfg = AutoConfig(calibration=str(cal), budget=6000.0, strategies=("self_consistency", "best_of_n"))
    return AutoStrategy(cfg, ScriptedGenerator(dists, seed=0, mean_tokens=400), MATH_PROMPT.render,
                        SamplingConfig(max_tokens=2048))


def test_the_pilot_and_the_extra_samples_are_one_call_each_with_their_own_seeds(tmp_path: Path) -> None:
    auto = _buying(tmp_path)
    calls = _recording(auto)
    problems = _problems()
    sols = auto.solve(problems)
    pilot, extra = calls
    # The pilot: 4 samples each, seeded as nothing drawn yet, with logprobs (best_of_n and
    # weighted_vote rank by them) and no top logprobs (no verifier).
    assert [(r.key, r.n, r.seed, r.logprobs, r.top_logprobs) for r in pilot] == [
        (p.id, 4, derive_seed(0, p.id, 0), True, 0) for p in problems]
    # The rest of each planned n, seeded past the pilot's 4 so that no sample repeats.
    more = [(p.id, s.trace.notes["n"] - 4) for p, s in zip(problems, sols) if s.trace.notes["n"] > 4]
    assert more, [s.trace.notes for s in sols]
    assert [(r.key, r.n, r.seed, r.logprobs, r.top_logprobs) for r in extra] == [
        (pid, m, derive_seed(0, pid, 4), True, 0) for pid, m in more]


def test_each_trace_says_the_length_and_cost_it_planned_with(tmp_path: Path, caplog) -> None:
    auto = _buying(tmp_path)
    problems = _problems()
    with caplog.at_level("INFO", logger="tts.budgets.auto_strategy"):
        sols = auto.solve(problems)
    spent = [s.usage.completion_tokens + s.usage.prompt_tokens - s.usage.cached_prompt_tokens for s in sols]
    for s, paid in zip(sols, spent):
        notes = s.trace.notes
        assert (notes["unit"], notes["pilot"], notes["batch_budget"], notes["batch_problems"]) == ("tokens", 4, 36000.0, 6)
        assert notes["spent"] == paid and len(s.trace.samples) == notes["n"]  # the pilot and the extra, joined
    rules = [s.trace.notes["rule"] for s in sols]
    assert (f"auto: 6 problems, spent {sum(spent):.6g} of 36000 tokens; "
            f"{ {'vote': rules.count('vote'), 'best_of_n': rules.count('best_of_n')} }") in caplog.messages
    assert max(s.trace.notes["n"] for s in sols) > 4
    for p, s in zip(problems, sols):
        notes, pilot = s.trace.notes, s.trace.samples[:4]
        # Predicted length: the mean of the problem's own pilot samples.
        assert notes["predicted_length"] == pytest.approx(np.mean([x.completion_tokens for x in pilot]))
        # The extra request pays its samples at that length and its whole prompt: the engine cached
        # nothing for the pilot (the scripted backend's first sight of each prompt).
        prompt = auto.generator.prompt_tokens(auto._request(p, 4, 0))
        want = (notes["n"] - 4) * round(notes["predicted_length"]) + prompt if notes["n"] > 4 else 0.0
        assert notes["expected_cost"] == pytest.approx(want)
        assert s.problem_id == p.id


def _min_pilot_budget(cal_path: Path, problems: int, k: int = 4) -> float:
    pool = load_pool(cal_path)["m"]
    mean = float(np.nanmean(np.where(pool.mask, pool.tokens, np.nan)))
    return problems * k * round(mean)


def test_the_least_budget_is_a_pilot_at_the_calibrations_mean_length_with_prompts_cached(tmp_path: Path) -> None:
    auto = _auto(tmp_path)
    need = _min_pilot_budget(tmp_path / "cal.jsonl", 6)
    auto.config = auto.config.model_copy(update={"budget": need / 6 - 0.01})
    with pytest.raises(BudgetTooSmallError, match="below the cheapest plan") as err:
        auto.solve(_problems())
    assert err.value.minimum == need
    length = round(need / 24)
    assert (f"{6 * (need / 6 - 0.01):.6g} tokens for 6 problems is below the cheapest plan, a 4-sample pilot each "
            f"(at least {need:.6g} tokens: 4 samples of the calibration's mean length, {length} tokens, prompts "
            f"cached); raise --budget to at least {need:.6g} or lower --pilot") in str(err.value)
    # Exactly the minimum is enough (these pilots come out shorter than the calibration's mean).
    auto.config = auto.config.model_copy(update={"budget": need / 6})
    assert [s.trace.notes["n"] for s in auto.solve(_problems())] == [4] * 6


def test_without_token_counts_in_the_calibration_the_least_budget_is_priced_at_max_tokens(tmp_path: Path) -> None:
    path = _write_pool(tmp_path / "cal.jsonl", n_samples=16)
    rows = [json.loads(x) for x in path.read_text().splitlines()]
    path.write_text("".join(json.dumps({**r, "num_tokens": None}) + "\n" for r in rows))
    dists = {f"q{i}": {"1": 0.5, "2": 0.5} for i in range(6)}
    auto = AutoStrategy(AutoConfig(calibration=str(path), budget=100.0, strategies=("self_consistency",)),
                        ScriptedGenerator(dists, seed=0, mean_tokens=100), MATH_PROMPT.render,
                        SamplingConfig(max_tokens=300))
    with pytest.raises(BudgetTooSmallError, match="mean length, 300 tokens") as err:
        auto.solve(_problems())
    assert err.value.minimum == 6 * 4 * 300


def _two_config_run(path: Path, second_kind: str = "rebase") -> Path:
    """A search run with rebase@2 and a second config, beam@4 (of kind ``second_kind``)."""
    run = _write_search_run(path, lambda p: p % 3 == 2)
    rows = [json.loads(x) for x in (run / "results.jsonl").read_text().splitlines()]
    more = [{**r, "config": "beam@4", "strategy": {"kind": second_kind, "n": 4}} for r in rows if r["config"] == "rebase@2"]
    (run / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows + more))
    return run


def _escalating(tmp_path: Path, escalate, **kw) -> AutoStrategy:
    cal = _write_pool(tmp_path / "cal.jsonl", n_samples=16)
    cfg = AutoConfig(calibration=str(cal), budget=8000.0, strategies=("self_consistency",), escalate=escalate, **kw)
    gen = ScriptedGenerator({f"q{i}": {"1": 0.3, "2": 0.7} for i in range(4)}, seed=0, mean_tokens=800)
    return AutoStrategy(cfg, gen, MATH_PROMPT.render, SamplingConfig(max_tokens=2048), seed=7)


def test_escalate_reads_every_config_of_a_run_or_the_one_its_label_names(tmp_path: Path) -> None:
    run = _two_config_run(tmp_path / "run")
    auto = _escalating(tmp_path, f"{run}::rebase@2")
    auto._setup()
    assert [e.label for e in auto._escalations] == ["rebase@2"] and list(auto._searches) == ["rebase@2"]
    # The search runs with the run's sampling settings and seed.
    search = auto._searches["rebase@2"]
    assert search.sampling == auto.sampling and search.seed == 7 and search.config.n == 2
    auto = _escalating(tmp_path, str(run))
    auto._setup()
    assert [e.label for e in auto._escalations] == ["rebase@2", "beam@4"]


def test_escalate_passes_its_accuracy_mode_on(tmp_path: Path) -> None:
    run = _write_search_run(tmp_path / "run", lambda p: p % 3 == 2)
    for mode, learned in (("bin", False), ("learned", True)):
        auto = _escalating(tmp_path, str(run), escalate_accuracy=mode)
        auto._setup()
        assert (auto._escalations[0].model is not None) is learned


def test_an_escalation_run_of_an_unknown_strategy_is_refused_by_name(tmp_path: Path) -> None:
    run = _two_config_run(tmp_path / "run", second_kind="no_such_search")
    auto = _escalating(tmp_path, f"{run}::beam@4")
    for _ in range(2):  # a retry is refused alike: the failed setup left nothing half set
        with pytest.raises(StrategyInputError, match=f"^auto: --escalate {run}::beam@4: strategy 'no_such_search' "
                                                     "is not registered$"):
            auto._setup()
    assert auto._calibration is None and auto._pricer is None and auto._escalations == []


def test_an_unchosen_escalation_does_not_stop_the_next_one_from_running(tmp_path: Path) -> None:
    # The first run solves nothing (never worth choosing), the second every problem.
    bad = _write_search_run(tmp_path / "bad", lambda p: False, label="rebase@3")
    good = _write_search_run(tmp_path / "good", lambda p: True)
    auto = _escalating(tmp_path, f"{bad};{good}")
    problems = [Problem(f"q{i}", f"What is {i} + 1?", "1") for i in range(4)]
    sols = auto.solve(problems)
    auto.close()
    assert [e.label for e in auto._escalations] == ["rebase@3", "rebase@2"]
    used = [s.trace.notes["escalation"] for s in sols]
    assert "rebase@2" in used and "rebase@3" not in used
    for p, s in zip(problems, sols):
        assert s.problem_id == p.id
        if s.trace.notes["escalation"] == "rebase@2":
            assert s.trace.strategy == "auto:rebase"
            # The pilot's four answers (every scripted sample answers "1" or "2") are kept in the notes.
            votes = s.trace.notes["pilot_votes"]
            assert set(votes) <= {"1", "2"} and sum(votes.values()) == 4


def test_a_completed_pilot_draws_the_rest_with_the_seed_past_its_pilot(tmp_path: Path) -> None:
    from tests.budgets.test_escalation import _verified_run

    run = _verified_run(tmp_path / "run")
    auto = _escalating(tmp_path, str(run), switch_z=0.0)
    calls = _recording(auto)
    problems = [Problem(f"q{i}", f"What is {i} + 1?", "1") for i in range(4)]
    sols = auto.solve(problems)
    auto.close()
    escalated = [(p, s) for p, s in zip(problems, sols) if s.trace.notes["escalation"] == "best_of_n@16,verifier=arithmetic"]
    assert escalated
    # The pilot, seeded by the run's seed (7) with nothing drawn yet.
    assert [(r.key, r.n, r.seed) for r in calls[0]] == [(p.id, 4, derive_seed(7, p.id, 0)) for p in problems]
    completing = next(c for c in calls[1:] if [r.n for r in c] == [12] * len(escalated))
    # The option's own request (best_of_n's, seed 7): 12 more samples, seeded past the pilot's 4.
    assert [(r.key, r.seed) for r in completing] == [(p.id, derive_seed(7, p.id, 4)) for p, _ in escalated]
    for p, s in escalated:
        assert s.problem_id == p.id and s.trace.strategy == "auto:best_of_n"


def test_a_verifier_scores_the_scored_rules_samples_and_its_top_logprobs_are_requested(tmp_path: Path,
                                                                                       monkeypatch) -> None:
    import tts.budgets.calibration_source as source

    pool = load_pool(_write_pool(tmp_path / "cal.jsonl", n_samples=16))["m"]
    asked = []
    monkeypatch.setattr(source, "load_calibration", lambda *args: asked.append(args) or pool)
    # Problems like the calibration's "score" ones (long, 70% on a wrong answer), where best_of_n wins.
    dists = {f"q{i}": {"1": 0.3, "2": 0.7} for i in range(6)}
    cfg = AutoConfig(calibration="cal", budget=8000.0, strategies=("self_consistency", "best_of_n"),
                     verifier={"kind": "self_certainty", "top_k": 5})
    auto = AutoStrategy(cfg, ScriptedGenerator(dists, seed=0, mean_tokens=800), MATH_PROMPT.render,
                        SamplingConfig(max_tokens=2048))
    # Only the scored rule takes the verifier, and it scores every scored sample.
    assert auto._aggregators["best_of_n"].config.verifier == cfg.verifier
    assert getattr(auto._aggregators["vote"].config, "verifier", None) is None
    assert auto._scorer is auto._aggregators["best_of_n"]
    calls = _recording(auto)
    sols = auto.solve(_problems())
    # The calibration is read for the generator's model, scored by that verifier.
    assert asked == [("cal", "scripted", cfg.verifier)]
    assert {(r.top_logprobs, r.logprobs) for c in calls for r in c} == {(5, True)}
    for s in sols:
        if s.trace.notes["rule"] == "best_of_n":
            # Self-certainty scores, not the samples' mean logprobs.
            assert len(s.trace.scores) == len(s.trace.samples)
            assert list(s.trace.scores) != [x.mean_logprob for x in s.trace.samples]
    assert {s.trace.notes["rule"] for s in sols} == {"vote", "best_of_n"}


def test_the_calibration_needs_more_samples_than_the_pilot_and_says_when_it_caps_n(tmp_path: Path, caplog) -> None:
    cal = _write_pool(tmp_path / "cal.jsonl", n_samples=16)
    dists = {f"q{i}": {"1": 0.5, "2": 0.5} for i in range(6)}

    def auto(**kw):
        cfg = AutoConfig(calibration=str(cal), budget=8000.0, strategies=("self_consistency",), **kw)
        return AutoStrategy(cfg, ScriptedGenerator(dists, seed=0, mean_tokens=50), MATH_PROMPT.render)

    with pytest.raises(CalibrationError, match=f"^--calibration {cal} has 16 samples for some problem; auto needs "
                                               r"more than the pilot's 16 \(calibrate with a larger n\)$"):
        auto(pilot=16).solve(_problems())
    with caplog.at_level("WARNING", logger="tts.budgets.auto_strategy"):
        auto(pilot=15, n_max=16).solve(_problems())
    assert "n is capped" not in caplog.text  # 16 samples, n_max 16: nothing capped
    with caplog.at_level("WARNING", logger="tts.budgets.auto_strategy"):
        auto(n_max=17).solve(_problems())
    assert (f"auto: n is capped at 16, the fewest samples of any problem in --calibration {cal} (n_max is 17); "
            "calibrate with more samples per problem to let auto spend more on a problem") in caplog.text


def test_a_calibration_without_scores_is_named_in_the_refusal(tmp_path: Path) -> None:
    bare = _write_pool(tmp_path / "bare.jsonl", scores=False)
    auto = AutoStrategy(AutoConfig(calibration=str(bare), budget=2000.0, strategies=("best_of_n",)),
                        ScriptedGenerator({"q0": {"1": 1.0}}, seed=0), MATH_PROMPT.render)
    with pytest.raises(CalibrationError, match=f"^--calibration {bare} \\(model m\\) has no score for some samples, "
                                               "which strategy 'best_of_n' needs"):
        auto.solve(_problems(1))


def test_a_custom_extract_reads_every_sample(tmp_path: Path) -> None:
    auto = _auto(tmp_path)
    auto = AutoStrategy(auto.config, auto.generator, MATH_PROMPT.render, extract=lambda text: "forty-two")
    sols = auto.solve(_problems())
    assert {s.answer for s in sols} == {"forty-two"}
    assert {x.answer for s in sols for x in s.trace.samples} == {"forty-two"}


def test_auto_takes_no_per_problem_budgets_but_a_list_of_none_is_no_budget(tmp_path: Path) -> None:
    from tts.types import Budget

    auto = _auto(tmp_path)
    with pytest.raises(StrategyInputError, match=r"^auto spends its own budget \(AutoConfig.budget\); it takes no "
                                                 "per-problem budgets$"):
        auto.solve(_problems(2), budgets=[None, Budget(samples=8)])
    assert len(auto.solve(_problems(2), budgets=[None, None])) == 2


def test_a_backend_without_logprobs_is_refused_for_the_rules_that_rank_by_them(tmp_path: Path) -> None:
    from tts.search.base import MissingLogprobsError

    gen = ScriptedGenerator({"q0": {"1": 1.0}}, seed=0)
    gen.logprobs_unavailable = "the provider returns none"
    with pytest.raises(MissingLogprobsError, match="best_of_n ranks samples by their token log-probabilities, but "
                                                   "the provider returns none"):
        AutoStrategy(AutoConfig(calibration="x", budget=100.0, strategies=("self_consistency", "best_of_n")), gen,
                     MATH_PROMPT.render)
    # Voting alone reads none: nothing to refuse.
    AutoStrategy(AutoConfig(calibration="x", budget=100.0, strategies=("self_consistency",)), gen, MATH_PROMPT.render)


def test_the_calibration_and_the_pricer_are_built_from_the_config(tmp_path: Path) -> None:
    from tts.budgets.cross_allocator import calibrate, ladder
    from tts.budgets.replay.prefix import random_orders

    cal_path = _write_pool(tmp_path / "cal.jsonl", n_samples=16)
    gen = ScriptedGenerator({"q0": {"1": 1.0}}, seed=0)
    gen.model_name = "smollm2-135m"  # a model the cost model can price
    cfg = AutoConfig(calibration=str(cal_path), budget=1.0, budget_unit="gpu_seconds", gpu="a100", efficiency=2.5,
                     strategies=("self_consistency", "best_of_n"), difficulty="pilot", n_bins=2, switch_z=0.0)
    auto = AutoStrategy(cfg, gen, MATH_PROMPT.render, seed=3)
    cal, pricer = auto._setup()
    pool = load_pool(cal_path)["m"]
    orders = random_orders(pool.mask, 8, np.random.default_rng(3))  # eight orderings from the run's seed
    want = calibrate(pool, ("vote", "best_of_n"), 4, ladder(4, 16), orders=orders, difficulty="pilot", n_bins=2,
                     switch_z=0.0)
    assert cal.to_json() == want.to_json() and cal.reference is None
    assert len(cal.edges) == 1  # two bins (this pool's pilot shares give the default's five only two edges)
    assert (pricer.unit, pricer.gpu, pricer.efficiency, pricer.model) == ("gpu_seconds", "a100", 2.5, "smollm2-135m")
    assert pricer.cost_model.tensor_parallel == 1
    # A vLLM engine split over GPUs is priced as deployed: its config's tensor_parallel_size reaches the cost model.
    gen_tp = ScriptedGenerator({"q0": {"1": 1.0}}, seed=0)
    gen_tp.model_name = "smollm2-135m"
    gen_tp.config = SimpleNamespace(tensor_parallel_size=2, quantization=None)
    _, tp_pricer = AutoStrategy(cfg, gen_tp, MATH_PROMPT.render, seed=3)._setup()
    assert tp_pricer.cost_model.tensor_parallel == 2
    assert tp_pricer.request(100, [200]) != pricer.request(100, [200])
    # A unit the generator's model cannot be priced in is refused, naming the unit.
    gen2 = ScriptedGenerator({"q0": {"1": 1.0}}, seed=0)
    auto = AutoStrategy(cfg.model_copy(update={"budget_unit": "eflops"}), gen2, MATH_PROMPT.render)
    with pytest.raises(StrategyInputError, match="^auto: budget unit eflops: "):
        auto._setup()


def test_the_plan_gets_the_batch_budget_less_what_the_pilot_cost(tmp_path: Path) -> None:
    auto = _buying(tmp_path)
    seen = {}
    real_plan = auto._plan

    def plan(*args):
        seen["budget"] = args[-1]
        return real_plan(*args)

    auto._plan = plan
    results = []
    real = auto.generator.generate
    auto.generator.generate = lambda requests: results.append(real(requests)) or results[-1]
    auto.solve(_problems())
    pilot_cost = sum(r.usage.completion_tokens + r.usage.prompt_tokens - r.usage.cached_prompt_tokens
                     for r in results[0])
    assert 0 < pilot_cost < 36000 and seen["budget"] == pytest.approx(36000 - pilot_cost)


def test_with_nothing_more_to_buy_the_pilot_is_the_only_call(tmp_path: Path) -> None:
    auto = _auto(tmp_path)
    auto.config = auto.config.model_copy(update={"budget": _min_pilot_budget(tmp_path / "cal.jsonl", 6) / 6})
    calls = _recording(auto)
    assert [s.trace.notes["n"] for s in auto.solve(_problems())] == [4] * 6
    assert len(calls) == 1


def test_a_pilot_that_came_back_empty_is_planned_at_the_calibrations_mean_length(tmp_path: Path) -> None:
    from tts.backends.base import GenerationResult

    auto = _auto(tmp_path)
    real = auto.generator.generate
    auto.generator.generate = lambda requests: [GenerationResult((), r.usage) for r in real(requests)]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no numpy "Mean of empty slice" for the empty pilots
        sols = auto.solve(_problems())
    pool = load_pool(tmp_path / "cal.jsonl")["m"]
    mean = float(np.nanmean(np.where(pool.mask, pool.tokens, np.nan)))
    assert [s.trace.notes["predicted_length"] for s in sols] == pytest.approx([mean] * 6)
    assert [s.answer for s in sols] == [None] * 6


def test_a_calibration_of_one_token_samples_needs_a_pilot_of_one_token_each(tmp_path: Path) -> None:
    path = _write_pool(tmp_path / "cal.jsonl", n_samples=16)
    rows = [json.loads(x) for x in path.read_text().splitlines()]
    path.write_text("".join(json.dumps({**r, "num_tokens": 1}) + "\n" for r in rows))
    auto = AutoStrategy(AutoConfig(calibration=str(path), budget=1.0, strategies=("self_consistency",)),
                        ScriptedGenerator({"q0": {"1": 1.0}}, seed=0), MATH_PROMPT.render)
    with pytest.raises(BudgetTooSmallError) as err:
        auto.solve(_problems())
    assert err.value.minimum == 6 * 4 * 1


def test_the_least_budget_in_gpu_seconds_counts_each_prompt_as_cached(tmp_path: Path) -> None:
    from tts.budgets.cross_allocator import make_pricer

    cal = _write_pool(tmp_path / "cal.jsonl", n_samples=16)
    pool = load_pool(cal)["m"]
    length = round(float(np.nanmean(np.where(pool.mask, pool.tokens, np.nan))))
    cfg = AutoConfig(calibration=str(cal), budget=1e-9, budget_unit="gpu_seconds", gpu="a100",
                     strategies=("self_consistency",))
    pricer = make_pricer("gpu_seconds", "smollm2-135m", "a100")

    gen = ScriptedGenerator({"q0": {"1": 1.0}}, seed=0)
    gen.model_name = "smollm2-135m"
    auto = AutoStrategy(cfg, gen, MATH_PROMPT.render)
    prompts = [gen.prompt_tokens(auto._request(p, 4, 0)) for p in _problems()]
    assert min(prompts) > 0
    with pytest.raises(BudgetTooSmallError) as err:
        auto.solve(_problems())
    want = sum(pricer.request(pt, [length] * 4, cached=pt) for pt in prompts)
    assert err.value.minimum == pytest.approx(want)
    assert want > 6 * pricer.request(0, [length] * 4)  # the prompts' cached tokens still cost time

    class Uncounted:  # a backend that cannot count prompt tokens: the prompts count as none
        model_name = "smollm2-135m"

        def generate(self, requests):
            raise AssertionError("refused before generating")

    with pytest.raises(BudgetTooSmallError) as err:
        AutoStrategy(cfg, Uncounted(), MATH_PROMPT.render).solve(_problems())
    assert err.value.minimum == pytest.approx(6 * pricer.request(0, [length] * 4, cached=0))


def test_a_generator_without_a_model_name_is_priced_in_tokens_without_one(tmp_path: Path) -> None:
    class Nameless:
        def __init__(self) -> None:
            self.inner = ScriptedGenerator({"q0": {"1": 1.0}}, seed=0)

        def generate(self, requests):
            return self.inner.generate(requests)

    cal = _write_pool(tmp_path / "cal.jsonl", n_samples=16)
    auto = AutoStrategy(AutoConfig(calibration=str(cal), budget=5000.0, strategies=("self_consistency",)),
                        Nameless(), MATH_PROMPT.render)
    _, pricer = auto._setup()
    assert (pricer.unit, pricer.model) == ("tokens", None)


def test_an_auto_strategy_closed_before_it_ran_closes_cleanly(tmp_path: Path) -> None:
    auto = _auto(tmp_path)
    auto.close()
