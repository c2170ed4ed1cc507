"""The PRM verifier's parts, fast: the config, rendering and tag location, the engine's settings, the
scores read from the engine's rows, and every message a user reads.

Nothing here builds a model: the tokenizers are the embedded small model's with the step tag added
(saved once per module, with a config.json and no weights), the engine is a fake that records its
arguments and answers with rows worked out from the prompt's ids, the server is the fake pooling
server of tests/verifiers/test_prm_remote.py, and the messages' tokenizers are hand-made fakes.
"""

from __future__ import annotations

import atexit
import json
import math
import shutil
import tempfile
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from tests.verifiers.conftest import TINY, _small_tokenizer
from tests.verifiers.test_prm_remote import QUESTION, STEPS, _item, server  # noqa: F401  (server: the fixture)
from tts.backends.base import BackendError
from tts.config import parse_verifier_config
from tts.types import Usage
from tts.verifiers import prm as prm_module
from tts.verifiers.prm import PRMVerifier, PRMVerifierConfig, encode_item
from tts.verifiers.prm_adapters import (
    ADAPTERS,
    SAL_SYSTEM_PROMPT,
    AdapterError,
    PRMAdapter,
    ResolvedAdapter,
    check_prompt_template,
    get_adapter,
    pooler_server_args,
    pooler_settings,
    resolve_adapter,
    wrap_prompt,
)

TAG = "<extra_0>"


_DIRS: dict[str, Path] = {}


def _saved(kind: str) -> Path:
    """Save a tokenizer (and a config.json without weights) once per process, in a folder of its own.

    A module-level cache rather than a module-scoped fixture: mutmut runs the tests of each mutant
    in a fork of one process that already ran them, so a folder made once (and the tokenizers read
    from it, kept in ``_CACHE``) serves every mutant instead of being rebuilt for each."""
    if kind in _DIRS and _DIRS[kind].is_dir():
        return _DIRS[kind]
    from transformers import LlamaConfig, Qwen2Config

    out = Path(tempfile.mkdtemp(prefix=f"tts-{kind}-"))
    atexit.register(shutil.rmtree, out, True)
    if kind == "prm":  # <extra_0> as a special token, a Qwen2 PRM's config
        tokenizer = _small_tokenizer(TAG, special=True)
        config = Qwen2Config(vocab_size=len(tokenizer), architectures=["Qwen2ForProcessRewardModel"], num_labels=2,
                             **TINY)
    else:  # "ки" added, a Llama causal LM's config
        tokenizer = _small_tokenizer("ки", special=False)
        config = LlamaConfig(vocab_size=len(tokenizer), architectures=["LlamaForCausalLM"], **TINY)
    tokenizer.save_pretrained(out)
    config.save_pretrained(out)
    _DIRS[kind] = out
    return out


@pytest.fixture
def prm_dir() -> Path:
    """The small model's tokenizer with <extra_0> as a special token, and a Qwen2 PRM config.json (no weights)."""
    return _saved("prm")


@pytest.fixture
def label_dir() -> Path:
    """The small model's tokenizer with "ки" added, and a Llama causal-LM config.json (no weights)."""
    return _saved("label")


REAL_LOAD = prm_module._load_tokenizer
LOADS: list[tuple[str, bool]] = []


@pytest.fixture(autouse=True)
def _tokenizer_loaded_once(monkeypatch):
    """Load each tokenizer once per module; LOADS keeps the arguments the verifier gave."""
    LOADS.clear()
    monkeypatch.setattr(prm_module, "_load_tokenizer", lambda path, local: LOADS.append((path, local)) or
                        _cached(path, bool(local)))


_CACHE: dict[tuple[str, bool], Any] = {}


def _cached(path: str, local: bool) -> Any:
    if (path, local) not in _CACHE:
        _CACHE[(path, local)] = REAL_LOAD(path, local)
    return _CACHE[(path, local)]


def _tag_id(prm_dir: Path) -> int:
    return _cached(str(prm_dir), True).convert_tokens_to_ids(TAG)


# --- the engine: a fake that records its arguments --------------------------------------------------


class FakeEngine:
    """A ``vllm.LLM`` pooling engine: ``rows(ids)`` is a prompt's pooled output; calls are kept."""

    def __init__(self, rows, cached: Any = None):
        self.rows, self.cached = rows, cached
        self.calls: list[tuple[list[list[int]], str, bool]] = []

    def encode(self, prompts, pooling_task, use_tqdm):
        import torch

        ids = [list(p["prompt_token_ids"]) for p in prompts]
        self.calls.append((ids, pooling_task, use_tqdm))
        return [SimpleNamespace(outputs=SimpleNamespace(data=torch.tensor(self.rows(i), dtype=torch.float64)),
                                **({} if self.cached is None else {"num_cached_tokens": self.cached(i)}))
                for i in ids]


def _in_process(monkeypatch, model_dir, rows, gpu=False, cached=None, **config: Any):
    import tts.backends.vllm as vllm_backend

    engine, started = FakeEngine(rows, cached), []
    monkeypatch.setattr(vllm_backend, "cuda_available", lambda: gpu)
    monkeypatch.setattr(vllm_backend, "launch_engine", lambda kwargs, **kw: started.append((kwargs, kw)) or engine)
    return PRMVerifier(PRMVerifierConfig(model=str(model_dir), **config)), engine, started


def _tag_rows(tag_id: int, width: int = 2):
    """Rows at every tag of a prompt: P(good) = (position + 1) / 1000 in column 1 (and in the others, 0.25)."""
    def rows(ids):
        return [[((j + 1) / 1000 if c == 1 else 0.25) for c in range(width)]
                for j, t in enumerate(ids) if t == tag_id]
    return rows


def test_defaults_of_the_prm_config_and_its_bounds():
    cfg = PRMVerifierConfig()
    assert (cfg.kind, cfg.model, cfg.max_model_len, cfg.kv_cache_gib, cfg.dtype, cfg.gpu_memory_utilization) == \
        ("prm", "Qwen/Qwen2.5-Math-PRM-7B", 4096, None, "auto", 0.3)
    assert cfg.backend.kind == "vllm" and cfg.adapter is ADAPTERS["qwen2.5-math-prm"]
    assert PRMVerifierConfig(max_model_len=64, kv_cache_gib=1, gpu_memory_utilization=1.0).max_model_len == 64
    for bad in ({"max_model_len": 63}, {"kv_cache_gib": 0}, {"gpu_memory_utilization": 0.0},
                {"gpu_memory_utilization": 1.01}, {"model": ""}):
        with pytest.raises(ValueError):
            PRMVerifierConfig(**bad)
    assert (PRMVerifier.name, PRMVerifier.keep_warm, PRMVerifier.step_verifier) == ("prm", True, True)


def test_engine_settings_with_a_server_are_refused_by_name_in_their_order():
    with pytest.raises(ValueError) as err:
        PRMVerifierConfig(backend={"kind": "openai"}, gpu_memory_utilization=0.5)
    assert ("gpu_memory_utilization sets up the in-process engine, but backend is a server (kind openai), which has "
            "its own; remove them (set them on the vLLM server's command line)") in str(err.value)
    with pytest.raises(ValueError) as err:
        PRMVerifierConfig(max_model_len=128, dtype="float32", backend={"kind": "openai"})
    assert "dtype, max_model_len set up the in-process engine" in str(err.value)
    # In process, the same fields are the engine's.
    assert PRMVerifierConfig(max_model_len=128, dtype="float32", kv_cache_gib=2).dtype == "float32"


# --- adapters ---------------------------------------------------------------------------------------


def test_render_solution_places_each_tag_and_reports_its_span():
    card = PRMAdapter(head="lm_labels", step_tag="ки", step_separator="\n",
                      step_template="Step {index}: {step} {tag}", good_label="+", bad_label="-")
    text, spans = card.render_solution(("a", "bb"))
    assert text == "Step 1: a ки\nStep 2: bb ки" and spans == [(10, 12), (24, 26)]
    # Text after the tag and a separator of more than one character: the spans stay on the tag.
    tail = PRMAdapter(head="token_classify", step_tag="T", step_separator="||",
                      step_template="[{index}] {step} {tag} end")
    text, spans = tail.render_solution(("x", "y", "z"))
    assert text == "[1] x T end||[2] y T end||[3] z T end"
    assert spans == [(6, 7), (19, 20), (32, 33)] and {text[a:b] for a, b in spans} == {"T"}
    # A step that writes the tag itself: the span is the one the template adds.
    text, spans = tail.render_solution(("T T",))
    assert text == "[1] T T T end" and spans == [(8, 9)]
    assert tail.render_solution(()) == ("", [])


def test_render_with_a_template_string_shifts_the_spans_and_adds_special_tokens():
    adapter = PRMAdapter(head="token_classify", step_tag="<t>", template="S:{system}|Q:{question}|A:{solution}",
                         system="sys")
    text, spans, special = adapter.render("q?", ("a", "b"), tokenizer=None)
    assert text == "S:sys|Q:q?|A:a<t>b<t>" and spans == [(14, 17), (18, 21)] and special is True
    # A question holding the braces of a field is text, not a field.
    text, spans, _ = adapter.render("{solution}?", ("a",), tokenizer=None)
    assert text == "S:sys|Q:{solution}?|A:a<t>" and text[spans[0][0]:spans[0][1]] == "<t>"


class ChatTokenizer:
    """A chat template as a function: ``<s>`` then ``[role]content;`` per message; calls are kept."""

    def __init__(self, render=None):
        self.calls: list[tuple[list[dict[str, str]], dict[str, Any]]] = []
        self.render = render

    def apply_chat_template(self, messages, **kwargs):
        self.calls.append((messages, kwargs))
        if self.render is not None:
            return self.render(messages)
        return "<s>" + "".join(f"[{m['role']}]{m['content']};" for m in messages)


def test_a_chat_template_gets_system_user_and_assistant_and_the_solution_verbatim():
    tok = ChatTokenizer()
    text, start, special = wrap_prompt("mine", None, "be brief", "q?", "a<t>", tok)
    assert text == "<s>[system]be brief;[user]q?;[assistant]a<t>;" and start == 40 and special is False
    assert text[start:start + 4] == "a<t>"
    assert tok.calls[0][1] == {"tokenize": False, "add_generation_prompt": False}
    text, start, _ = wrap_prompt("mine", None, "", "q?", "a<t>", tok)  # no system: no system message
    assert text == "<s>[user]q?;[assistant]a<t>;" and start == 23
    assert [m["role"] for m in tok.calls[1][0]] == ["user", "assistant"]
    adapter = PRMAdapter(head="token_classify", step_tag="<t>", template=None, system="be brief")
    text, spans, special = adapter.render("q?", ("a", "b"), ChatTokenizer())
    assert text == "<s>[system]be brief;[user]q?;[assistant]a<t>b<t>;" and spans == [(41, 44), (45, 48)]
    assert special is False


@pytest.mark.parametrize("render", [lambda m: "<s>dropped", lambda m: "<s>" + m[-1]["content"] * 2])
def test_a_chat_template_that_does_not_keep_the_solution_once_is_refused(render):
    with pytest.raises(AdapterError) as err:
        wrap_prompt("mine", None, "", "q?", "a<t>", ChatTokenizer(render))
    assert str(err.value) == ("Adapter 'mine': the tokenizer's chat template does not keep the assistant message "
                              "verbatim; give the adapter a template string instead.")


def test_a_failing_chat_template_is_named_with_its_error():
    def broken(messages):
        raise ValueError("no template")

    with pytest.raises(AdapterError) as err:
        wrap_prompt("mine", None, "", "q?", "a", ChatTokenizer(broken))
    assert str(err.value) == ("Adapter 'mine' uses the tokenizer's chat template (template: null), which failed: no "
                              "template. Give the adapter a template string with {question} and {solution}.")
    with pytest.raises(AdapterError, match=r"^Adapter 'named' uses the tokenizer's chat template"):
        PRMAdapter(name="named", head="token_classify", step_tag="<t>").render("q?", ("a",), ChatTokenizer(broken))


def test_prompt_templates_need_question_and_solution_and_nothing_but_system():
    check_prompt_template(None)
    check_prompt_template("{system}{question}{solution}")
    check_prompt_template("{{literal}} {question} {solution}")
    for bad in ("{question}", "{solution}", "{question}{solution}{answer}", "{solution}{answer}"):
        with pytest.raises(ValueError) as err:
            check_prompt_template(bad)
        assert str(err.value) == (f"template {bad!r} must hold {{question}} and {{solution}} (and may hold "
                                  "{system}); or set template to null to use the tokenizer's chat template")
    # The solution twice: refused (it rendered the second copy as tts's internal marker, NUL bytes
    # and all, into the prompt the PRM read).
    for twice in ("{question}\n{solution}\nAgain: {solution}", "{solution}{question}{solution}{solution}"):
        with pytest.raises(ValueError) as err:
            check_prompt_template(twice)
        assert str(err.value) == (f"template {twice!r} holds {{solution}} {twice.count('{solution}')} times; write "
                                  "it once (each step is scored at its tag in the one solution)")
    check_prompt_template("{question} {question} {system} {system} {solution}")  # the others may repeat
    with pytest.raises(ValueError) as err:
        check_prompt_template("{question")
    assert str(err.value) == ("template '{question' is not a valid format string (expected '}' before end of "
                              "string); write literal braces as {{ and }}")


def test_an_adapters_fields_are_checked_with_messages_that_say_what_to_change():
    def refused(**fields):
        with pytest.raises(ValueError) as err:
            PRMAdapter(**fields)
        return str(err.value)

    for template in ("{step}{step}{tag}", "{step}{tag}{tag}", "{step}{tag}{other}", "{tag}"):
        assert ("must hold {step} and {tag} exactly once and nothing else but {index}, e.g. "
                "'Step {index}: {step} {tag}'") in refused(head="token_classify", step_tag="<t>",
                                                            step_template=template)
    assert PRMAdapter(head="token_classify", step_tag="<t>", step_template="{index}. {step}{tag}").name == "custom"
    assert "must hold {question} and {solution}" in refused(head="token_classify", step_tag="<t>",
                                                            template="{question}")
    for labels in ({"good_label": "+"}, {"bad_label": "-"}):
        assert ("good_label/bad_label are read only by head lm_labels; remove them or set head: lm_labels"
                in refused(head="token_classify", step_tag="<t>", **labels))
        assert ("head lm_labels needs good_label and bad_label (the tokens predicted at the tag, e.g. '+' and '-')"
                in refused(head="lm_labels", step_tag="<t>", **labels))
    assert "good_label and bad_label are both '+'; give two different tokens" in refused(
        head="lm_labels", step_tag="<t>", good_label="+", bad_label="+")
    assert "positive_index is read only by head token_classify; remove it for lm_labels" in refused(
        head="lm_labels", step_tag="<t>", good_label="+", bad_label="-", positive_index=0)
    refused(head="token_classify", step_tag="")
    refused(head="token_classify", step_tag="<t>", positive_index=-1)
    refused(head="token_classify", step_tag="<t>", extra=1)
    plain = PRMAdapter(head="token_classify", step_tag="<t>")
    assert (plain.name, plain.step_separator, plain.step_template, plain.template, plain.system) == \
        ("custom", "", "{step}{tag}", None, "")
    assert (plain.positive_index, plain.good_label, plain.bad_label, plain.positive_class) == (None, None, None, 1)
    assert PRMAdapter(head="token_classify", step_tag="<t>", positive_index=0).positive_class == 0
    assert PRMAdapter(head="token_classify", step_tag="<t>", positive_index=3).positive_class == 3


def test_the_shipped_adapters_are_the_references_layouts():
    qwen, shepherd, card = ADAPTERS["qwen2.5-math-prm"], ADAPTERS["math-shepherd"], ADAPTERS["math-shepherd-card"]
    assert (qwen.name, qwen.head, qwen.step_tag, qwen.step_separator, qwen.step_template, qwen.positive_class) == \
        ("qwen2.5-math-prm", "token_classify", "<extra_0>", "", "{step}{tag}", 1)
    assert qwen.render("Q?", ("a", "b"), None)[0] == (
        "<|im_start|>system\nPlease reason step by step, and put your final answer within \\boxed{}.<|im_end|>\n"
        "<|im_start|>user\nQ?<|im_end|>\n<|im_start|>assistant\na<extra_0>b<extra_0><|im_end|>\n")
    assert (shepherd.name, shepherd.head, shepherd.good_label, shepherd.bad_label) == \
        ("math-shepherd", "lm_labels", "+", "-")
    assert shepherd.render("Q?", ("a", "b"), None)[0] == SAL_SYSTEM_PROMPT + "\nQ?\n a ки\n\nb ки"
    assert SAL_SYSTEM_PROMPT.startswith("Solve the following math problem efficiently and clearly:\n\n")
    assert SAL_SYSTEM_PROMPT.endswith("Where [answer] is just the final number or expression that solves the problem.")
    assert "Therefore, the final answer is: $\\boxed{answer}$. I hope it is correct.\n\n" in SAL_SYSTEM_PROMPT
    assert (card.name, card.head, card.system, card.good_label, card.bad_label) == \
        ("math-shepherd-card", "lm_labels", "", "+", "-")
    assert card.render("Q?", ("a", "b"), None)[0] == "Q? Step 1: a ки\nStep 2: b ки"


def test_get_adapter_takes_an_adapter_a_name_or_fields():
    own = PRMAdapter(name="mine", head="token_classify", step_tag="<t>")
    assert get_adapter(own) is own and get_adapter("math-shepherd") is ADAPTERS["math-shepherd"]
    assert get_adapter({"name": "mine", "head": "token_classify", "step_tag": "<t>"}) == own
    with pytest.raises(ValueError) as err:
        get_adapter("qwen-prm")
    assert str(err.value) == ("unknown PRM adapter 'qwen-prm'; choose one of math-shepherd, math-shepherd-card, "
                              "qwen2.5-math-prm or give one inline (head, step_tag, step_template, template, ...)")


class PieceTokenizer:
    """Splits on spaces; each word one id (its position in VOCAB + 10), decoded back to the word."""

    VOCAB = ["<t>", "+", "-", "good", "step", "<s", "t>"]

    def encode(self, text, add_special_tokens=True):
        assert add_special_tokens is False
        return [self.VOCAB.index(w) + 10 for w in text.split(" ") if w]

    def decode(self, ids):
        return " ".join(self.VOCAB[i - 10] for i in ids)

    def convert_ids_to_tokens(self, ids):
        return [f"tok{i}" for i in ids]


def test_resolving_looks_up_the_tag_and_the_labels_and_names_what_is_not_one_token():
    tok = PieceTokenizer()
    assert resolve_adapter(PRMAdapter(head="token_classify", step_tag="<t>"), tok) == \
        ResolvedAdapter(PRMAdapter(head="token_classify", step_tag="<t>"), 10, None, None)
    labels = PRMAdapter(name="lab", head="lm_labels", step_tag="<t>", good_label="+", bad_label="-")
    assert resolve_adapter(labels, tok) == ResolvedAdapter(labels, 10, 11, 12)
    with pytest.raises(AdapterError) as err:
        resolve_adapter(labels.model_copy(update={"step_tag": "<s t>"}), tok, "m/x")
    assert str(err.value) == (
        "PRM adapter 'lab': the step tag '<s t>' is not one token of the tokenizer of m/x; it tokenises to 2 tokens "
        "['<s', 't>'] (ids [15, 16]). Set adapter step_tag to a single token of this tokenizer, add it to the "
        "tokenizer as a special token (as Qwen2.5-Math-PRM has <extra_0>), or use the adapter of this model's "
        "family (math-shepherd, math-shepherd-card, qwen2.5-math-prm).")
    with pytest.raises(AdapterError) as err:
        resolve_adapter(labels.model_copy(update={"bad_label": "good step"}), tok)
    assert str(err.value) == (
        "PRM adapter 'lab': the bad label 'good step' is not one token of the tokenizer of the model; it tokenises "
        "to 2 tokens ['good', 'step'] (ids [13, 14]). Set adapter bad_label to a single token of this tokenizer, or "
        "use the adapter of this model's family (math-shepherd, math-shepherd-card, qwen2.5-math-prm).")
    for field in ("good_label", "bad_label"):  # an empty label is no token at all
        with pytest.raises(AdapterError) as err:
            resolve_adapter(labels.model_copy(update={field: ""}), tok)
        what = field.replace("_", " ")
        assert str(err.value).startswith(f"PRM adapter 'lab': the {what} '' is not one token of the tokenizer of the "
                                         f"model; it tokenises to 0 tokens [] (ids []). Set adapter {field} to a")
    with pytest.raises(AdapterError, match=r"the good label 'good step' is not one token of the tokenizer of m/y; "
                       r".* Set adapter good_label to"):
        resolve_adapter(labels.model_copy(update={"good_label": "good step"}), tok, "m/y")


def test_the_pooler_settings_read_the_tag_and_for_labels_build_the_head_from_bad_then_good():
    tok = PieceTokenizer()
    plain = resolve_adapter(PRMAdapter(head="token_classify", step_tag="<t>"), tok)
    assert pooler_settings(plain, tok) == {
        "runner": "pooling", "pooler_config": {"task": "token_classify", "tok_pooling_type": "STEP", "step_tag_id": 10}}
    labels = resolve_adapter(PRMAdapter(head="lm_labels", step_tag="<t>", good_label="+", bad_label="-"), tok)
    settings = pooler_settings(labels, tok)
    assert settings == {
        "runner": "pooling", "pooler_config": {"task": "token_classify", "tok_pooling_type": "STEP", "step_tag_id": 10},
        "convert": "classify",
        "hf_overrides": {"classifier_from_token": ["tok12", "tok11"], "method": "from_2_way_softmax"}}
    assert pooler_server_args(settings) == [
        "--runner", "pooling",
        "--pooler-config", '{"task": "token_classify", "tok_pooling_type": "STEP", "step_tag_id": 10}',
        "--convert", "classify",
        "--hf-overrides", '{"classifier_from_token": ["tok12", "tok11"], "method": "from_2_way_softmax"}']
    assert json.loads(pooler_server_args(settings)[7])["method"] == "from_2_way_softmax"


# --- locating each step's tag in the tokens ---------------------------------------------------------


class CharTokenizer:
    """One token per character (id = its code point), offsets per character, except that "T!" is one
    token (id 999): a tag followed by "!" merges with it. ``is_fast`` as given; calls are kept."""

    def __init__(self, fast=True):
        self.is_fast = fast
        self.calls: list[dict[str, Any]] = []

    def __call__(self, text, **kwargs):
        self.calls.append(kwargs)
        ids, offsets, i = [], [], 0
        while i < len(text):
            if text.startswith("T!", i):
                ids.append(999), offsets.append((i, i + 2))
                i += 2
            else:
                ids.append(ord(text[i])), offsets.append((i, i + 1))
                i += 1
        return {"input_ids": ids, **({"offset_mapping": offsets} if kwargs.get("return_offsets_mapping") else {})}

    def convert_ids_to_tokens(self, ids):
        return ["T!" if i == 999 else chr(i) for i in ids]

    def apply_chat_template(self, messages, tokenize, add_generation_prompt):
        return "".join(f"<{m['role']}>{m['content']}" for m in messages)


def _resolved(template: str = "{question}|{solution}", **fields) -> ResolvedAdapter:
    adapter = PRMAdapter(name="chars", head="token_classify", step_tag="T", template=template, **fields)
    return ResolvedAdapter(adapter, ord("T"))


def test_each_step_reads_the_row_of_its_own_tag_when_a_step_writes_the_tag_too():
    tok = CharTokenizer()
    ids, rows = encode_item(_resolved(step_separator=" "), tok, "Q", ("aTb", "c", "dT"))
    assert ids == [ord(c) for c in "Q|aTbT cT dTT"] and rows == [1, 2, 4]
    assert tok.calls == [{"add_special_tokens": True, "return_offsets_mapping": True}]


def test_a_tag_that_merges_with_its_neighbour_is_refused_showing_the_tokens_around_it():
    tok = CharTokenizer()
    with pytest.raises(BackendError) as err:
        encode_item(_resolved(step_template="{step}{tag}!ABCDEFGHIJ"), tok, "Q", ("0123456789abcdefghij",))
    # The tag ends at 23; shown: tokens ending after 23 - 1 - 8 = 14 and starting before 31.
    assert str(err.value) == (
        "PRM adapter 'chars': the step tag 'T' after step 1 did not stay the single token 84 in context; there the "
        "text tokenises to ['c', 'd', 'e', 'f', 'g', 'h', 'i', 'j', 'T!', 'A', 'B', 'C', 'D', 'E', 'F', 'G']. Change "
        "the adapter's step_template so the tag stands apart from the step text (e.g. '{step} {tag}').")
    with pytest.raises(BackendError, match="after step 2 did not stay"):
        encode_item(_resolved(template="{question}|{solution}!"), tok, "Q", ("x", "y"))


def test_a_chat_template_adapter_is_rendered_by_the_tokenizer_it_is_given():
    tok = CharTokenizer()
    ids, rows = encode_item(_resolved(template=None, system="S"), tok, "Q", ("a", "b"))
    assert ids == [ord(c) for c in "<system>S<user>Q<assistant>aTbT"] and rows == [0, 1]
    assert tok.calls == [{"add_special_tokens": False, "return_offsets_mapping": True}]


def test_a_slow_tokenizer_needs_one_tag_per_step():
    tok = CharTokenizer(fast=False)
    ids, rows = encode_item(_resolved(), tok, "Q", ("a", "b", "c"))
    assert ids == [ord(c) for c in "Q|aTbTcT"] and rows == [0, 1, 2]
    assert tok.calls == [{"add_special_tokens": True}]
    with pytest.raises(BackendError) as err:
        encode_item(_resolved(), tok, "Q", ("aT", "b"))
    assert str(err.value) == (
        "PRM adapter 'chars': a solution of 2 steps rendered to 3 step-tag tokens ('T'); a step text holds the tag, "
        "or the tag merges with the text around it. Use the model's fast tokenizer (tokenizer.json), which locates "
        "each step's own tag.")


def test_a_tokenizer_without_is_fast_is_read_as_slow():
    class Bare:
        def __call__(self, text, **kwargs):
            assert "return_offsets_mapping" not in kwargs
            return {"input_ids": [ord(c) for c in text]}

    assert encode_item(_resolved(), Bare(), "Q", ("a",)) == ([ord(c) for c in "Q|aT"], [0])


# --- loading: the tokenizer and the architecture check ------------------------------------------------


def test_a_tokenizer_that_cannot_load_is_a_backend_error_naming_the_model(monkeypatch):
    import transformers

    seen = []

    def fail(path, local_files_only):
        seen.append((path, local_files_only))
        raise OSError("no tokenizer.json")

    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", fail)
    with pytest.raises(BackendError) as err:
        REAL_LOAD("org/prm", False)
    assert str(err.value) == ("Could not load the tokenizer of the PRM org/prm: no tokenizer.json. Check the model id "
                              "or directory (it needs the tokenizer files), and the network for a hub id.")
    assert seen == [("org/prm", False)]
    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained",
                        lambda path, local_files_only: seen.append((path, local_files_only)) or "tok")
    assert REAL_LOAD("/m", True) == "tok" and seen[-1] == ("/m", True)


@pytest.mark.parametrize(("archs", "head", "refused"), [
    (["Qwen2ForProcessRewardModel"], "token_classify", None),
    (["LlamaForCausalLM"], "lm_labels", None),
    (None, "lm_labels", None),  # no architectures: left to vLLM
    ([], "token_classify", None),
    (["Custom", "MistralForCausalLM"], "token_classify",
     "The PRM /m is a causal LM (Custom, MistralForCausalLM), but its adapter reads a token-classification head. Use "
     "an adapter with head lm_labels (and its good/bad label tokens, e.g. 'math-shepherd'), or a PRM with a "
     "classification head."),
    (["Qwen2ForProcessRewardModel", "Other"], "lm_labels",
     "The PRM /m is not a causal LM (Qwen2ForProcessRewardModel, Other), but its adapter reads label tokens from an "
     "LM head. Use an adapter with head token_classify (e.g. 'qwen2.5-math-prm')."),
])
def test_the_architecture_check_refuses_a_head_that_cannot_fit(monkeypatch, archs, head, refused):
    import transformers

    seen = []
    monkeypatch.setattr(transformers.AutoConfig, "from_pretrained", lambda path, local_files_only: seen.append(
        (path, local_files_only)) or SimpleNamespace(architectures=archs))
    if refused is None:
        prm_module._check_architecture("/m", True, head)
    else:
        with pytest.raises(BackendError) as err:
            prm_module._check_architecture("/m", True, head)
        assert str(err.value) == refused
    assert seen == [("/m", True)]


def test_a_config_that_cannot_be_read_leaves_the_check_to_vllm(monkeypatch):
    import transformers

    def fail(path, local_files_only):
        raise OSError("custom code")

    monkeypatch.setattr(transformers.AutoConfig, "from_pretrained", fail)
    assert prm_module._check_architecture("/m", False, "lm_labels") is None


# --- in process: the engine's settings and the scores read from its rows -------------------------------


def test_the_in_process_engine_gets_the_adapters_pooling_settings(prm_dir, label_dir, monkeypatch):
    prm, _, started = _in_process(monkeypatch, prm_dir, lambda ids: [], dtype="float32", max_model_len=1024,
                                  kv_cache_gib=3)
    ((kwargs, kw),) = started
    pooler = kwargs.pop("pooler_config")
    assert (pooler.task, pooler.tok_pooling_type, pooler.step_tag_id) == ("token_classify", "STEP", _tag_id(prm_dir))
    assert kwargs == {"runner": "pooling", "model": str(prm_dir), "dtype": "float32", "max_model_len": 1024}
    assert (kw["local_model"], kw["on_gpu"], kw["kv_cache_gib"], kw["what"]) == (True, False, 3, "PRM")
    assert kw["hint"] == ("Check that the model exists, that its adapter's head fits it, and that it fits in memory "
                          "(on CPU lower max_model_len or kv_cache_gib; close engines you no longer need).")
    assert LOADS == [(str(prm_dir), True)] and prm.model_path == prm.priced_model == str(prm_dir)
    assert prm.tokenizer is _cached(str(prm_dir), True) and not prm.remote
    assert prm.resolved.tag_id == _tag_id(prm_dir) and prm.on_gpu is False
    gpu, _, started = _in_process(monkeypatch, label_dir, lambda ids: [], gpu=True, adapter="math-shepherd-card",
                                  gpu_memory_utilization=0.6)
    ((kwargs, kw),) = started
    tok = gpu.tokenizer
    assert (kwargs["dtype"], kwargs["gpu_memory_utilization"], kw["on_gpu"], kw["kv_cache_gib"]) == \
        ("auto", 0.6, True, None)
    assert kwargs["convert"] == "classify" and kwargs["hf_overrides"] == {
        "classifier_from_token": ["-", "+"], "method": "from_2_way_softmax"}
    assert kwargs["pooler_config"].step_tag_id == tok.convert_tokens_to_ids("ки") and gpu.on_gpu


def test_loading_checks_the_adapter_and_the_architecture_of_the_model_it_reads(prm_dir, monkeypatch):
    checked = []
    real = prm_module._check_architecture
    monkeypatch.setattr(prm_module, "_check_architecture", lambda path, local, head: checked.append(
        (path, local, head)) or real(path, local, head))
    _in_process(monkeypatch, prm_dir, lambda ids: [])
    PRMVerifier(PRMVerifierConfig(model="served", backend={"kind": "openai", "tokenizer": str(prm_dir)})).close()
    assert checked == [(str(prm_dir), True, "token_classify")] * 2  # both read offline: a local directory
    # A tag that is not one token: the message names the model whose tokenizer was read.
    odd = {"head": "token_classify", "step_tag": "<no such tag>"}
    with pytest.raises(AdapterError, match=rf"is not one token of the tokenizer of {prm_dir}; "):
        _in_process(monkeypatch, prm_dir, lambda ids: [], adapter=odd)
    with pytest.raises(AdapterError, match=rf"is not one token of the tokenizer of {prm_dir}; "):
        PRMVerifier(PRMVerifierConfig(model="served", adapter=odd,
                                      backend={"kind": "openai", "tokenizer": str(prm_dir)}))


def test_a_head_that_cannot_fit_the_model_is_refused_before_the_engine_starts(label_dir, prm_dir, monkeypatch):
    with pytest.raises(BackendError, match=r"is a causal LM \(LlamaForCausalLM\)"):
        _in_process(monkeypatch, label_dir, lambda ids: [], adapter={"head": "token_classify", "step_tag": "ки"})
    with pytest.raises(BackendError, match=r"is a causal LM \(LlamaForCausalLM\)"):
        PRMVerifier(PRMVerifierConfig(model="served-prm", adapter={"head": "token_classify", "step_tag": "ки"},
                                      backend={"kind": "openai", "tokenizer": str(label_dir)}))
    with pytest.raises(BackendError, match=r"is not a causal LM \(Qwen2ForProcessRewardModel\)"):
        PRMVerifier(PRMVerifierConfig(model="served-prm", adapter={
            "head": "lm_labels", "step_tag": TAG, "good_label": "+", "bad_label": "-"},
            backend={"kind": "openai", "tokenizer": str(prm_dir)}))


def test_each_step_scores_the_good_class_at_its_own_tag_in_one_engine_call(prm_dir, monkeypatch):
    tag = _tag_id(prm_dir)
    prm, engine, _ = _in_process(monkeypatch, prm_dir, _tag_rows(tag), cached=lambda ids: 5)
    times = iter([10.0, 13.0])
    monkeypatch.setattr(prm_module, "time", SimpleNamespace(perf_counter=lambda: next(times)))
    items = [_item(STEPS[:2], "a"), _item((), "empty"), _item((f"I write {TAG} myself.", "So 7."), "b")]
    scores = prm.score(items)
    sent = [prm.encode(items[0]), prm.encode(items[2])]
    assert engine.calls == [([ids for ids, _ in sent], "token_classify", False)]
    for score, (ids, rows) in zip((scores[0], scores[2]), sent, strict=True):
        tags = [j for j, t in enumerate(ids) if t == tag]
        want = tuple((tags[r] + 1) / 1000 for r in rows)
        assert score.step_scores == pytest.approx(want) and score.score == pytest.approx(want[-1]) and len(want) == 2
        (shape,) = score.usage.shapes
        assert (shape.prompt_tokens, shape.cached_prompt_tokens, shape.completion_tokens, shape.batch_sequences,
                shape.model) == (len(ids), 5, (), 2, str(prm_dir))
        assert score.usage.calls == 1 and score.invalid == 0
    assert sent[1][1] == [1, 2]  # the tag in the step's text is not the step's
    text = prm.tokenizer.decode(sent[0][0])  # the item's question and steps, each step followed by its tag
    assert f"user\n{QUESTION}<|im_end|>" in text and f"{STEPS[0]}{TAG}{STEPS[1]}{TAG}<|im_end|>" in text
    # The engine call's 3 seconds, shared by prompt length.
    n0, n2 = len(sent[0][0]), len(sent[1][0])
    assert scores[0].usage.wall_seconds == pytest.approx(3.0 * n0 / (n0 + n2))
    assert scores[2].usage.wall_seconds == pytest.approx(3.0 * n2 / (n0 + n2))
    assert scores[1] == prm_module.VerifierScore((), 0.5, Usage())


def test_cached_tokens_the_engine_does_not_report_count_as_none(prm_dir, monkeypatch):
    tag = _tag_id(prm_dir)
    for cached in (None, lambda ids: None):
        prm, _, _ = _in_process(monkeypatch, prm_dir, _tag_rows(tag), cached=cached)
        [score] = prm.score([_item(STEPS[:1])])
        assert score.usage.cached_prompt_tokens == 0 and score.usage.shapes[0].cached_prompt_tokens == 0


def test_the_aggregation_the_column_and_invalid_scores(prm_dir, label_dir, monkeypatch):
    tag = _tag_id(prm_dir)
    values = iter([0.5, 0.25, 0.75])
    prm, _, _ = _in_process(monkeypatch, prm_dir, lambda ids: [[0.0, 0.0, next(values)] for t in ids if t == tag],
                            aggregation="min", adapter={"head": "token_classify", "step_tag": TAG, "positive_index": 2,
                                                        "template": "{question} {solution}"})
    [score] = prm.score([_item(STEPS[:3])])
    assert score.step_scores == (0.5, 0.25, 0.75) and score.score == 0.25
    bad = iter([1.5, 0.5, math.nan])
    prm, _, _ = _in_process(monkeypatch, prm_dir, lambda ids: [[0.0, next(bad)] for t in ids if t == tag],
                            aggregation="mean")
    [score] = prm.score([_item(STEPS[:3])])
    assert score.step_scores == (0.0, 0.5, 0.0) and score.invalid == 2 and score.score == pytest.approx(0.5 / 3)
    # lm_labels: vLLM's one-class head, column 0.
    label_tag = _cached(str(label_dir), True).convert_tokens_to_ids("ки")
    labels, _, _ = _in_process(monkeypatch, label_dir, lambda ids: [[0.125] for t in ids if t == label_tag],
                               adapter="math-shepherd")
    [score] = labels.score([_item(STEPS[:2])])
    assert score.step_scores == (0.125, 0.125)


def test_items_without_steps_alone_make_no_engine_call(prm_dir, monkeypatch):
    prm, engine, _ = _in_process(monkeypatch, prm_dir, lambda ids: [], aggregation="min")
    scores = prm.score([_item(()), _item(())])
    assert scores == [prm_module.VerifierScore((), 0.5, Usage())] * 2 and engine.calls == []
    assert prm.score([]) == []


def test_an_item_longer_than_max_model_len_is_refused_naming_it_and_exactly_the_limit_fits(prm_dir, monkeypatch):
    tag = _tag_id(prm_dir)
    long_item = _item(tuple(f"Step {i}: add one more apple to the basket." for i in range(12)), "long")
    prm, engine, _ = _in_process(monkeypatch, prm_dir, _tag_rows(tag), max_model_len=64)
    n = len(prm.encode(long_item)[0])
    assert n > 64
    with pytest.raises(BackendError) as err:
        prm.score([_item(()), long_item])
    assert str(err.value) == (f"PRM item 1 (problem long) renders to {n} tokens, above max_model_len=64 of the "
                              "verifier config. Raise max_model_len.")
    assert engine.calls == []
    fits, engine, _ = _in_process(monkeypatch, prm_dir, _tag_rows(tag), max_model_len=n)
    assert len(fits.score([long_item])[0].step_scores) == 12 and len(engine.calls) == 1


@pytest.mark.parametrize(("rows", "widths"), [
    (lambda tags: [[0.5, 0.5]] * (tags - 1), "[2]"),  # a row short
    (lambda tags: [[0.5, 0.5]] * (tags + 1), "[2]"),  # a row too many
    (lambda tags: [[0.5]] * tags, "[1]"),  # no column 1
])
def test_rows_that_do_not_fit_the_tags_are_a_clear_error(prm_dir, monkeypatch, rows, widths):
    tag = _tag_id(prm_dir)
    prm, _, _ = _in_process(monkeypatch, prm_dir, lambda ids: rows(sum(t == tag for t in ids)))
    with pytest.raises(BackendError) as err:
        prm.score([_item(()), _item(STEPS[:2])])
    n_rows = len(rows(2))
    assert str(err.value) == (
        f"The PRM engine returned {n_rows} score rows of width {widths} for item 1, which has 2 step tags; expected 2 "
        "rows of more than 1 columns. Check that the adapter ('qwen2.5-math-prm') is the one of this model.")


def test_an_engine_answering_one_number_per_tag_instead_of_rows_is_refused(prm_dir, monkeypatch):
    tag = _tag_id(prm_dir)
    prm, _, _ = _in_process(monkeypatch, prm_dir, lambda ids: [0.5 for t in ids if t == tag])
    with pytest.raises(BackendError) as err:
        prm.score([_item(STEPS[:2])])
    assert str(err.value).startswith("The PRM engine returned 2 score rows of width [0] for item 0, which has 2 step "
                                     "tags; expected 2 rows of more than 1 columns.")


def test_rows_of_two_widths_are_refused_on_a_server(prm_dir, server):
    srv = server(lambda body: (200, {"data": [{"index": 0, "data": [[0.5], [0.5, 0.5]]}]}, {}))
    with PRMVerifier(PRMVerifierConfig(model="served", backend={"kind": "openai", "base_url": srv.base_url,
                                                                "tokenizer": str(prm_dir)})) as prm:
        with pytest.raises(BackendError) as err:
            prm.score([_item(STEPS[:2])])
    assert str(err.value) == (
        "The PRM server returned 2 score rows of width [1, 2] for item 0, which has 2 step tags; expected 2 rows of "
        "more than 1 columns. Check that the adapter ('qwen2.5-math-prm') is the one of this model and that the "
        "server runs it with the adapter's pooler flags.")


def test_closing_the_engine_and_what_a_closed_verifier_says(prm_dir, monkeypatch, caplog):
    import logging

    import tts.backends.vllm as vllm_backend

    prm, _, _ = _in_process(monkeypatch, prm_dir, lambda ids: [], gpu=True)
    assert PRMVerifier.from_config(prm.config, object()).config is prm.config
    assert repr(prm) == f"PRMVerifier({str(prm_dir)!r}, 'qwen2.5-math-prm', in process, open)"
    assert prm.llm is not None and not prm.closed
    closed = []

    def close_engine(owner, attribute, on_gpu):
        closed.append((attribute, on_gpu))
        had = getattr(owner, attribute) is not None
        setattr(owner, attribute, None)
        return had

    monkeypatch.setattr(vllm_backend, "close_engine", close_engine)
    with caplog.at_level(logging.INFO, logger="tts.verifiers.prm"):
        with prm:
            pass
        assert [r.getMessage() for r in caplog.records] == [f"PRM engine for {prm_dir} closed"]
        prm.close()  # nothing left to close: nothing logged
    assert closed == [("_llm", True), ("_llm", True)] and prm.closed
    assert [r.getMessage() for r in caplog.records] == [f"PRM engine for {prm_dir} closed"]
    assert repr(prm) == f"PRMVerifier({str(prm_dir)!r}, 'qwen2.5-math-prm', in process, closed)"
    with pytest.raises(BackendError) as err:
        prm.llm
    assert str(err.value) == (f"This PRM verifier ({prm_dir}) was closed and its engine shut down. Create a new "
                              "PRMVerifier to score again.")
    with pytest.raises(BackendError) as err:
        prm.score([_item(STEPS[:1])])
    assert str(err.value) == f"This PRM verifier ({prm_dir}) was closed. Create a new PRMVerifier to score again."


# --- on a server ------------------------------------------------------------------------------------------


def test_on_a_server_the_tokenizer_is_the_backends_or_the_served_name(prm_dir, server):
    srv = server()
    prm = PRMVerifier(PRMVerifierConfig(model=str(prm_dir), backend={"kind": "openai", "base_url": srv.base_url}))
    assert LOADS == [(str(prm_dir), True)] and prm.model_path == prm.priced_model == str(prm_dir)
    assert prm.remote and not prm.closed and prm.on_gpu is False and prm.resolved.tag_id == _tag_id(prm_dir)
    assert repr(prm) == f"PRMVerifier({str(prm_dir)!r}, 'qwen2.5-math-prm', {srv.base_url}, open)"
    with pytest.raises(BackendError) as err:
        prm.llm
    assert str(err.value) == (f"This PRM verifier ({prm_dir}) scores on the server at {srv.base_url} and has no "
                              "engine in this process.")
    prm.close()
    assert prm.closed and prm._client is None and prm._llm is None
    prm.close()  # twice is harmless
    assert prm.closed
    assert repr(prm) == f"PRMVerifier({str(prm_dir)!r}, 'qwen2.5-math-prm', {srv.base_url}, closed)"
    LOADS.clear()
    named = PRMVerifier(PRMVerifierConfig(model="served-name", backend={
        "kind": "openai", "base_url": srv.base_url, "tokenizer": str(prm_dir)}))
    assert LOADS == [(str(prm_dir), True)] and named.priced_model == str(prm_dir)
    assert named._client.model == "served-name"
    named.close()


def test_on_a_server_a_long_item_is_the_servers_to_refuse(prm_dir, server):
    srv = server()
    long_item = _item(tuple(f"Step {i}: add one more apple to the basket." for i in range(12)), "long")
    config = parse_verifier_config({"kind": "prm", "model": "served", "backend": {
        "kind": "openai", "base_url": srv.base_url, "tokenizer": str(prm_dir)}})
    with PRMVerifier(config) as prm:
        assert prm.config.max_model_len == 4096
        prm.config = prm.config.model_copy(update={"max_model_len": 64})
        [score] = prm.score([long_item])
    assert len(score.step_scores) == 12 and score.usage.shapes[0].model == str(prm_dir)
    # A server reports no cached prompt tokens for a pooling request: none are counted.
    assert score.usage.cached_prompt_tokens == 0 and score.usage.shapes[0].cached_prompt_tokens == 0
