"""Every step-wise tree search, on the adding step model (scripted, no engine):

- batching: solving problems together makes ONE engine call per search step for all of them (plus
  at most one call forcing answers), each problem's requests and solution being exactly those it
  gets when solved alone; so the engine calls of a step do not grow with the number of problems;
- outputs on fixed seeds: answers, tree sizes, candidates and usage per problem, recorded before
  the trees' bookkeeping was made cheaper (issue 37) and pinned here in readable form
  (``test_tree_storage.py`` pins a hash of everything; this says what changed when one fails).
"""

from __future__ import annotations

import pytest

from tts.answers import extract_answer
from tts.config import SamplingConfig
from tts.prompts import MATH_PROMPT
from tts.registry import STRATEGIES
from tts.search.tree.stepwise import ANSWER_NUDGE

SEARCHES = ["beam", "dvts", "ets", "lookahead", "mcts", "particle_filtering", "particle_gibbs", "rebase"]
"""Every registered search over the step-wise space (ab_mcts searches whole answers: test_ab_mcts.py)."""

def _search(kind: str, model, checker, seed: int, **extra):
    cls = STRATEGIES.load(kind)
    settings = {"n": 8, "verifier": "logprob", **extra}
    if kind in ("beam", "dvts", "mcts", "lookahead"):
        settings["beam_width"] = 2
    if kind == "lookahead":
        settings["lookahead"] = 1
    if kind == "ets":
        settings["cluster_threshold"] = 0.3
    return cls(cls.config_class(**settings), model, MATH_PROMPT.render, SamplingConfig(max_tokens=60), seed=seed,
               verifier=checker)


def _is_forcing(call) -> bool:
    return all(r.continuation.endswith(ANSWER_NUDGE) for r in call)


def _steps(calls) -> list[tuple[int, bool]]:
    """Per engine call, (the search step it belongs to, whether it forces answers); a forcing call
    belongs to the step whose children it finishes."""
    out, step = [], -1
    for call in calls:
        forcing = _is_forcing(call)
        step += not forcing
        out.append((step, forcing))
    return out


def _requests(calls, key: str | None = None) -> list[list[tuple]]:
    return [[(r.key, r.n, r.seed, r.temperature, r.max_tokens, r.continuation) for r in call if key in (None, r.key)]
            for call in calls]


@pytest.mark.parametrize("force_answer", [True, False])
@pytest.mark.parametrize("kind", SEARCHES)
def test_one_engine_call_per_step_for_all_problems_together(kind, force_answer, step_model, addition_problems,
                                                             addition_checker):
    problems = addition_problems(5, seed=2)
    together = step_model(slip=0.3, seed=7, empty=0.1, ends=0.05)
    sols = _search(kind, together, addition_checker(), seed=1, force_answer=force_answer).solve(problems)
    alone_calls, alone_sols = [], []
    for p in problems:
        model = step_model(slip=0.3, seed=7, empty=0.1, ends=0.05)
        alone_sols += _search(kind, model, addition_checker(), seed=1, force_answer=force_answer).solve([p])
        alone_calls.append(model.calls)
    # Each problem sends, step by step, exactly the requests it sends alone, and gets the same solution.
    for p, calls, sol, alone in zip(problems, alone_calls, sols, alone_sols, strict=True):
        mine = [c for c in _requests(together.calls, p.id) if c]
        assert mine == _requests(calls)
        assert (sol.answer, sol.usage, sol.trace.samples, sol.trace.scores, list(sol.trace.tree)) == (
            alone.answer, alone.usage, alone.trace.samples, alone.trace.scores, list(alone.trace.tree))
    # One call per step for all problems (the longest search sets the steps), plus one forcing call
    # at each step where any problem forced an answer; every call mixes the problems live then.
    expected = sorted({s for calls in alone_calls for s in _steps(calls)})
    assert _steps(together.calls) == expected
    assert len(together.calls) < sum(len(calls) for calls in alone_calls)
    assert len({r.key for r in together.calls[0]}) == len(problems)
    assert all(together.calls)  # no empty call
    if not force_answer:  # the paths that must stop are stopped as they are: no call forces an answer
        assert not any(forcing for _, forcing in _steps(together.calls))


@pytest.mark.parametrize("kind", SEARCHES)
def test_without_forcing_a_capped_path_ends_where_it_stopped_and_its_answer_is_what_it_says(
        kind, step_model, addition_problems, addition_checker):
    # A model that never states an answer: every path reaches the depth cap. Forced (the default),
    # each step that reaches the cap costs one more call; with force_answer=False none is made, and
    # every candidate is the text as it stopped, with the answer the extractor reads off it.
    problems = addition_problems(3, seed=1)
    runs = {}
    for force in (True, False):
        model = step_model(slip=0.3, seed=4, never_answers=True)
        sols = _search(kind, model, addition_checker(), seed=1, force_answer=force, max_depth=3).solve(problems)
        runs[force] = (model, sols)
    (forced_model, forced), (stopped_model, stopped) = runs[True], runs[False]
    forcing = [call for call in forced_model.calls if _is_forcing(call)]
    assert forcing and len(stopped_model.calls) == len(forced_model.calls) - len(forcing)
    assert not any(r.continuation.endswith(ANSWER_NUDGE) for call in stopped_model.calls for r in call)
    for sol in stopped:
        assert sol.trace.samples and not any(k.startswith("forced_") for k in sol.trace.events)
        assert sol.trace.events["stopped_depth"] >= 1
        for sample in sol.trace.samples:
            assert "Therefore" not in sample.text and sample.finish_reason == "stop"
            assert sample.answer == extract_answer(sample.text) is not None
        assert sol.answer in {s.answer for s in sol.trace.samples}
    for sol in forced:
        assert all(s.finish_reason == "forced" and "Therefore" in s.text for s in sol.trace.samples)
    # Every step costs the model 10 tokens either way; the stopped run spends none on forced answers.
    assert sum(s.usage.completion_tokens for s in stopped) < sum(s.usage.completion_tokens for s in forced)


def _summary(kind: str, seed: int, step_model, addition_problems, addition_checker) -> list[tuple]:
    """Per problem: (answer, tree nodes, candidates, kept nodes, prompt, completion tokens, calls)."""
    model = step_model(slip=0.3, seed=seed, empty=0.1, ends=0.05)
    sols = _search(kind, model, addition_checker(nan_every=7), seed=seed).solve(addition_problems(3, seed=seed))
    return [(s.answer, len(s.trace.tree), len(s.trace.samples), sum(node["kept"] for node in s.trace.tree),
             s.usage.prompt_tokens, s.usage.completion_tokens, s.usage.calls) for s in sols]


RECORDED = {
    ("beam", 0): [("20", 30, 8, 21, 454, 253, 42), ("29", 32, 8, 20, 402, 259, 40), ("27", 31, 8, 20, 440, 290, 45)],
    ("beam", 1): [("12", 32, 8, 20, 400, 304, 45), ("31", 31, 8, 21, 460, 272, 44), ("15", 33, 8, 21, 417, 260, 41)],
    ("beam", 2): [("11", 29, 8, 20, 479, 208, 39), ("17", 29, 8, 20, 415, 234, 39), ("18", 31, 8, 20, 459, 268, 44)],
    ("dvts", 0): [("20", 26, 6, 15, 336, 226, 35), ("29", 32, 8, 20, 432, 280, 44), ("27", 28, 6, 16, 406, 251, 40)],
    ("dvts", 1): [("9", 32, 7, 19, 427, 257, 41), ("31", 30, 7, 18, 402, 264, 41), ("15", 34, 7, 20, 441, 248, 41)],
    ("dvts", 2): [("11", 30, 6, 17, 379, 248, 39), ("17", 26, 7, 16, 361, 218, 36), ("18", 32, 7, 19, 434, 293, 45)],
    ("ets", 0): [("20", 31, 8, 19, 421, 241, 40), ("29", 32, 8, 22, 461, 295, 46), ("27", 32, 8, 21, 465, 282, 45)],
    ("ets", 1): [("12", 31, 8, 22, 463, 263, 44), ("31", 31, 8, 20, 433, 263, 42), ("15", 35, 8, 25, 561, 276, 48)],
    ("ets", 2): [("11", 29, 8, 18, 366, 243, 38), ("17", 29, 8, 19, 423, 257, 42), ("18", 29, 8, 20, 417, 261, 42)],
    ("lookahead", 0): [("20", 31, 8, 20, 971, 424, 61), ("29", 30, 8, 20, 937, 381, 59), ("27", 33, 8, 21, 998, 456, 64)],
    ("lookahead", 1): [("12", 32, 8, 20, 967, 444, 64), ("31", 30, 8, 21, 953, 413, 61), ("15", 27, 8, 18, 769, 309, 50)],
    ("lookahead", 2): [("11", 27, 8, 19, 1017, 380, 62), ("17", 32, 8, 21, 1099, 469, 69), ("18", 28, 8, 19, 856, 389, 56)],
    ("mcts", 0): [("20", 29, 8, 20, 428, 270, 43), ("29", 31, 8, 20, 461, 268, 44), ("27", 27, 8, 18, 400, 237, 39)],
    ("mcts", 1): [("12", 29, 8, 20, 472, 244, 43), ("31", 33, 8, 22, 550, 293, 50), ("15", 32, 8, 21, 470, 251, 43)],
    ("mcts", 2): [("11", 34, 8, 21, 490, 262, 44), ("17", 32, 8, 20, 397, 286, 43), ("18", 35, 8, 22, 481, 303, 48)],
    ("particle_filtering", 0): [("20", 32, 8, 12, 339, 254, 37), ("29", 30, 8, 14, 412, 263, 41), ("8", 14, 8, 8, 243, 128, 23)],
    ("particle_filtering", 1): [("12", 28, 8, 15, 336, 233, 36), ("31", 32, 8, 17, 430, 279, 43), ("6", 28, 8, 15, 429, 243, 41)],
    ("particle_filtering", 2): [("11", 32, 8, 15, 430, 268, 42), ("17", 32, 8, 16, 337, 270, 39), ("1", 20, 8, 9, 256, 181, 28)],
    ("particle_gibbs", 0): [("20", 28, 8, 13, 358, 239, 37), ("17", 19, 8, 8, 336, 176, 31), ("27", 28, 8, 13, 489, 231, 41)],
    ("particle_gibbs", 1): [("12", 24, 8, 11, 396, 161, 31), ("31", 26, 8, 13, 438, 214, 38), ("4", 10, 8, 3, 124, 85, 14)],
    ("particle_gibbs", 2): [("5", 24, 8, 10, 369, 195, 34), ("17", 27, 8, 16, 461, 232, 41), ("8", 21, 8, 12, 346, 176, 31)],
    ("rebase", 0): [("20", 30, 8, 19, 431, 231, 39), ("29", 29, 8, 16, 403, 244, 39), ("27", 30, 8, 23, 500, 253, 44)],
    ("rebase", 1): [("12", 26, 8, 17, 359, 209, 35), ("31", 30, 8, 18, 411, 249, 40), ("15", 32, 8, 20, 437, 273, 43)],
    ("rebase", 2): [("11", 26, 8, 17, 365, 227, 37), ("17", 28, 8, 17, 398, 198, 35), ("18", 31, 8, 17, 388, 241, 38)],
}
"""``_summary`` of each search and seed, recorded on the code before issue 37's changes."""


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("kind", SEARCHES)
def test_outputs_on_fixed_seeds_are_as_recorded(kind, seed, step_model, addition_problems, addition_checker):
    assert _summary(kind, seed, step_model, addition_problems, addition_checker) == RECORDED[kind, seed]
