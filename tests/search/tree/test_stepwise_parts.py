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


def test_a_generator_returning_too_few_results_is_refused_with_both_counts():
    class Short(Recording):
        def generate(self, requests):
            return super().generate(requests)[:-1]

    gen = Short([["a"], ["b"]])
    space = StepwiseSpace(gen, lambda p: [{"role": "user", "content": p.question}], [PROBLEM, PROBLEM],
                          SamplingConfig(max_tokens=64))
    with pytest.raises(RuntimeError) as info:
        space.expand(space.initial_states(), [1, 1])
    assert str(info.value) == "the generator returned 1 results for 2 requests"


def test_a_step_request_asks_for_the_tokens_left_and_at_least_one():
    space, gen = _space([["x"], ["y"], ["z"], ["1}"], ["2}"]], step_tokens=100)  # two forced at the cap
    root = space.initial_states()[0]
    near = root._replace(steps=("s",), step="s", depth=1, path="0", tokens=255)  # one token of 256 left
    spent = root._replace(steps=("s",), step="s", depth=1, path="1", tokens=256)  # none left
    space.expand([root, near, spent], [1, 1, 1])
    assert [r.max_tokens for r in gen.calls[0]] == [100, 1, 1]


@pytest.mark.parametrize(("step", "finished", "answer"), [
    ("So x = \\boxed{5}.", True, "5"),  # a boxed answer without the word "answer"
    ("\\fbox{7}", True, "7"),
    ("Let y = \\frac{1}{2}, so 2y = 1.", False, None),  # a backslash and no marker: not an answer
    ("The answer is 3.", True, "3"),
    ("We need the answer to part one, 3.", False, None),  # "answer" and no marker
])
def test_a_step_finishes_only_when_it_states_an_answer(step, finished, answer):
    space, _ = _space([[step]])
    [[kid]] = space.expand(space.initial_states(), [1])
    assert (kid.finished, kid.answer, kid.forced) == (finished, answer, None)


def test_children_past_the_first_4096_of_one_request_are_named_by_their_index_too():
    space, _ = _space([["a"] * 4100])
    [kids] = space.expand(space.initial_states(), [4100])
    assert [k.path for k in kids[4094:]] == ["4094", "4095", "4096", "4097", "4098", "4099"]
    assert len({k.path for k in kids}) == 4100


class _Usages:
    """A verifier whose scores carry the given usages (``"none"``: VerifierScore's default;
    ``"absent"``: a score object without a usage field)."""

    def __init__(self, usages) -> None:
        self.usages = usages

    def score(self, items):
        out = []
        for u in self.usages:
            if u == "absent":
                out.append(type("Bare", (), {"score": 0.5})())
            elif u == "none":
                out.append(VerifierScore((), 0.5))
            else:
                out.append(VerifierScore((), 0.5, usage=u))
        return out


def test_the_scorer_keeps_every_usage_that_spent_anything_and_skips_the_rest():
    # Each usage below spent something in one field only; tool scores (no usage) and scores
    # without a usage field sit between them and are skipped, not the end of the list.
    spent = [Usage(calls=1), Usage(prompt_tokens=3), Usage(completion_tokens=4), Usage(wall_seconds=0.5)]
    usages = ["none", spent[0], spent[2], "absent", Usage(), spent[1], spent[3], "none"]
    a, b = (StepState(r, PROBLEM, ("s",), "s", 1) for r in (0, 1))
    scorer = StepScorer(_Usages(usages), problems=2)
    scores = scorer.score([a, b, a, b, a, b, a, b])
    assert [getattr(s, "score") for s in scores] == [0.5] * 8
    assert scorer.usage[0] == Usage.total([spent[2], spent[3]]) == Usage(completion_tokens=4, wall_seconds=0.5)
    assert scorer.usage[1] == Usage.total([spent[0], spent[1]]) == Usage(calls=1, prompt_tokens=3)


def test_a_verifier_without_a_name_is_called_unnamed_in_the_error():
    class Anonymous:
        def score(self, items):
            return []

    state = StepState(0, PROBLEM, ("a",), "a", 1)
    with pytest.raises(ValueError) as info:
        StepScorer(Anonymous(), problems=1).score([state])
    assert str(info.value) == "verifier ? returned 0 scores for 1 items"


def test_a_path_stopped_with_no_step_at_all_has_no_answer_whatever_the_extractor_reads():
    # force_answer=False: a first step that came back empty and ended the message is finished as it is.
    # With no steps there is no text to read, so no answer, even for an extractor that reads one anywhere.
    space, _ = _space([[""]], gen={"ended": True}, force_answer=False, extract=lambda text: "7")
    [[kid]] = space.expand(space.initial_states(), [1])
    assert (kid.finished, kid.answer, kid.steps) == (True, None, ())
    assert space.events[0]["stopped_ended"] == 1
