"""Outcome reward models (tts/verifiers/rm.py): adapters, the score read from each head, and errors.

On a fake vLLM pooling server (tests/verifiers/test_prm_remote.py's), with the embedded small model's
tokenizer, so that nothing here builds a model (each test takes milliseconds to a second); the
in-process engine is replaced by a fake that records its arguments.
"""

from __future__ import annotations

import functools
from types import SimpleNamespace
from typing import Any

import pytest

from tests.verifiers.test_prm_remote import QUESTION, STEPS, _item, server  # noqa: F401  (server: the fake-server fixture)
from tts.backends.base import BackendError
from tts.config import parse_verifier_config
from tts.verifiers import rm as rm_module
from tts.verifiers.prm import _load_tokenizer
from tts.verifiers.rm import RM_ADAPTERS, RMAdapter, RMVerifier, RMVerifierConfig, get_rm_adapter


@functools.lru_cache(maxsize=None)
def _load_once(path: str, local: bool) -> Any:
    return _load_tokenizer(path, local)


LOADS: list[tuple[str, bool]] = []


@pytest.fixture(autouse=True)
def _tokenizer_loaded_once(monkeypatch):
    """Every verifier here reads the same tokenizer: load it once (a second or more a verifier on 2
    shared cores, most of each test's time), the arguments as the verifier gives them kept in LOADS."""
    LOADS.clear()
    monkeypatch.setattr(rm_module, "_load_tokenizer", lambda path, local: LOADS.append((path, local)) or
                        _load_once(path, bool(local)))





def _rm(small_tokenizer_dir, url: str, adapter: Any = "chat", **backend: Any) -> RMVerifier:
    backend = {"kind": "openai", "base_url": url, "tokenizer": str(small_tokenizer_dir), "backoff": 0.0, **backend}
    return RMVerifier(RMVerifierConfig(model="tiny-rm", adapter=adapter, backend=backend))


def test_an_outcome_rm_gives_one_score_per_solution_from_its_head(small_tokenizer_dir, server):
    def classify(body):
        assert body["task"] == "classify"
        return 200, {"data": [{"index": i, "data": [1 - len(ids) / 1000, len(ids) / 1000]}
                              for i, ids in enumerate(body["input"])]}, {}

    srv = server(classify)
    items = [_item(STEPS[:1]), _item(STEPS), _item(())]
    with _rm(small_tokenizer_dir, srv.base_url) as rm:
        scores = rm.score(items)
        ids = [rm.encode(items[0]), rm.encode(items[1])]
        assert srv.requests[0]["body"]["input"] == ids and len(srv.requests) == 1
        assert srv.requests[0]["body"]["model"] == "tiny-rm" and rm.on_gpu is False
        text = rm.tokenizer.decode(ids[1])
        assert "\n\n".join(STEPS) in text and QUESTION in text  # the whole solution, no step tags
    assert [s.score for s in scores[:2]] == pytest.approx([len(ids[0]) / 1000, len(ids[1]) / 1000])
    assert all(s.step_scores == () for s in scores) and scores[2].score == 0.5 and scores[2].usage.calls == 0
    assert scores[1].usage.prompt_tokens == len(ids[1]) and scores[1].usage.shapes[0].model == str(small_tokenizer_dir)


def test_a_token_level_reward_head_is_read_at_the_last_token(small_tokenizer_dir, server):
    def per_token(body):
        assert body["task"] == "token_classify"
        return 200, {"data": [{"index": i, "data": [[0.01 * (j % 50)] for j in range(len(ids))]}
                              for i, ids in enumerate(body["input"])]}, {}

    srv = server(per_token)
    adapter = {"head": "last_token", "template": "{question}\n{solution}"}
    with _rm(small_tokenizer_dir, srv.base_url, adapter=adapter) as rm:
        [score] = rm.score([_item(STEPS)])
        n = len(rm.encode(_item(STEPS)))
    assert score.score == pytest.approx(0.01 * ((n - 1) % 50))


def test_outcome_rm_adapters_by_name_or_inline_and_what_they_refuse():
    cfg = parse_verifier_config({"kind": "rm", "model": "Skywork/Skywork-Reward-Llama-3.1-8B-v0.2"})
    assert cfg.adapter.name == "chat" and cfg.adapter.task == "classify" and cfg.backend.kind == "vllm"
    assert parse_verifier_config({"kind": "rm", "model": "m", "adapter": "qwen2.5-math-rm"}).adapter.task \
        == "token_classify"
    inline = parse_verifier_config({"kind": "rm", "model": "m", "adapter": {"template": "Q: {question}\nA: {solution}",
                                                                            "positive_index": 0}})
    assert inline.adapter.column(2) == 0 and cfg.adapter.column(1) == 0 and cfg.adapter.column(2) == 1
    with pytest.raises(ValueError, match="unknown reward-model adapter 'skywork'; choose one of chat, qwen2.5-math-rm"):
        parse_verifier_config({"kind": "rm", "model": "m", "adapter": "skywork"})
    with pytest.raises(ValueError, match=r"must hold \{question\} and \{solution\}"):
        parse_verifier_config({"kind": "rm", "model": "m", "adapter": {"template": "{question} {answer}"}})
    with pytest.raises(ValueError, match="model"):
        parse_verifier_config({"kind": "rm"})  # no default model: name the reward model


# --- the in-process engine (a fake that records its arguments) and the exact numbers and messages ----


class FakeEngine:
    """A ``vllm.LLM`` pooling engine: ``rows(ids)`` is a prompt's pooled output; calls are kept."""

    def __init__(self, rows):
        self.rows = rows
        self.calls: list[tuple[list[list[int]], str, bool]] = []
        self.stopped = False

    def encode(self, prompts, pooling_task, use_tqdm):
        import torch

        ids = [list(p["prompt_token_ids"]) for p in prompts]
        self.calls.append((ids, pooling_task, use_tqdm))
        return [SimpleNamespace(outputs=SimpleNamespace(data=torch.tensor(self.rows(i), dtype=torch.float64)))
                for i in ids]

    def shutdown(self):
        self.stopped = True


def _in_process(monkeypatch, model_dir, rows, gpu=False, **config: Any):
    import tts.backends.vllm as vllm_backend

    engine, started = FakeEngine(rows), []
    monkeypatch.setattr(vllm_backend, "cuda_available", lambda: gpu)
    monkeypatch.setattr(vllm_backend, "launch_engine", lambda kwargs, **kw: started.append((kwargs, kw)) or engine)
    return RMVerifier(RMVerifierConfig(model=str(model_dir), **config)), engine, started


def test_the_in_process_engine_gets_the_heads_pooling_settings(small_tokenizer_dir, monkeypatch):
    rm, _, started = _in_process(monkeypatch, small_tokenizer_dir, lambda ids: [0.5, 0.5], dtype="float32",
                                 max_model_len=1024, kv_cache_gib=3)
    ((kwargs, kw),) = started
    assert kwargs.pop("pooler_config").task == "classify"
    assert kwargs == {"runner": "pooling", "model": str(small_tokenizer_dir), "dtype": "float32", "max_model_len": 1024}
    assert (kw["local_model"], kw["on_gpu"], kw["kv_cache_gib"], kw["what"]) == (True, False, 3, "reward model")
    assert kw["hint"] == ("Check that the model exists, that it is a reward model whose head fits the adapter's "
                          "(classify), and that it fits in memory.")
    assert LOADS == [(str(small_tokenizer_dir), True)]  # a local directory: read offline
    assert repr(rm) == f"RMVerifier({str(small_tokenizer_dir)!r}, 'chat', in process)" and not rm.remote
    gpu, _, started = _in_process(monkeypatch, small_tokenizer_dir, lambda ids: [0.5, 0.5], gpu=True,
                                  adapter="qwen2.5-math-rm", gpu_memory_utilization=0.6)
    ((kwargs, kw),) = started
    assert kwargs["pooler_config"].task == "token_classify" and kwargs["runner"] == "pooling"
    assert (kwargs["dtype"], kwargs["gpu_memory_utilization"], kw["on_gpu"]) == ("auto", 0.6, True)
    assert gpu.on_gpu and not rm.on_gpu


def test_in_process_scores_each_solution_in_one_engine_call_priced_on_the_rm(small_tokenizer_dir, monkeypatch):
    rm, engine, _ = _in_process(monkeypatch, small_tokenizer_dir, lambda ids: [1 - len(ids) / 1000, len(ids) / 1000])
    items = [_item(STEPS[:1]), _item(()), _item(STEPS)]
    scores = rm.score(items)
    ids = [rm.encode(items[0]), rm.encode(items[2])]
    assert engine.calls == [(ids, "classify", False)]
    assert [s.score for s in scores] == pytest.approx([len(ids[0]) / 1000, 0.5, len(ids[1]) / 1000])
    for score, sent in zip((scores[0], scores[2]), ids, strict=True):
        (shape,) = score.usage.shapes
        assert (shape.prompt_tokens, shape.completion_tokens, shape.batch_sequences, shape.model) == \
            (len(sent), (), 2, str(small_tokenizer_dir))
        assert shape.cached_prompt_tokens == 0 and score.usage.cached_prompt_tokens == 0
        assert score.usage.calls == 1 and 0 <= score.usage.wall_seconds < 60 and score.invalid == 0
    assert scores[1].usage.calls == 0
    rm.close()
    assert rm.closed and engine.stopped
    rm.close()  # twice is harmless
    with pytest.raises(BackendError) as err:
        rm.score(items)
    assert str(err.value) == (f"This reward-model verifier ({small_tokenizer_dir}) was closed. Create a new "
                              "RMVerifier to score again.")


def test_in_process_a_token_level_head_reads_the_last_tokens_row(small_tokenizer_dir, monkeypatch):
    rm, engine, _ = _in_process(monkeypatch, small_tokenizer_dir,
                                lambda ids: [[0.01 * (j % 50)] for j in range(len(ids))], adapter="qwen2.5-math-rm")
    [score] = rm.score([_item(STEPS)])
    n = len(rm.encode(_item(STEPS)))
    assert engine.calls[0][1] == "token_classify" and score.score == pytest.approx(0.01 * ((n - 1) % 50))


def test_in_process_an_item_longer_than_the_engine_takes_is_refused(small_tokenizer_dir, monkeypatch):
    rm, engine, _ = _in_process(monkeypatch, small_tokenizer_dir, lambda ids: [0.5, 0.5], max_model_len=64)
    long_item = _item(tuple(f"Step {i}: add one more apple to the basket." for i in range(12)), "long")
    n = len(rm.encode(long_item))
    assert n > 64 and len(rm.encode(_item(STEPS[:1]))) <= 64
    with pytest.raises(BackendError) as err:
        rm.score([_item(STEPS[:1]), long_item])
    assert str(err.value) == (f"RM item 1 (problem long) renders to {n} tokens, above max_model_len=64. "
                              "Raise max_model_len.")
    assert engine.calls == []
    fits, engine, _ = _in_process(monkeypatch, small_tokenizer_dir, lambda ids: [0.25, 0.75], max_model_len=n)
    assert [s.score for s in fits.score([long_item])] == [0.75] and len(engine.calls) == 1  # exactly n tokens fit


def test_a_head_that_answers_something_else_is_a_clear_error(small_tokenizer_dir, monkeypatch, server):
    rm, _, _ = _in_process(monkeypatch, small_tokenizer_dir, lambda ids: [0.75], adapter={"positive_index": 2})
    with pytest.raises(BackendError) as err:
        rm.score([_item(STEPS[:1])])
    assert str(err.value) == ("The reward model returned [0.75] for item 0; expected a vector of class probabilities "
                              "with column 2 (adapter 'custom', head classify). Check the adapter's head and "
                              "positive_index.")
    srv = server(lambda body: (200, {"data": [{"index": 0, "data": [0.25, 0.75]}]}, {}))
    with _rm(small_tokenizer_dir, srv.base_url, adapter={"positive_index": 2}) as remote, \
            pytest.raises(BackendError) as err:
        remote.score([_item(STEPS[:1])])
    assert str(err.value) == ("The reward model returned [0.25, 0.75] for item 0; expected a vector of class "
                              "probabilities with column 2 (adapter 'custom', head classify). Check the adapter's "
                              "head and positive_index, and the server's --pooler-config task.")


@pytest.mark.parametrize(("adapter", "rows", "data", "column"), [
    ("chat", [[0.75]], "[[0.75]]", 0),  # a sequence head answering per token: rows, not one vector
    ("chat", [], "[]", 1),
    ("qwen2.5-math-rm", [], "[]", 1),
    ({"positive_index": 40}, [0.25] * 30, str([0.25] * 30)[:80], 40),  # the reply is shown cut at 80 characters
])
def test_in_process_an_output_that_is_not_a_vector_with_the_column_is_refused(
        small_tokenizer_dir, monkeypatch, adapter, rows, data, column):
    rm, _, _ = _in_process(monkeypatch, small_tokenizer_dir, lambda ids: rows, adapter=adapter)
    with pytest.raises(BackendError) as err:
        rm.score([_item(STEPS[:1])])
    name, head = (adapter, rm.config.adapter.head) if isinstance(adapter, str) else ("custom", "classify")
    assert str(err.value) == (f"The reward model returned {data} for item 0; expected a vector of class probabilities "
                              f"with column {column} (adapter {name!r}, head {head}). Check the adapter's head and "
                              "positive_index.")


def test_in_process_a_token_level_head_of_one_row_per_prompt_reads_that_row(small_tokenizer_dir, monkeypatch):
    rm, _, _ = _in_process(monkeypatch, small_tokenizer_dir, lambda ids: [0.25, 0.75], adapter="qwen2.5-math-rm")
    assert [s.score for s in rm.score([_item(STEPS[:1])])] == [0.75]


def test_a_score_outside_zero_to_one_is_counted_invalid(small_tokenizer_dir, monkeypatch):
    rm, _, _ = _in_process(monkeypatch, small_tokenizer_dir, lambda ids: [0.5, 1.5])
    [score] = rm.score([_item(STEPS[:1])])
    assert (score.score, score.invalid) == (0.0, 1)


def test_the_remote_tokenizer_is_the_backends_or_the_served_name(small_tokenizer_dir, server):
    srv = server(lambda body: (200, {"data": []}, {}))
    rm = RMVerifier(RMVerifierConfig(model=str(small_tokenizer_dir), backend={"kind": "openai",
                                                                               "base_url": srv.base_url}))
    assert rm.remote and rm.priced_model == str(small_tokenizer_dir) and rm.on_gpu is False
    assert LOADS == [(str(small_tokenizer_dir), True)]  # no backend tokenizer: the served name, a local directory
    assert repr(rm) == f"RMVerifier({str(small_tokenizer_dir)!r}, 'chat', {srv.base_url})"
    rm.close()
    assert rm.closed
    with _rm(small_tokenizer_dir, srv.base_url) as named:
        assert named.priced_model == str(small_tokenizer_dir) and not named.closed


def test_the_math_rm_adapter_writes_its_system_prompt_and_the_steps_as_given(small_tokenizer_dir, server):
    srv = server(lambda body: (200, {"data": []}, {}))
    with _rm(small_tokenizer_dir, srv.base_url, adapter="qwen2.5-math-rm") as rm:
        text = rm.tokenizer.decode(rm.encode(_item(STEPS[:2])))
    assert "Please reason step by step, and put your final answer within \\boxed{}." in text
    assert "Tom starts with 3 apples.\n\nHe buys 4 more apples." in text
    with _rm(small_tokenizer_dir, srv.base_url, adapter={"template": "Q: {question}\nA: {solution}",
                                                         "step_separator": " | "}) as rm:
        assert rm.tokenizer.decode(rm.encode(_item(STEPS[:2]))).endswith(
            f"Q: {QUESTION}\nA: Tom starts with 3 apples. | He buys 4 more apples.")


def test_get_rm_adapter_takes_an_adapter_a_name_or_fields():
    own = RMAdapter(name="mine", head="last_token", positive_index=0)
    assert get_rm_adapter(own) is own and get_rm_adapter("chat") is RM_ADAPTERS["chat"]
    assert get_rm_adapter({"name": "mine", "head": "last_token", "positive_index": 0}) == own
    assert RM_ADAPTERS["qwen2.5-math-rm"].head == "last_token" and RM_ADAPTERS["chat"].template is None
    assert own.pooler_settings() == {"runner": "pooling", "pooler_config": {"task": "token_classify"}}
    with pytest.raises(ValueError) as err:
        get_rm_adapter("skywork")
    assert str(err.value) == ("unknown reward-model adapter 'skywork'; choose one of chat, qwen2.5-math-rm or give one "
                              "inline (head, template, system, step_separator, positive_index)")


def test_the_chat_template_failing_names_the_adapter():
    from tts.verifiers.prm_adapters import AdapterError

    class NoChatTemplate:
        def apply_chat_template(self, *args, **kwargs):
            raise ValueError("no chat template")

    with pytest.raises(AdapterError, match=r"^Adapter 'mine' uses the tokenizer's chat template"):
        RMAdapter(name="mine").render(QUESTION, STEPS, NoChatTemplate())


def test_special_tokens_are_added_for_a_template_string_and_never_to_a_chat_rendered_prompt(
        small_tokenizer_dir, monkeypatch):
    """A chat template writes the model's special tokens itself: adding them again would double a BOS."""

    class Recording:
        def __init__(self, inner):
            self.inner, self.calls = inner, []

        def apply_chat_template(self, *args, **kwargs):
            return self.inner.apply_chat_template(*args, **kwargs)

        def __call__(self, text, **kwargs):
            self.calls.append(kwargs)
            return self.inner(text, **kwargs)

    rm, _, _ = _in_process(monkeypatch, small_tokenizer_dir, lambda ids: [0.5, 0.5])
    rm._tokenizer = Recording(rm.tokenizer)
    rm.encode(_item(STEPS))
    rm.config = rm.config.model_copy(update={"adapter": RMAdapter(template="{question} {solution}")})
    rm.encode(_item(STEPS))
    assert rm._tokenizer.calls == [{"add_special_tokens": False}, {"add_special_tokens": True}]


def test_built_from_its_config_and_the_engine_closed_as_it_was_started(small_tokenizer_dir, monkeypatch):
    import tts.backends.vllm as vllm_backend

    _, engine, _ = _in_process(monkeypatch, small_tokenizer_dir, lambda ids: [0.5, 0.5], gpu=True)
    config = RMVerifierConfig(model=str(small_tokenizer_dir))
    rm = RMVerifier.from_config(config, object())
    assert rm.config is config and rm.on_gpu
    closed = []
    monkeypatch.setattr(vllm_backend, "close_engine", lambda owner, attribute, on_gpu: closed.append(
        (owner, attribute, on_gpu)))
    rm.close()
    assert closed == [(rm, "_llm", True)]
