"""The step-wise space over a generator, and beam / DVTS end to end on a multi-step scripted model.

The test model (the ``step_model`` fixture, tests/search/conftest.py) adds a problem's numbers one
step at a time ("3 + 5 = 8"), slips on a step with a set probability, and states "The answer is
\\boxed{..}" after the last addition. The test verifier (:class:`SumCheck`) checks the additions a
solution states, as the arithmetic tool verifier does, so search with it should repair what single
samples get wrong.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from typing import ClassVar, Literal

import pytest

from tts.answers import extract_answer
from tts.backends.base import GenerationRequest
from tts.backends.scripted import ScriptedGenerator
from tts.config import EvalConfig, SamplingConfig, VerifierConfigBase
from tts.prompts import MATH_PROMPT
from tts.registry import VERIFIERS
from tts.search.tree.beam import BeamConfig, BeamSearch
from tts.search.tree.dvts import DVTS, DVTSConfig
from tts.search.tree.stepwise import ANSWER_NUDGE, StepScorer, StepState, StepwiseSpace, slots_builder
from tts.search.tree.tree_search import PENALTY
from tts.types import Budget, Problem, Usage, to_jsonable
from tts.verifiers.base import VerifierScore, VerifyItem

SEP = "\n\n"


class SumCheckConfig(VerifierConfigBase):
    kind: Literal["sum_check"] = "sum_check"
    value: float = 1.0
    """Score of a solution whose additions all hold (tests set NaN here)."""


class SumCheck:
    """Scores 1 when every "a + b = c" a solution states holds, else 0; each item costs 10 prompt tokens."""

    name = "sum_check"
    config_class = SumCheckConfig
    calls: ClassVar[list[int]] = []

    def __init__(self, value: float = 1.0, fail: bool = False) -> None:
        self.value, self.fail = value, fail

    @classmethod
    def from_config(cls, config, generator):
        return cls(config.value)

    def score(self, items):
        SumCheck.calls.append(len(items))
        if self.fail:
            raise ConnectionError("verifier unreachable")
        out = []
        for item in items:
            steps = [all(int(a) + int(b) == int(c) for a, b, c in re.findall(r"(\d+) \+ (\d+) = (-?\d+)", s))
                     for s in item.steps]
            out.append(VerifierScore(tuple(float(s) for s in steps), self.value if all(steps) else 0.0,
                                     Usage(prompt_tokens=10, calls=1)))
        return out

    def close(self):
        pass


@pytest.fixture(autouse=True)
def _sum_check():
    VERIFIERS.register("sum_check", SumCheck)
    SumCheck.calls = []
    yield
    VERIFIERS.unregister("sum_check")


def _space(model, problems, **kw) -> StepwiseSpace:
    sampling = kw.pop("sampling", SamplingConfig(max_tokens=256))
    return StepwiseSpace(model, MATH_PROMPT.render, problems, sampling, **kw)


# --- the space ----------------------------------------------------------------------------------


def test_expand_continues_every_state_in_one_call_to_the_next_step_boundary(step_model, addition_problems):
    model = step_model(slip=0.0)
    space = _space(model, addition_problems(3), step_tokens=50, seed=7)
    roots = space.initial_states()
    first = space.expand(roots, [4, 4, 4])
    second = space.expand([kids[0] for kids in first], [2, 2, 2])
    assert len(model.calls) == 2 and [r.n for r in model.calls[1]] == [2, 2, 2]
    req = model.calls[1][0]
    # The partial solution is continued from all but the separator's last character (the model writes it).
    assert req.stop == (SEP,) and req.max_tokens == 50 and req.continuation == first[0][0].steps[0] + SEP[:-1]
    assert second[0][0].steps == (first[0][0].steps[0], second[0][0].step) and second[0][0].depth == 2
    assert second[0][1].path == "0.1" and not second[0][0].finished
    # children are built as plain tuples: every field of StepState must be there
    assert all(len(kid) == len(StepState._fields) for kids in first + second for kid in kids)
    seeds = [r.seed for call in model.calls for r in call]
    assert len(set(seeds)) == len(seeds)  # no two expansions resend a seed


def test_step_requests_and_verifier_items_carry_what_their_constructors_build(step_model, addition_problems):
    # The space builds requests and verifier items without their frozen constructors (a search
    # makes thousands per step); a backend and a verifier must see the same values all the same.
    model = step_model(slip=0.0)
    sampling = SamplingConfig(max_tokens=256, temperature=0.6, top_p=0.9)
    space = _space(model, addition_problems(2), sampling=sampling, step_tokens=50, seed=7)
    kids = space.expand(space.initial_states(), [2, 3])
    space.expand([kids[0][1], kids[1][0]], [1, 2])
    for call, parents in zip(model.calls, [space.initial_states(), [kids[0][1], kids[1][0]]], strict=True):
        for req, state in zip(call, parents, strict=True):
            expected = GenerationRequest(messages=space.messages[state.root], n=req.n, temperature=0.6, top_p=0.9,
                                         max_tokens=50, stop=(SEP,), seed=req.seed, logprobs=True,
                                         continuation=space.continuation(state), key=state.problem.id)
            assert req == expected and hash(req) == hash(expected)
            assert req.seed == space._seed(state)  # the seed derivation the batch loop inlines
            assert all(getattr(req, f.name) == getattr(expected, f.name) for f in dataclasses.fields(req))
    with pytest.raises(ValueError, match="n must be >= 1"):
        space.expand(space.initial_states(), [0, 1])
    seen = []
    scorer = StepScorer(type("V", (), {"score": lambda self, items: seen.extend(items) or
                                        [VerifierScore((), 1.0, Usage())] * len(items)})(), 2)
    scorer.score(kids[0])
    # The verifier is handed the states themselves (no VerifyItem per child); read through the
    # attributes a verifier may read (ItemView), each is the VerifyItem the constructor would build.
    assert seen == list(kids[0])
    view = ("problem", "steps", "finished", "logprobs", "token_top_logprobs")
    assert view == tuple(f.name for f in dataclasses.fields(VerifyItem))
    built = [VerifyItem(k.problem, k.steps, k.finished, k.logprobs) for k in kids[0]]
    assert [tuple(getattr(i, a) for a in view) for i in seen] == [tuple(getattr(i, a) for a in view) for i in built]
    assert all(item.token_top_logprobs is None for item in seen)


def test_an_answer_is_extracted_once_per_distinct_step_text(step_model, addition_problems):
    read = []

    def extract(text):
        read.append(text)
        return extract_answer(text)

    space = _space(step_model(slip=0.0), addition_problems(1), extract=extract)
    states = space.initial_states()
    for _ in range(4):
        states = [kid for kids in space.expand(states[:1], [4]) for kid in kids]
    assert all(s.finished and s.answer == space.problems[0].answer for s in states)
    assert len({s.step for s in states}) < len(states)  # siblings that end alike...
    assert len(read) == len(set(read)) == len({s.step for s in states})  # ...are read once


def test_a_step_that_states_an_answer_finishes_the_solution(step_model, addition_problems):
    space = _space(step_model(slip=0.0), addition_problems(1))
    state = space.initial_states()[0]
    for _ in range(3):
        [[state, *_]] = space.expand([state], [1])
        assert not state.finished
    [[done]] = space.expand([state], [1])
    assert done.finished and done.answer == space.problems[0].answer and done.forced is None


def test_the_depth_cap_forces_an_answer_in_one_extra_call(step_model, addition_problems):
    model = step_model(slip=0.0, never_answers=True)
    space = _space(model, addition_problems(2), max_depth=2)
    kids = space.expand(space.initial_states(), [2, 2])
    assert len(model.calls) == 1 and not any(k.finished for ks in kids for k in ks)
    kids = space.expand([ks[0] for ks in kids], [3, 3])
    assert len(model.calls) == 2 + 1  # the step, then one call forcing all six answers
    forced_requests = model.calls[-1]
    assert len(forced_requests) == 6 and all(r.continuation.endswith(ANSWER_NUDGE) for r in forced_requests)
    state = kids[0][0]
    assert state.finished and state.forced == "depth" and state.steps[-1].startswith("Therefore, the final answer")
    numbers = [int(x) for x in re.findall(r"\d+", space.problems[0].question)]
    assert state.answer == str(sum(numbers[:3]))  # the running total after two additions
    assert space.events[0]["forced_depth"] == 3


def test_the_token_cap_forces_an_answer(step_model, addition_problems):
    space = _space(step_model(slip=0.0, never_answers=True), addition_problems(1),
                   sampling=SamplingConfig(max_tokens=25), step_tokens=10)
    state = space.initial_states()[0]
    depth = 0
    while not state.finished:
        [[state]] = space.expand([state], [1])
        depth += 1
    assert state.forced == "tokens" and depth == 3 and state.tokens == 25 + 4


def test_a_model_that_ends_its_message_gets_its_answer_forced(step_model, addition_problems):
    space = _space(step_model(ends=1.0), addition_problems(1))
    [[state]] = space.expand(space.initial_states(), [1])
    assert state.finished and state.forced == "ended" and state.answer is not None and state.steps == (state.step,)


def test_without_forcing_the_depth_cap_stops_a_path_as_it_is_with_no_extra_call(step_model, addition_problems):
    # force_answer=False: its_hub stops a particle at its step cap, and search-and-learn a beam, with
    # no further request; the answer is whatever the text says (here the last number, the running total).
    model = step_model(slip=0.0, never_answers=True)
    space = _space(model, addition_problems(2), max_depth=2, force_answer=False)
    kids = space.expand(space.initial_states(), [2, 2])
    assert not any(k.finished for ks in kids for k in ks)
    kids = space.expand([ks[0] for ks in kids], [3, 3])
    assert len(model.calls) == 2  # no call forcing answers
    assert not any(r.continuation.endswith(ANSWER_NUDGE) for call in model.calls for r in call)
    for problem, ks in zip(space.problems, kids, strict=True):
        numbers = [int(x) for x in re.findall(r"\d+", problem.question)]
        for state in ks:
            assert state.finished and state.forced is None and len(state.steps) == 2
            assert not any("Therefore" in step for step in state.steps) and state.tokens == 20
            assert state.answer == extract_answer(state.text(SEP)) == str(sum(numbers[:3]))
    assert space.events[0]["stopped_depth"] == 3 and "forced_depth" not in space.events[0]


def test_without_forcing_the_token_cap_and_an_ended_message_stop_as_they_are(step_model, addition_problems):
    space = _space(step_model(slip=0.0, never_answers=True), addition_problems(1),
                   sampling=SamplingConfig(max_tokens=25), step_tokens=10, force_answer=False)
    state = space.initial_states()[0]
    depth = 0
    while not state.finished:
        [[state]] = space.expand([state], [1])
        depth += 1
    assert depth == 3 and state.tokens == 25 and state.forced is None and len(state.steps) == 3
    assert state.answer == extract_answer(state.text(SEP)) and space.events[0]["stopped_tokens"] == 1
    # A model that ends its message at once has said nothing: finished, without an answer.
    model = step_model(ends=1.0)
    space = _space(model, addition_problems(1), force_answer=False)
    [[state]] = space.expand(space.initial_states(), [1])
    assert state.finished and state.answer is None and state.steps == () and len(model.calls) == 1
    assert space.events[0]["stopped_ended"] == 1 and space.events[0]["empty_steps"] == 1


def test_empty_steps_are_kept_unscored_and_rank_last(step_model, addition_problems):
    problems = addition_problems(1)
    space = _space(step_model(empty=0.5, seed=3), problems)
    kids = space.expand(space.initial_states(), [8])[0]
    empty = [k for k in kids if k.empty]
    assert 0 < len(empty) < 8 and space.events[0]["empty_steps"] == len(empty)
    scorer = StepScorer(SumCheck(), 1)
    scores = scorer.score(kids)
    assert [s is None for s in scores] == [k.empty for k in kids]
    assert SumCheck.calls == [8 - len(empty)]  # the verifier never sees an empty step


# --- strategies ---------------------------------------------------------------------------------


def _strategy(kind, n=8, *, model, verifier=None, sampling=None, **cfg):
    cls, config = {"beam": (BeamSearch, BeamConfig), "dvts": (DVTS, DVTSConfig)}[kind]
    config = config(n=n, verifier="sum_check", **cfg)
    return cls(config, model, MATH_PROMPT.render, sampling or SamplingConfig(max_tokens=256),
               seed=1, verifier=verifier)


@pytest.mark.parametrize("kind", ["beam", "dvts"])
def test_one_generate_and_one_score_call_per_step_for_all_problems(kind, step_model, addition_problems):
    model = step_model(slip=0.2)
    sols = _strategy(kind, n=8, model=model, verifier=SumCheck()).solve(addition_problems(40))
    # Four steps (three additions, then the answer) for every problem: 4 calls, not 4 x 40.
    assert len(model.calls) == 4 and len(SumCheck.calls) == 4
    assert sum(r.n for r in model.calls[0]) == 40 * 8  # the first step samples n per problem
    assert all(sum(r.n for r in call) <= 40 * 8 for call in model.calls)
    assert len(sols) == 40 and [s.problem_id for s in sols] == [f"q{i}" for i in range(40)]


@pytest.mark.parametrize("kind", ["beam", "dvts"])
def test_search_with_a_step_checking_verifier_repairs_slips_that_single_samples_keep(
        kind, step_model, addition_problems):
    problems = addition_problems(60, seed=4)
    searched = _strategy(kind, n=8, model=step_model(slip=0.4, seed=5), verifier=SumCheck()).solve(problems)

    def accuracy(sols):
        return sum(s.answer == p.answer for s, p in zip(sols, problems, strict=True)) / len(problems)

    # A single path is right about 30% of the time (no slip in three steps at 40%, or slips that
    # cancel; averaged over three model seeds, 180 paths); the search checks every step.
    single = [accuracy(_strategy(kind, n=1, model=step_model(slip=0.4, seed=seed), verifier=SumCheck()).solve(problems))
              for seed in (5, 6, 7)]
    assert sum(single) / 3 < 0.45 and accuracy(searched) > 0.9


@pytest.mark.parametrize("kind", ["beam", "dvts"])
def test_solution_trace_holds_candidates_scores_tree_events_and_all_usage(kind, step_model, addition_problems):
    model = step_model(slip=0.3, seed=2)
    sol = _strategy(kind, n=4, model=model, verifier=SumCheck()).solve(addition_problems(1))[0]
    t = sol.trace
    assert 1 <= len(t.samples) <= 4 and len(t.scores) == len(t.samples)
    assert all(s.answer is not None and s.text.endswith(f"\\boxed{{{s.answer}}}.") for s in t.samples)
    assert {n["id"] for n in t.tree} == set(range(len(t.tree))) and all(set(n) >= {"parent", "depth", "text", "score",
                                                                                   "kept"} for n in t.tree)
    assert sum(n["kept"] and n["finished"] for n in t.tree) == len(t.samples)
    # usage = every generator request (discarded children included) + every verifier item
    assert sol.usage.completion_tokens == model.usage.completion_tokens
    assert sol.usage.prompt_tokens == model.usage.prompt_tokens + 10 * sum(SumCheck.calls)
    assert sol.usage.calls == model.usage.calls + sum(SumCheck.calls)
    json.dumps(to_jsonable(t))


def test_select_verifier_takes_the_best_scored_candidate_and_weighted_vote_weighs_by_score(
        step_model, addition_problems):
    problems = addition_problems(20, seed=6)
    for select in ("verifier", "weighted_vote"):
        sols = _strategy("beam", n=8, model=step_model(slip=0.4, seed=1), verifier=SumCheck(),
                         select=select).solve(problems)
        for s in sols:
            best = max(s.trace.scores)
            if select == "verifier":
                assert s.trace.scores[s.trace.selected] == best and s.confidence == best and not s.trace.votes
            else:
                assert s.trace.votes and math.isclose(sum(s.trace.votes.values()), sum(s.trace.scores))


@pytest.mark.parametrize("kind", ["beam", "dvts"])
def test_a_verifier_that_raises_or_returns_nan_does_not_end_the_run(kind, step_model, addition_problems):
    problems = addition_problems(3)
    raising = _strategy(kind, n=4, model=step_model(), verifier=SumCheck(fail=True)).solve(problems)
    nan = _strategy(kind, n=4, model=step_model(), verifier=SumCheck(value=math.nan)).solve(problems)
    for sols, event in ((raising, "verifier_error"), (nan, "invalid_score")):
        for s in sols:
            assert s.answer is not None and s.trace.samples
            assert s.trace.events[event] > 0 and all(x == PENALTY or x == 0.0 for x in s.trace.scores)
    assert all(s.trace.events.get("unweighted_vote") == 1 for s in raising)  # no valid weight: a plain vote


@pytest.mark.parametrize("kind", ["beam", "dvts"])
def test_never_finishing_and_empty_steps_are_forced_at_max_depth(kind, step_model, addition_problems):
    sols = _strategy(kind, n=4, model=step_model(never_answers=True, empty=0.3), verifier=SumCheck(),
                     max_depth=5).solve(addition_problems(4))
    for s in sols:
        assert s.trace.samples and all(x.finish_reason == "forced" for x in s.trace.samples)
        assert s.trace.events["forced_depth"] >= len(s.trace.samples)
        assert max(n["depth"] for n in s.trace.tree) == 5


def test_a_budget_below_the_search_is_refused_and_a_ladder_searches_independently(step_model, addition_problems):
    from tts.search.base import StrategyInputError

    strategy = _strategy("beam", n=8, model=step_model(), verifier=SumCheck())
    with pytest.raises(StrategyInputError, match="lower n to 4"):
        strategy.solve(addition_problems(1), [Budget(samples=4)])
    model = step_model()
    _strategy("beam", n=4, model=model, verifier=SumCheck()).solve(addition_problems(1))
    _strategy("beam", n=8, model=model, verifier=SumCheck()).solve(addition_problems(1))
    first_calls = [c for c in model.calls if c[0].continuation == ""]
    assert len(first_calls) == 2 and first_calls[0][0].seed != first_calls[1][0].seed
    # The worst case counts a forced answer per candidate only where answers are forced.
    steps_only = Budget(tokens=4 * 8 * 128)  # n x max_depth x step_tokens
    with pytest.raises(StrategyInputError, match="plus forced answers"):
        _strategy("beam", n=4, model=step_model(), verifier=SumCheck()).solve(addition_problems(1), [steps_only])
    sols = _strategy("beam", n=4, model=step_model(), verifier=SumCheck(), force_answer=False).solve(
        addition_problems(1), [steps_only])
    assert sols[0].answer is not None


@pytest.mark.parametrize("kind", ["beam", "dvts"])
def test_search_on_the_scripted_backend_grows_solutions_step_by_step_as_on_vllm(kind):
    # The scripted backend honours stop strings and continuation, so each step is one step of a
    # longer solution (as on vLLM), not a whole solution that ends the path at once.
    problems = [Problem(f"p{i}", f"What is {i} + {i}?", str(2 * i)) for i in range(8)]
    gen = ScriptedGenerator.for_problems(problems, accuracy=0.8, seed=0, mean_tokens=100, step_tokens=30)
    sols = _strategy(kind, n=4, model=gen, verifier=SumCheck()).solve(problems)
    finished = []
    for sol in sols:
        tree = sol.trace.tree
        assert max(node["depth"] for node in tree) >= 2
        assert all(SEP not in node["text"] for node in tree if not node["forced"])  # cut at the stop string
        assert sol.trace.samples and all(s.text.count(SEP) >= 1 for s in sol.trace.samples)
        finished += [node for node in tree if node["finished"]]
    # Most candidates end by stating their answer, not by having it forced.
    assert finished and sum(node["forced"] is None for node in finished) > 0.75 * len(finished)
    assert sum(s.answer == p.answer for s, p in zip(sols, problems, strict=True)) >= 6


# --- end to end through the runner ----------------------------------------------------------------


def test_beam_and_dvts_run_through_eval_write_graded_rows_and_resume(tmp_path, step_model, addition_problems):
    from tts.eval.runner import run_eval

    problems = addition_problems(6, seed=9)
    cfg = EvalConfig.model_validate({
        "data": {"benchmark": "demo"},
        "strategies": [{"kind": "beam", "n": 4, "verifier": "sum_check"},
                       {"kind": "dvts", "n": 8, "verifier": "sum_check", "select": "verifier"}],
        "backend": {"kind": "scripted"}, "batch_size": 4, "sampling": {"max_tokens": 200},
    })
    model = step_model(slip=0.3)
    result = run_eval(cfg, tmp_path, generator=model, problems=problems)
    labels = {"beam@4,verifier=sum_check", "dvts@8,select=verifier,verifier=sum_check"}
    assert {s.config for s in result.summaries} == labels and len(result.rows) == 12
    # Two batches (4 + 2 problems), two searches each, four steps per search.
    assert len(model.calls) == 2 * 2 * 4
    rows = [json.loads(x) for x in (tmp_path / "results.jsonl").read_text().splitlines()]
    for row in rows:
        assert row["trace"]["tree"] and all("outcome" in s for s in row["trace"]["samples"])
        assert row["coverage"] == any(s["outcome"] == "correct" for s in row["trace"]["samples"])
    assert sum(r["correct"] for r in rows) >= 10
    again = run_eval(cfg, tmp_path, generator=(model2 := step_model(slip=0.3)), problems=problems)
    assert again.skipped == 6 and model2.calls == [] and len(again.rows) == 12
    # `tts show` prints the search tree of a problem
    from typer.testing import CliRunner

    from tts.cli.app import app

    shown = CliRunner(env={"COLUMNS": "200"}).invoke(app, ["show", str(tmp_path), "q0", "-c",
                                                           "beam@4,verifier=sum_check"])
    assert shown.exit_code == 0, shown.output
    assert "search tree" in shown.output and f"{problems[0].question.split()[2]} + " in shown.output


def test_healing_holds_back_the_separators_last_character_and_can_be_turned_off(step_model, addition_problems):
    model = step_model(slip=0.0)
    healed = _space(model, addition_problems(1), step_tokens=50, seed=7)
    state = healed.expand(healed.initial_states(), [1])[0][0]
    assert healed.continuation(state) == state.steps[0] + "\n"
    assert healed.continuation(state, whole=True) == state.steps[0] + "\n\n"  # the forced answer's prefix
    whole = _space(model, addition_problems(1), step_tokens=50, seed=7, heal_separator=False)
    assert whole.continuation(state) == state.steps[0] + "\n\n"
    one_char = _space(model, addition_problems(1), step_tokens=50, seed=7, separator="\n")
    assert one_char.continuation(state) == state.steps[0] + "\n"  # nothing to hold back
    # The next step is read the same either way: the held-back newline is edge whitespace.
    kids = healed.expand([state], [2])[0]
    assert all(k.step == k.step.strip() and k.step for k in kids)


def test_a_slots_builder_makes_what_the_constructor_makes_and_refuses_wrong_input():
    template = GenerationRequest(messages=(), temperature=0.7, top_p=0.9, stop=("\n\n",), logprobs=True)
    build = slots_builder(GenerationRequest, template, ("n", "max_tokens", "key"))
    assert build(4, 128, "p1") == dataclasses.replace(template, n=4, max_tokens=128, key="p1")
    with pytest.raises(TypeError, match="takes 3 values \\(n, max_tokens, key\\), got 2"):
        build(4, 128)
    with pytest.raises(ValueError, match="no fields \\['colour'\\]"):
        slots_builder(GenerationRequest, template, ("n", "colour"))
