"""The step-wise space's parts on a recording generator: the forced-answer request as sent, the
greedy rollout step and its events, and the braces a forced answer closes."""

from __future__ import annotations

import pytest

from tts.backends.base import Completion, GenerationResult, derive_seed
from tts.config import SamplingConfig
from tts.search.tree.stepwise import ANSWER_NUDGE, StepScorer, StepState, StepwiseSpace, _close_braces
from tts.types import Problem, Usage
from tts.verifiers.base import VerifierScore


class Recording:
    """A generator that answers each request with the next of ``replies`` (a list of texts per
    request; an empty list: no completion) and records every call's requests."""

    model_name = "recording"

    def __init__(self, replies: list[list[str]], ended: bool = False) -> None:
        self.replies, self.ended, self.calls = list(replies), ended, []

    def generate(self, requests):
        self.calls.append(list(requests))
        out = []
        for _ in requests:
            texts = self.replies.pop(0)
            out.append(GenerationResult(tuple(Completion(t, 5, -0.5, ended_by_eos=self.ended) for t in texts),
                                        Usage(calls=1, completion_tokens=5 * len(texts))))
        return out


PROBLEM = Problem("p1", "What is 1 + 1?", "2")


def _space(replies, **kwargs) -> tuple[StepwiseSpace, Recording]:
    gen = Recording(replies, **kwargs.pop("gen", {}))
    space = StepwiseSpace(gen, lambda p: [{"role": "user", "content": p.question}], [PROBLEM],
                          SamplingConfig(max_tokens=256, temperature=0.8, top_p=0.9), seed=3, seed_key="beam@4",
                          **kwargs)
    return space, gen


def test_the_forced_answer_request_is_greedy_short_seeded_and_continues_the_whole_solution():
    # max_depth 1: the first step "1 + 1 = 2" states no answer, so an answer is forced in a second call.
    space, gen = _space([["1 + 1 = 2"], ["2}"]], max_depth=1, answer_tokens=16)
    [[kid]] = space.expand(space.initial_states(), [1])
    [step_request], [answer] = gen.calls
    assert space.generate_calls == 2
    assert step_request.temperature == 0.8 and step_request.n == 1
    assert answer.n == 1 and answer.temperature == 0.0 and answer.max_tokens == 16
    assert answer.stop == ("\n\n",) and answer.logprobs is True
    # The child's path is "0" at depth 1: its answer seed is the run seed's, for "p1|beam@4|0|answer".
    assert answer.seed == derive_seed(3, "p1|beam@4|0|answer", 1) != step_request.seed
    assert answer.continuation == "1 + 1 = 2\n\n" + ANSWER_NUDGE and answer.key == "p1"
    assert kid.finished and kid.forced == "depth" and kid.answer == "2"
    assert kid.step == "1 + 1 = 2\n\n" + ANSWER_NUDGE + "2}" and kid.tokens == 10


def test_a_rollout_step_is_greedy_and_its_events_are_counted_apart():
    # A search step first: one empty child (an event of the search itself).
    space, gen = _space([["", "1 + 1 = 2"], [""], []])
    root = space.initial_states()[0]
    empty, step = space.expand([root], [2])[0]
    assert space.events[0] == {"empty_steps": 1}
    # The rollouts of two states: the first writes an empty step, the second gets nothing back.
    rolled = space.rollout_step([step, empty])
    assert [q.temperature for q in gen.calls[1]] == [0.0, 0.0] and [q.n for q in gen.calls[1]] == [1, 1]
    assert rolled[0] is not None and rolled[0].step == "" and rolled[1] is None
    assert space.events[0] == {"empty_steps": 1, "lookahead_empty_steps": 1}


def test_a_rollout_that_changes_no_event_leaves_the_counts_alone():
    space, gen = _space([["1 + 1 = 2"], ["So 2."]])
    [[step]] = space.expand(space.initial_states(), [1])
    [rolled] = space.rollout_step([step])
    assert rolled.steps == ("1 + 1 = 2", "So 2.") and space.events[0] == {}


def test_a_forced_rollout_is_counted_as_the_lookaheads():
    # The model ends its message without an answer: the rollout's answer is forced ("ended").
    space, gen = _space([["1 + 1 = 2"], ["2}"]], gen={"ended": True})
    root = space.initial_states()[0]
    [rolled] = space.rollout_step([root])
    assert rolled.forced == "ended" and rolled.answer == "2"
    assert space.events[0] == {"lookahead_forced_ended": 1}


def test_a_forced_answer_closes_only_the_braces_left_open():
    assert _close_braces("\\boxed{\\frac{1}{2") == "\\boxed{\\frac{1}{2}}"
    assert _close_braces("\\boxed{7}") == "\\boxed{7}"
    assert _close_braces("7}") == "7}"  # more closing than opening: nothing added
    assert _close_braces("") == ""


def test_an_empty_step_forced_with_no_completion_back_says_only_the_nudge():
    # The model ends its message with an empty step; the forcing call returns nothing at all. The
    # child's one step is the nudge with its brace closed; it adds no tokens and no logprob.
    space, gen = _space([[""], []], gen={"ended": True})
    [[kid]] = space.expand(space.initial_states(), [1])
    said = ANSWER_NUDGE + "}"
    assert kid.steps == (said,) and kid.step == said
    assert kid.tokens == 5 and kid.logprobs == (None,) and kid.finished and kid.forced == "ended"


def test_a_forced_answer_after_a_step_keeps_the_steps_logprob_then_the_answers():
    space, gen = _space([["1 + 1 = 2"], ["2}"]], max_depth=1)
    [[kid]] = space.expand(space.initial_states(), [1])
    assert kid.logprobs == (-0.5, -0.5) and kid.steps == ("1 + 1 = 2", ANSWER_NUDGE + "2}")


class _Named:
    """A verifier that scores every item 0.5, or returns ``short`` scores too few."""

    name = "halves"

    def __init__(self, short: int = 0) -> None:
        self.short = short

    def score(self, items):
        return [VerifierScore((), 0.5)] * (len(items) - self.short)


def test_the_scorer_counts_its_verifier_calls_and_sends_no_call_for_empty_steps():
    scorer = StepScorer(_Named(), problems=1)
    assert scorer.calls == 0
    full, empty = StepState(0, PROBLEM, ("a",), "a", 1), StepState(0, PROBLEM, (), "", 1)
    assert scorer.score([empty, empty]) == [None, None] and scorer.calls == 0
    assert [s.score for s in scorer.score([full])] == [0.5] and scorer.calls == 1
    assert [s and s.score for s in scorer.score([empty, full])] == [None, 0.5] and scorer.calls == 2


def test_a_verifier_returning_too_few_scores_is_named_in_the_error():
    scorer = StepScorer(_Named(short=1), problems=1)
    state = StepState(0, PROBLEM, ("a",), "a", 1)
    with pytest.raises(ValueError) as info:
        scorer.score([state, state])
    assert str(info.value) == "verifier halves returned 1 scores for 2 items"


def test_a_space_built_with_the_defaults_and_an_empty_separator_refused():
    gen = Recording([["1 + 1 = 2"]])
    space = StepwiseSpace(gen, lambda p: [{"role": "user", "content": p.question}], [PROBLEM],
                          SamplingConfig(max_tokens=1000))
    assert space.generate_calls == 0 and space.usage[0].calls == 0  # nothing generated yet
    space.expand(space.initial_states(), [1])
    assert space.generate_calls == 1 and space.usage[0].calls == 1
    [[request]] = gen.calls
    # Steps of at most 128 tokens; the seed of run seed 0, no seed key, the root's path "" at depth 0.
    assert request.max_tokens == 128 and request.seed == derive_seed(0, "p1||", 0)
    assert (space.max_depth, space.answer_tokens, space.force_answer) == (8, 32, True)
    with pytest.raises(ValueError) as info:
        StepwiseSpace(gen, lambda p: [], [PROBLEM], SamplingConfig(), separator="")
    assert str(info.value) == "the step separator must be a non-empty string"
