from tts.backends.base import GenerationRequest, Message
from tts.backends.scripted import ScriptedGenerator


def _req(**kw):
    return GenerationRequest(messages=(Message("user", "What is 2 + 2?"),), key="p", **kw)


def test_answers_follow_the_given_distribution():
    gen = ScriptedGenerator({"p": {"4": 0.7, "5": 0.2}}, seed=0)
    res = gen.generate([_req(n=2000)])[0]
    answers = [c.text.rsplit("\\boxed{", 1)[-1].rstrip("}.") if "\\boxed" in c.text else None for c in res.completions]
    share4 = answers.count("4") / 2000
    share_none = answers.count(None) / 2000
    assert 0.66 < share4 < 0.74 and 0.07 < share_none < 0.13


def test_usage_counts_prompt_once_and_repeated_prompts_as_cached():
    gen = ScriptedGenerator({"p": {"4": 1.0}}, seed=0)
    first, second = gen.generate([_req(n=3), _req(n=3)])
    assert first.usage.cached_prompt_tokens == 0 and second.usage.cached_prompt_tokens == second.usage.prompt_tokens
    assert first.usage.completion_tokens == sum(c.completion_tokens for c in first.completions)
    assert first.usage.shapes[0].completion_tokens == tuple(c.completion_tokens for c in first.completions)


def test_logprobs_only_when_asked():
    gen = ScriptedGenerator({"p": {"4": 1.0}}, seed=0)
    assert gen.generate([_req(n=2)])[0].completions[0].mean_logprob is None
    assert gen.generate([_req(n=2, logprobs=True)])[0].completions[0].mean_logprob < 0


def test_a_repeated_seed_returns_the_same_samples_like_a_seeded_engine():
    gen = ScriptedGenerator({"p": {"4": 0.5, "5": 0.3}}, seed=1)
    first = gen.generate([_req(n=4, seed=11)])[0].completions
    again = gen.generate([_req(n=4, seed=11)])[0].completions
    other = gen.generate([_req(n=4, seed=12)])[0].completions
    assert first == again and first != other


def test_without_a_seed_a_repeat_continues_the_stream_like_one_larger_request():
    one_big = ScriptedGenerator({"p": {"4": 0.5, "5": 0.3}}, seed=1).generate([_req(n=6)])[0].completions
    gen = ScriptedGenerator({"p": {"4": 0.5, "5": 0.3}}, seed=1)
    small = [gen.generate([_req(n=1)])[0].completions[0] for _ in range(6)]
    assert list(one_big) == small and len(set(c.text for c in small)) > 1


def test_a_backend_without_logprob_support_returns_none_even_when_asked():
    gen = ScriptedGenerator({"p": {"4": 1.0}}, seed=0, returns_logprobs=False)
    assert gen.generate([_req(n=2, logprobs=True)])[0].completions[0].mean_logprob is None


def test_token_logprobs_come_with_logprobs_and_average_to_the_mean():
    gen = ScriptedGenerator({"p": {"4": 0.7, "5": 0.2}}, seed=0)
    assert gen.generate([_req(n=2)])[0].completions[0].token_logprobs is None
    for c in gen.generate([_req(n=8, logprobs=True)])[0].completions:
        assert len(c.token_logprobs) == c.completion_tokens and all(lp <= 0 for lp in c.token_logprobs)
        assert abs(sum(c.token_logprobs) / len(c.token_logprobs) - c.mean_logprob) < 1e-9
    # asking for logprobs does not change the samples themselves
    plain = ScriptedGenerator({"p": {"4": 0.7}}, seed=3).generate([_req(n=4)])[0].completions
    with_lp = ScriptedGenerator({"p": {"4": 0.7}}, seed=3).generate([_req(n=4, logprobs=True)])[0].completions
    assert [c.text for c in plain] == [c.text for c in with_lp]


def _verdict_req(answer, **kw):
    text = f"Problem:\nWhat is 2 + 2?\n\nSolution:\nThe answer is \\boxed{{{answer}}}.\n\nIs this solution correct? Answer Yes or No."
    return GenerationRequest(messages=(Message("user", text),), key="p", **kw)


def test_the_scripted_judge_says_yes_to_the_mode_more_often():
    gen = ScriptedGenerator({"p": {"4": 0.6, "5": 0.3}}, seed=0)
    right, wrong = gen.generate([_verdict_req("4", n=400, max_tokens=64), _verdict_req("5", n=400, max_tokens=64)])
    share = [sum(c.text.endswith("Yes.") for c in r.completions) / 400 for r in (right, wrong)]
    assert share[0] > 0.5 > share[1]
    assert all(c.text.endswith(("Yes.", "No.", ".")) for c in right.completions)


def test_the_scripted_judge_returns_first_token_top_logprobs_when_asked():
    gen = ScriptedGenerator({"p": {"4": 0.6, "5": 0.3}}, seed=0)
    c = gen.generate([_verdict_req("4", top_logprobs=3, temperature=0.0, max_tokens=1)])[0].completions[0]
    assert set(c.first_token_top_logprobs) >= {"Yes", "No"} and len(c.first_token_top_logprobs) == 3
    assert c.text == "Yes" and c.completion_tokens == 1  # greedy takes the likelier verdict
    assert gen.generate([_verdict_req("4")])[0].completions[0].first_token_top_logprobs is None
    assert gen.generate([_req(top_logprobs=3)])[0].completions[0].first_token_top_logprobs is None  # not a verdict


def test_top_logprobs_is_bounded():
    import pytest

    with pytest.raises(ValueError, match="top_logprobs"):
        _req(top_logprobs=21)


# --- stop strings and continuation, served as vLLM serves them ------------------------------------


def test_a_solution_is_written_in_steps_and_a_stop_string_ends_a_sample_at_the_first_one():
    gen = ScriptedGenerator({"p": {"4": 1.0}}, seed=0, mean_tokens=150)
    whole = gen.generate([_req(n=4, seed=3)])[0].completions
    assert all("\n\n" in c.text and c.text.endswith("\\boxed{4}.") and c.ended_by_eos for c in whole)
    stepped = gen.generate([_req(n=4, seed=3, stop=("\n\n",), logprobs=True)])[0].completions
    for c in stepped:
        # vLLM: the stop string is cut from the text but its token counted; a stop string is not an end of sequence
        assert "\n\n" not in c.text and "boxed" not in c.text and c.text.endswith(".")
        assert c.finish_reason == "stop" and c.ended_by_eos is False
        assert c.completion_tokens == len(c.text.split()) + 1 == len(c.token_logprobs)
    other = gen.generate([_req(n=1, seed=3, stop=("compute", "value"))])[0].completions[0]
    assert "compute" not in other.text and "value" not in other.text and other.finish_reason == "stop"


def test_a_continued_partial_solution_is_carried_on_until_it_states_its_answer():
    gen = ScriptedGenerator({"p": {"4": 1.0}}, seed=0, mean_tokens=120)
    steps: list[str] = []
    for i in range(20):
        c = gen.generate([_req(seed=i, stop=("\n\n",), continuation="".join(s + "\n\n" for s in steps))])[0]
        c = c.completions[0]
        steps.append(c.text)
        if c.ended_by_eos:
            break
    assert 2 <= len(steps) < 20 and steps[-1].endswith("The answer is \\boxed{4}.")
    assert all("boxed" not in s for s in steps[:-1])
    # the continuation is the prompt's tail: a different partial solution gets different samples
    a = gen.generate([_req(seed=1, stop=("\n\n",), continuation="we compute.\n\n")])[0].completions[0]
    b = gen.generate([_req(seed=1, stop=("\n\n",), continuation="we check.\n\n")])[0].completions[0]
    assert a.text != b.text


def test_the_step_token_cap_ends_a_step_with_length_and_a_continued_box_gets_its_answer():
    gen = ScriptedGenerator({"p": {"4": 1.0}}, seed=0, step_tokens=40)
    c = gen.generate([_req(seed=2, stop=("\n\n",), max_tokens=5)])[0].completions[0]
    assert c.finish_reason == "length" and c.completion_tokens == 5 and c.ended_by_eos is False
    nudge = "we compute.\n\nTherefore, the final answer is $\\boxed{"
    c = gen.generate([_req(seed=2, stop=("\n\n",), continuation=nudge, max_tokens=32)])[0].completions[0]
    assert c.text == "4}$." and c.finish_reason == "stop" and c.ended_by_eos is True
