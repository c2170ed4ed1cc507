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
