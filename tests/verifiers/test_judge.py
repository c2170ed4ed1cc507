import logging
import math

import pytest

from tts.backends.base import Completion, GenerationResult, Message
from tts.backends.function import FunctionGenerator, RecordingGenerator
from tts.backends.scripted import ScriptedGenerator
from tts.config import parse_verifier_config
from tts.types import Problem, Usage
from tts.verifiers.base import Verifier, VerifyItem, build_verifier
from tts.verifiers.judge import JudgeConfig, LLMJudge, final_verdict, p_yes

PROBLEMS = [Problem(f"p{i}", f"What is {i} + {i}?", str(2 * i)) for i in range(30)]


def _generator(**kwargs):
    return RecordingGenerator(ScriptedGenerator.for_problems(PROBLEMS, accuracy=0.5, **kwargs))


def _items():
    """A right and a wrong finished solution per problem, alternating."""
    items = []
    for p in PROBLEMS:
        for answer in (p.answer, str(int(p.answer) + 1)):
            steps = ("We add the two numbers.", f"The answer is \\boxed{{{answer}}}.")
            items.append(VerifyItem(p, steps, finished=True))
    return items


def _mean(values):
    return sum(values) / len(values)


def test_one_generate_call_for_a_batch_and_scores_in_order():
    gen = _generator()
    judge = LLMJudge(JudgeConfig(), gen)
    scores = judge.score(_items())
    assert len(gen.calls) == 1 and len(gen.calls[0]) == len(PROBLEMS) * 2
    assert all(0.0 <= s.score <= 1.0 and s.step_scores == () for s in scores)
    assert all(r.top_logprobs > 0 and r.max_tokens == 1 for r in gen.calls[0])


def test_right_solutions_get_higher_p_yes_than_wrong_ones():
    scores = LLMJudge(JudgeConfig(), _generator()).score(_items())
    right, wrong = [s.score for s in scores[0::2]], [s.score for s in scores[1::2]]
    assert _mean(right) > _mean(wrong) + 0.2


def test_usage_is_the_judges_generation_per_item():
    gen = _generator()
    scores = LLMJudge(JudgeConfig(), gen).score(_items())
    assert all(s.usage.calls == 1 and s.usage.completion_tokens == 1 and s.usage.prompt_tokens > 0 for s in scores)
    assert all(shape.model == "" for s in scores for shape in s.usage.shapes)  # the policy served it


def test_no_yes_or_no_token_scores_half_and_is_counted_invalid():
    for gen in (_generator(verdict_mass=0.0), _generator(returns_logprobs=False)):
        scores = LLMJudge(JudgeConfig(), gen).score(_items()[:4])
        assert [s.score for s in scores] == [0.5] * 4 and [s.invalid for s in scores] == [1] * 4


def test_votes_score_the_share_of_reasoned_verdicts_ending_in_yes():
    gen = _generator()
    scores = LLMJudge(JudgeConfig(votes=5), gen).score(_items())
    assert len(gen.calls) == 1 and all(r.n == 5 and r.temperature > 0 for r in gen.calls[0])
    sure = LLMJudge(JudgeConfig(votes=5), _generator(verdict_mass=1.0)).score(_items())  # every vote decides
    assert all(s.score * 5 == pytest.approx(round(s.score * 5)) and not s.invalid for s in sure)
    right, wrong = [s.score for s in scores[0::2]], [s.score for s in scores[1::2]]
    assert _mean(right) > _mean(wrong) + 0.2
    assert all(s.usage.completion_tokens > 5 for s in scores)


def test_per_step_judges_every_prefix_in_the_same_single_call():
    gen = _generator()
    judge = LLMJudge(JudgeConfig(per_step=True, aggregation="last"), gen)
    items = _items()[:6]
    scores = judge.score(items)
    assert len(gen.calls) == 1
    # the first step is the same text for both solutions of a problem: judged once
    assert len(gen.calls[0]) == 3 + 6
    assert all(len(s.step_scores) == 2 and s.score == s.step_scores[-1] for s in scores)
    assert sum(s.usage.calls for s in scores) == len(gen.calls[0])


def test_verdicts_judged_before_are_reused_at_no_cost():
    gen = _generator()
    judge = LLMJudge(JudgeConfig(per_step=True), gen)
    first = judge.score(_items()[:2])
    again = judge.score(_items()[:2])
    assert len(gen.calls) == 1 and [s.score for s in again] == [s.score for s in first]
    assert all(s.usage == Usage() for s in again)
    fresh = LLMJudge(JudgeConfig(per_step=True, reuse_verdicts=False), gen)
    fresh.score(_items()[:2]), fresh.score(_items()[:2])
    assert len(gen.calls) == 3


def test_empty_solutions_are_not_sent():
    gen = _generator()
    scores = LLMJudge(JudgeConfig(), gen).score([VerifyItem(PROBLEMS[0], ())])
    assert gen.calls == [] and scores[0].score == 0.5


def test_broken_logprobs_never_give_a_non_finite_score():
    scores = LLMJudge(JudgeConfig(per_step=True), FunctionGenerator(
        lambda r: Completion("Yes", 1, first_token_top_logprobs={"Yes": math.nan, "No": math.inf}))).score(_items()[:2])
    assert all(math.isfinite(s.score) and 0 <= s.score <= 1 and s.invalid for s in scores)


def test_built_through_the_registry_with_the_policy_or_its_own_backend():
    policy = _generator()
    judge = build_verifier(parse_verifier_config("judge"), policy)
    assert isinstance(judge, LLMJudge) and isinstance(judge, Verifier) and judge.generator is policy
    own = build_verifier(parse_verifier_config({"kind": "judge", "backend": {"kind": "scripted", "model": "judge-m"}}),
                         policy)
    assert own.generator is not policy
    scores = own.score(_items()[:2])
    assert all(shape.model == "judge-m" for s in scores for shape in s.usage.shapes)
    own.close()
    judge.close()  # must not close the policy's generator
    assert LLMJudge(JudgeConfig(), policy).score(_items()[:1])


def test_a_judge_needs_a_model():
    with pytest.raises(ValueError, match="backend"):
        LLMJudge.from_config(JudgeConfig(), None)


def test_p_yes_merges_spellings_and_normalises_by_yes_and_no():
    assert p_yes({" Yes": math.log(0.3), "yes": math.log(0.1), "No": math.log(0.4), "The": math.log(0.2)}) == \
        pytest.approx(0.5)
    assert p_yes({"The": -0.1, "I": -2.0}) is None and p_yes(None) is None and p_yes({}) is None


def test_final_verdict_is_the_trailing_yes_or_no_of_a_finished_reply():
    assert final_verdict("No wait, the sum is right. Yes.") is True
    assert final_verdict("Yes the steps look fine but 3 + 4 is not 8. No") is False
    assert final_verdict("Nothing to say.") is None  # "Nothing" is not "No"
    assert final_verdict("Yes, the solution is correct: there is no error.") is True
    assert final_verdict("Yes.\n\nThen I re-read the problem") is None  # a verdict must come last
    assert final_verdict("The steps are right. Yes.", "length") is None  # cut off: no verdict


def test_votes_leave_out_replies_without_a_verdict_and_count_them():
    texts = [("Fine. Yes.", "stop"), ("Step 2 is fine, no issue with", "length"), ("Hmm.", "stop")]
    replies = FunctionGenerator(lambda r: [Completion(t, 5, finish_reason=f) for t, f in texts])
    (score,) = LLMJudge(JudgeConfig(votes=3), replies).score(_items()[:1])
    assert score.score == 1.0 and score.invalid == 2


@pytest.mark.slow
def test_judge_on_the_real_engine(vllm_generator, monkeypatch):
    engine_calls = []
    engine_generate = vllm_generator.llm.generate
    monkeypatch.setattr(vllm_generator.llm, "generate",
                        lambda *a, **k: engine_calls.append(1) or engine_generate(*a, **k))
    items = [VerifyItem(Problem("d", "What is 3 + 8 + 5?"), ("3 + 8 = 11, 11 + 5 = 16. The answer is 16.",), True),
             VerifyItem(Problem("d", "What is 3 + 8 + 5?"), ("3 + 8 = 11, 11 + 5 = 17. The answer is 17.",), True)]
    captured = []
    judge = LLMJudge(JudgeConfig(), vllm_generator)
    monkeypatch.setattr(judge, "_read", lambda result: captured.append(result) or LLMJudge._read(judge, result))
    scores = judge.score(items)
    assert len(engine_calls) == 1
    assert all(0.0 <= s.score <= 1.0 and s.usage.calls == 1 and s.usage.prompt_tokens > 0 for s in scores)
    assert all(r.completions[0].first_token_top_logprobs for r in captured)


# --- what the judge sends and how it reads back (each test pins behaviour a mutant changed) -------


def _ask(config, items, reply="Yes"):
    gen = FunctionGenerator(lambda r: Completion(reply, 1, first_token_top_logprobs={"Yes": -0.1, "No": -2.5}))
    LLMJudge(config, gen).score(items)
    return gen.calls[0]


def test_the_judge_prompt_names_a_finished_solution_a_partial_one_and_a_step_as_written():
    problem = Problem("q", "What is 2 + 3?")
    done = VerifyItem(problem, ("2 + 3 = 5.", "So \\boxed{5}."), finished=True)
    partial = VerifyItem(problem, ("2 + 3 = 5.", "So \\boxed{5}."), finished=False)
    whole = _ask(JudgeConfig(), [done, partial])
    assert [r.messages for r in whole] == [
        (Message("user", "Problem:\nWhat is 2 + 3?\n\nSolution:\n2 + 3 = 5.\nSo \\boxed{5}.\n\n"
                         "Is this solution correct? Answer Yes or No."),),
        (Message("user", "Problem:\nWhat is 2 + 3?\n\nSolution so far:\n2 + 3 = 5.\nSo \\boxed{5}.\n\n"
                         "Is this solution correct? Answer Yes or No."),)]
    # per step (of a finished solution too): every prefix is "so far" and asked the step question
    steps = _ask(JudgeConfig(per_step=True, system="Be strict."), [done])
    system = Message("system", "Be strict.")
    assert [r.messages for r in steps] == [
        (system, Message("user", "Problem:\nWhat is 2 + 3?\n\nSolution so far:\n2 + 3 = 5.\n\n"
                                 "Is the last step of this solution correct? Answer Yes or No.")),
        (system, Message("user", "Problem:\nWhat is 2 + 3?\n\nSolution so far:\n2 + 3 = 5.\nSo \\boxed{5}.\n\n"
                                 "Is the last step of this solution correct? Answer Yes or No."))]
    voted = _ask(JudgeConfig(votes=2), [done], reply="Fine. Yes")
    assert voted[0].messages[-1].content.endswith("Is this solution correct? "
                                                  "Check it briefly, then end your reply with Yes or No.")


def test_the_judge_requests_settings_in_both_verdict_modes():
    item = VerifyItem(Problem("q7", "What is 2 + 3?"), ("5",), finished=True)
    (first,) = _ask(JudgeConfig(top_logprobs=7, verdict_prefix="Verdict:"), [item])
    assert (first.n, first.temperature, first.max_tokens, first.top_logprobs, first.continuation, first.key,
            first.role) == (1, 0.0, 1, 7, "Verdict:", "q7", "judge")
    (voted,) = _ask(JudgeConfig(votes=3, temperature=0.3, max_tokens=40), [item], reply="Fine. Yes")
    assert (voted.n, voted.temperature, voted.max_tokens, voted.key, voted.role) == (3, 0.3, 40, "q7", "judge")


def test_a_finished_and_an_unfinished_solution_with_the_same_steps_are_judged_apart():
    problem = Problem("q", "What is 2 + 3?")
    verdicts = {"Solution:": {"Yes": -0.05, "No": -3.0}, "Solution so far:": {"Yes": -3.0, "No": -0.05}}
    gen = FunctionGenerator(lambda r: Completion("Yes", 1, first_token_top_logprobs=next(
        v for k, v in verdicts.items() if f"\n\n{k}\n" in r.messages[-1].content)))
    done, partial = LLMJudge(JudgeConfig(), gen).score(
        [VerifyItem(problem, ("5",), finished=True), VerifyItem(problem, ("5",), finished=False)])
    assert len(gen.calls[0]) == 2
    assert done.score == pytest.approx(math.exp(-0.05) / (math.exp(-0.05) + math.exp(-3.0)))
    assert partial.score == pytest.approx(math.exp(-3.0) / (math.exp(-0.05) + math.exp(-3.0)))


def test_p_yes_reads_verdict_tokens_through_punctuation_and_raw_reads_one_minus_no():
    assert p_yes({"Yes.": math.log(0.6), "**No": math.log(0.2)}) == pytest.approx(0.75)
    assert p_yes({"No,": math.log(0.25), "The": math.log(0.5)}, normalized=False) == pytest.approx(0.75)


def test_a_labelled_verdict_before_more_words_is_read():
    assert final_verdict("Verdict: Yes, every step holds.") is True
    assert final_verdict("Verdict: NO, step 2 adds wrong.") is False


def test_a_judge_without_a_model_says_how_to_give_it_one():
    with pytest.raises(ValueError) as err:
        LLMJudge.from_config(JudgeConfig(), None)
    assert str(err.value) == ("the judge needs a model: pass the policy's generator, or give the judge config a "
                              "backend (e.g. {kind: judge, backend: {kind: vllm, model: ...}})")


def test_a_reply_with_no_completion_or_an_impossible_probability_scores_half_counted_once():
    item = _items()[0]
    empty = FunctionGenerator(lambda r: GenerationResult((), Usage()))
    assert [(s.score, s.invalid) for s in LLMJudge(JudgeConfig(), empty).score([item])] == [(0.5, 1)]
    assert [(s.score, s.invalid) for s in LLMJudge(JudgeConfig(votes=2), empty).score([item])] == [(0.5, 1)]
    one = FunctionGenerator(lambda r: Completion("Hmm.", 3, finish_reason="stop"))
    assert [(s.score, s.invalid) for s in LLMJudge(JudgeConfig(votes=1), one).score([item])] == [(0.5, 1)]
    # a broken backend's positive logprob: raw 1 - P(No) < 0 is no probability
    broken = FunctionGenerator(lambda r: Completion("No", 1, first_token_top_logprobs={"No": 0.5}))
    assert [(s.score, s.invalid) for s in LLMJudge(JudgeConfig(yes_probability="raw"), broken).score([item])] == \
        [(0.5, 1)]


def test_an_empty_solution_is_no_evidence_and_no_invalid_reply():
    (score,) = LLMJudge(JudgeConfig(), _generator()).score([VerifyItem(PROBLEMS[0], ())])
    assert (score.score, score.invalid, score.usage) == (0.5, 0, Usage())


def test_a_judge_model_without_a_name_labels_its_usage_with_an_empty_model():
    gen = FunctionGenerator(lambda r: Completion("Yes", 1, first_token_top_logprobs={"Yes": -0.1}))
    del gen.model_name  # a generator that reports no model_name
    (score,) = LLMJudge(JudgeConfig(), gen, owns_generator=True).score(_items()[:1])
    assert [s.model for s in score.usage.shapes] == [""]


def test_remembered_verdicts_are_dropped_only_past_the_limit(monkeypatch):
    import tts.verifiers.judge as judge_module

    monkeypatch.setattr(judge_module, "_CACHE_LIMIT", 2)
    gen = _generator()
    judge = LLMJudge(JudgeConfig(), gen)
    a, b, c = _items()[:3]
    judge.score([a]), judge.score([b])  # 2 verdicts: at the limit, both kept
    judge.score([a, b])
    assert len(gen.calls) == 2
    judge.score([c])  # 3 > 2: the old ones are dropped, c's kept
    judge.score([c])
    assert len(gen.calls) == 3
    judge.score([a])
    assert len(gen.calls) == 4


def test_texts_without_a_verdict_are_logged_with_their_count(caplog):
    gen = FunctionGenerator(lambda r: Completion("Hmm.", 3, finish_reason="stop"))
    with caplog.at_level(logging.DEBUG, logger="tts.verifiers.judge"):
        LLMJudge(JudgeConfig(votes=2), gen).score(_items()[:3])
    assert "judge: 6 replies to 3 judged texts had no verdict" in caplog.messages
