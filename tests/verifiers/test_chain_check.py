"""The chain verifier: each step checked against the question's operations (never the gold answer),
the answer line only after the last operation, and the noise knob as the arithmetic tool's."""

from __future__ import annotations

from tts.benchmarks.chains import CHAINS_PROMPT, STEP_SEPARATOR, generate_problems, parse_question
from tts.verifiers.base import VerifyItem
from tts.verifiers.chain_check import ChainCheckConfig, ChainCheckVerifier
from tts.types import Problem

Q = "Start with 7.\n1. Add 5.\n2. Double it.\n3. Take away 3.\nWhat is the result?"


def _scores(steps, question=Q, **cfg):
    return ChainCheckVerifier(ChainCheckConfig(**cfg)).score([VerifyItem(Problem("p", question), tuple(steps))])[0]


def test_the_question_parses_back_into_its_operations():
    for p in generate_problems(64):
        assert parse_question(p.question) == (p.metadata["start"], tuple(p.metadata["ops"].split(";")))
    assert parse_question("What is 3 + 4?") is None
    assert parse_question("Start with 7.\n2. Add 5.\nWhat is the result?") is None  # misnumbered


def test_a_right_chain_scores_one_at_every_step_and_the_few_shot_solutions_are_right():
    s = _scores(["1. 7 + 5 = 12", "2. 12 * 2 = 24", "3. 24 - 3 = 21", "The answer is 21."])
    assert s.step_scores == (1.0, 1.0, 1.0, 1.0) and s.score == 1.0
    for question, solution in CHAINS_PROMPT.few_shot:
        assert _scores(solution.split(STEP_SEPARATOR), question).score == 1.0


def test_wrong_operations_skipped_steps_and_early_answers_score_zero_where_the_arithmetic_tool_passes_them():
    wrong_op = _scores(["1. 7 + 5 = 12", "2. 12 * 3 = 36"])  # a true equality, the wrong operation
    assert wrong_op.step_scores == (1.0, 0.0)
    skipped = _scores(["1. 7 + 5 = 12", "2. 12 - 3 = 9", "The answer is 9."])
    assert skipped.step_scores == (1.0, 0.0, 0.0) and skipped.score == 0.0
    early = _scores(["1. 7 + 5 = 12", "The answer is 12."])
    assert early.step_scores == (1.0, 0.0)
    misstated = _scores(["1. 7 + 5 = 13"])
    assert misstated.step_scores == (0.0,)
    assert _scores(["1. 7 + 5 = 12", "so we double", "2. 12 * 2 = 24"]).step_scores == (1.0, 0.0, 1.0)


def test_a_question_that_is_not_a_chain_scores_neutral():
    s = _scores(["3 + 4 = 7", "The answer is 7."], question="What is 3 + 4?")
    assert s.step_scores == (0.5, 0.5) and s.score == 0.5


def test_noise_flips_steps_at_its_rate_and_is_repeatable():
    items = [VerifyItem(Problem(f"p{i}", Q), ("1. 7 + 5 = 12",)) for i in range(2000)]
    noisy = ChainCheckVerifier(ChainCheckConfig(noise=0.3, noise_seed=1))
    flipped = sum(s.step_scores[0] == 0.0 for s in noisy.score(items))
    assert abs(flipped - 600) < 4 * (2000 * 0.3 * 0.7) ** 0.5
    assert [s.step_scores for s in noisy.score(items[:40])] == [s.step_scores for s in noisy.score(items[:40])]


def test_text_that_is_almost_a_chain_is_not_one():
    assert parse_question("") is None and parse_question("  \n ") is None
    assert parse_question("Start with 7.\nWhat is the result?") is None  # no operation
    assert parse_question("Start with 7.\n1. Add 5.\nWhat is it?") is None  # not the question's last line
    assert parse_question("Begin with 7.\n1. Add 5.\nWhat is the result?") is None  # not the first line
    assert parse_question("Start with 7.\n1. Square it.\nWhat is the result?") is None  # no such operation
    assert parse_question("Start with 7.\n1. Add 5.\n2. Halve it.\nWhat is the result?") == (7, ("+ 5", "/ 2"))


def test_a_chain_through_zero_keeps_zero_as_the_value_reached():
    question = "Start with 7.\n1. Take away 7.\n2. Add 5.\nWhat is the result?"
    assert parse_question(question) == (7, ("- 7", "+ 5"))
    assert _scores(["1. 7 - 7 = 0", "2. 0 + 5 = 5", "The answer is 5."], question).step_scores == (1.0, 1.0, 1.0)


def test_a_step_past_the_last_operation_scores_zero():
    s = _scores(["1. 7 + 5 = 12", "2. 12 * 2 = 24", "3. 24 - 3 = 21", "4. 21 + 1 = 22", "The answer is 22."])
    assert s.step_scores == (1.0, 1.0, 1.0, 0.0, 0.0)


def test_no_steps_score_neutral_and_the_config_is_the_one_given():
    verifier = ChainCheckVerifier.from_config(ChainCheckConfig(neutral=0.25), object())
    empty, other = verifier.score([VerifyItem(Problem("p", Q), ()), VerifyItem(Problem("q", "What is 3 + 4?"), ("7",))])
    assert (empty.step_scores, empty.score) == ((), 0.25) and (other.step_scores, other.score) == ((0.25,), 0.25)


def test_noise_flips_exactly_the_steps_its_seed_draws():
    from tts.verifiers.base import noise_flips

    items = [VerifyItem(Problem(f"p{i}", Q), ("1. 7 + 5 = 12",)) for i in range(40)]
    for seed in (0, 1):
        got = [s.step_scores for s in ChainCheckVerifier(ChainCheckConfig(noise=0.3, noise_seed=seed)).score(items)]
        assert got == [(0.0 if noise_flips(seed, item, 0, 0.3) else 1.0,) for item in items]
    assert [noise_flips(0, item, 0, 0.3) for item in items] != [noise_flips(1, item, 0, 0.3) for item in items]
