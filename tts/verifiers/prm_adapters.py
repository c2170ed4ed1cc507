"""Process-reward-model adapters: what one PRM family expects, as data.

A PRM scores each step of a solution at a *step tag*, a token written after every step. Families
differ in the tag, in how steps are joined, in the prompt around the solution and in how the score
is read at the tag:

- ``head="token_classify"``: a classification head on every token (vLLM pooling models such as
  ``Qwen2ForProcessRewardModel``, the Qwen2.5-Math-PRM family); the step score is the softmax
  probability of class ``positive_index`` at the tag.
- ``head="lm_labels"``: an ordinary causal LM trained to predict a "good" or a "bad" label token at
  the tag (Math-Shepherd, RLHFlow PRMs); the step score is softmax over the two labels' logits at
  the tag, i.e. P(good) / (P(good) + P(bad)).

An adapter is checked against the model's tokenizer when the verifier loads (:func:`resolve_adapter`):
a tag or label that is not exactly one token is refused with a message that says what it became.
A config names a shipped adapter (:data:`ADAPTERS`) or gives one inline::

    verifier:
      kind: prm
      model: /models/my-prm
      adapter: {head: token_classify, step_tag: "<step>", template: null}
"""

from __future__ import annotations

import string
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

_STEP_FIELDS = {"index", "step", "tag"}
_PROMPT_FIELDS = {"system", "question", "solution"}
_TAG_MARK = "\x00TAG\x00"
_SOLUTION_MARK = "\x00SOLUTION\x00"


class AdapterError(ValueError):
    """An adapter does not fit the model's tokenizer (or is malformed); the message says what to change."""


def _fields(template: str, what: str) -> list[str]:
    try:
        return [name for _, name, _, _ in string.Formatter().parse(template) if name is not None]
    except ValueError as exc:
        raise ValueError(f"{what} {template!r} is not a valid format string ({exc}); write literal braces "
                         "as {{ and }}") from None


def check_prompt_template(template: str | None) -> None:
    """Refuse a prompt template without ``{question}`` and ``{solution}``, with other fields
    (``{system}`` is allowed) or with ``{solution}`` more than once (the step tags are located in
    one copy of the solution); None (the tokenizer's chat template) passes."""
    if template is None:
        return
    fields = _fields(template, "template")
    if "question" not in fields or "solution" not in fields or set(fields) - _PROMPT_FIELDS:
        raise ValueError(f"template {template!r} must hold {{question}} and {{solution}} (and may hold {{system}}); "
                         "or set template to null to use the tokenizer's chat template")
    if fields.count("solution") > 1:
        raise ValueError(f"template {template!r} holds {{solution}} {fields.count('solution')} times; write it once "
                         "(each step is scored at its tag in the one solution)")


class PRMAdapter(BaseModel):
    """How to talk to one PRM family: rendering and score reading, all data.

    Rendering: each step becomes ``step_template`` (with ``{index}`` from 1, ``{step}`` and
    ``{tag}``); the steps are joined with ``step_separator`` into the solution, which is placed with
    the question and ``system`` into ``template``. A ``template`` of None uses the tokenizer's own
    chat template with a system (if ``system`` is not empty), a user (the question) and an
    assistant (the solution) message, as the Qwen2.5-Math-PRM model card does.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = "custom"
    """Display name (the key of a shipped adapter)."""
    head: Literal["token_classify", "lm_labels"]
    """How the score is read at a tag: a token-classification head ("token_classify") or the
    LM head's logits of the two label tokens ("lm_labels")."""
    step_tag: str = Field(min_length=1)
    """The token written after every step; must be exactly one token of the model's tokenizer."""
    step_separator: str = ""
    """Text between two consecutive (tagged) steps."""
    step_template: str = "{step}{tag}"
    """One step as written: ``{step}`` and ``{tag}`` once each, optionally ``{index}`` (from 1)."""
    template: str | None = None
    """The whole prompt with ``{question}`` and ``{solution}`` (and optionally ``{system}``);
    tokenised with the tokenizer's default special tokens (e.g. a BOS). None: the tokenizer's chat
    template (tokenised without adding special tokens, the template holds them)."""
    system: str = ""
    """System prompt (the ``{system}`` of ``template``, or a system message)."""
    positive_index: int | None = Field(None, ge=0)
    """token_classify: the head's class that means "good step" (default 1)."""
    good_label: str | None = None
    """lm_labels: the token the model predicts at the tag for a good step (e.g. "+")."""
    bad_label: str | None = None
    """lm_labels: the token the model predicts at the tag for a bad step (e.g. "-")."""

    @model_validator(mode="after")
    def _consistent(self) -> PRMAdapter:
        step_fields = _fields(self.step_template, "step_template")
        if step_fields.count("step") != 1 or step_fields.count("tag") != 1 or set(step_fields) - _STEP_FIELDS:
            raise ValueError(f"step_template {self.step_template!r} must hold {{step}} and {{tag}} exactly once "
                             f"and nothing else but {{index}}, e.g. 'Step {{index}}: {{step}} {{tag}}'")
        check_prompt_template(self.template)
        if self.head == "token_classify":
            if self.good_label is not None or self.bad_label is not None:
                raise ValueError("good_label/bad_label are read only by head lm_labels; remove them or set "
                                 "head: lm_labels")
        else:
            if self.good_label is None or self.bad_label is None:
                raise ValueError("head lm_labels needs good_label and bad_label (the tokens predicted at the tag, "
                                 "e.g. '+' and '-')")
            if self.good_label == self.bad_label:
                raise ValueError(f"good_label and bad_label are both {self.good_label!r}; give two different tokens")
            if self.positive_index is not None:
                raise ValueError("positive_index is read only by head token_classify; remove it for lm_labels")
        return self

    @property
    def positive_class(self) -> int:
        """The class index of a good step (token_classify)."""
        return 1 if self.positive_index is None else self.positive_index

    def render_solution(self, steps: Sequence[str]) -> tuple[str, list[tuple[int, int]]]:
        """The solution text and the character span of each step's tag within it (in step order)."""
        parts: list[str] = []
        spans: list[tuple[int, int]] = []
        offset = 0
        for i, step in enumerate(steps):
            if i:
                parts.append(self.step_separator)
                offset += len(self.step_separator)
            # Format with a marker for the tag so that its position is known exactly.
            head, _, tail = self.step_template.format(index=i + 1, step=step, tag=_TAG_MARK).rpartition(_TAG_MARK)
            spans.append((offset + len(head), offset + len(head) + len(self.step_tag)))
            piece = head + self.step_tag + tail
            parts.append(piece)
            offset += len(piece)
        return "".join(parts), spans

    def render(self, question: str, steps: Sequence[str], tokenizer: Any) -> tuple[str, list[tuple[int, int]], bool]:
        """The full prompt text, the character span of every step's tag in it, and whether to add
        the tokenizer's special tokens when tokenising it."""
        solution, spans = self.render_solution(steps)
        text, start, special = wrap_prompt(self.name, self.template, self.system, question, solution, tokenizer)
        return text, [(a + start, b + start) for a, b in spans], special


def wrap_prompt(name: str, template: str | None, system: str, question: str, solution: str,
                tokenizer: Any) -> tuple[str, int, bool]:
    """Place a rendered solution in its prompt: ``(text, where the solution starts, add special tokens?)``.

    ``template`` holds ``{question}`` and ``{solution}`` (and optionally ``{system}``), tokenised
    with the tokenizer's default special tokens; None uses the tokenizer's chat template (system if
    not empty, user = question, assistant = solution), tokenised without adding special tokens.
    Shared by PRM and outcome-RM adapters, so both read a solution the same way.
    """
    if template is not None:
        text = template.format(system=system, question=question, solution=_SOLUTION_MARK)
        start = text.index(_SOLUTION_MARK)
        return text.replace(_SOLUTION_MARK, solution, 1), start, True
    # Chat template: render with a marker in place of the solution, then substitute it, so the
    # tags' positions survive whatever the template wraps around the assistant message.
    marker = _SOLUTION_MARK
    messages = ([{"role": "system", "content": system}] if system else []) + [
        {"role": "user", "content": question}, {"role": "assistant", "content": marker}]
    try:
        text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=False)
    except Exception as exc:  # no chat template, or a template that refuses these roles
        raise AdapterError(f"Adapter {name!r} uses the tokenizer's chat template (template: null), "
                           f"which failed: {exc}. Give the adapter a template string with {{question}} and "
                           "{solution}.") from exc
    if text.count(marker) != 1:
        raise AdapterError(f"Adapter {name!r}: the tokenizer's chat template does not keep the "
                           "assistant message verbatim; give the adapter a template string instead.")
    start = text.index(marker)
    return text.replace(marker, solution, 1), start, False


SAL_SYSTEM_PROMPT = (
    "Solve the following math problem efficiently and clearly:\n\n- For simple problems (2 steps or fewer):\n"
    "Provide a concise solution with minimal explanation.\n\n- For complex problems (3 steps or more):\n"
    "Use this step-by-step format:\n\n## Step 1: [Concise description]\n[Brief explanation and calculations]\n\n"
    "## Step 2: [Concise description]\n[Brief explanation and calculations]\n\n...\n\n"
    "Regardless of the approach, always conclude with:\n\n"
    "Therefore, the final answer is: $\\boxed{answer}$. I hope it is correct.\n\n"
    "Where [answer] is just the final number or expression that solves the problem."
)
"""search-and-learn's default system prompt (``sal.config.Config.system_prompt``, Apache-2.0), which
its Math-Shepherd PRM reads before the question in every shipped recipe."""

ADAPTERS: dict[str, PRMAdapter] = {
    # Qwen/Qwen2.5-Math-PRM-7B and -72B, laid out as search-and-learn's Qwen_2_5_Math PRM does
    # (src/sal/models/reward_models.py, which follows the model card): <extra_0> after every step,
    # the last one included, the whole in Qwen's chat format (system, user, assistant, no generation
    # prompt) with this system prompt; the head's class 1 is "good". A solution's steps are the
    # pieces between its blank lines (tts.search.base.split_steps), which the reference replaces by
    # <extra_0>. Tag and index are from the model card and vLLM's Qwen2ForProcessRewardModel default
    # (step_tag_id 151651); recheck both on a machine with the weights
    # (tests/parity/test_prm_and_aggregation.py does when the tokenizer is in the local cache).
    "qwen2.5-math-prm": PRMAdapter(
        name="qwen2.5-math-prm",
        head="token_classify",
        step_tag="<extra_0>",
        step_template="{step}{tag}",
        template=("<|im_start|>system\n{system}<|im_end|>\n<|im_start|>user\n{question}<|im_end|>\n"
                  "<|im_start|>assistant\n{solution}<|im_end|>\n"),
        system="Please reason step by step, and put your final answer within \\boxed{}.",
        positive_index=1,
    ),
    # peiyi9979/math-shepherd-mistral-7b-prm, laid out as search-and-learn's MathShepherd PRM does
    # (src/sal/models/reward_models.py): system prompt, newline, question, newline, a space, then
    # the solution with " ки" after every step and the blank lines between steps kept; score =
    # softmax over the logits of "+" and "-" at each "ки", P("+") (its CANDIDATE_TOKENS 648, 387 and
    # STEP_TAG_ID 12902). Recheck on the real tokenizer that "ки" and "+"/"-" are one token each.
    "math-shepherd": PRMAdapter(
        name="math-shepherd",
        head="lm_labels",
        step_tag="ки",
        step_separator="\n\n",
        step_template="{step} {tag}",
        template="{system}\n{question}\n {solution}",
        system=SAL_SYSTEM_PROMPT,
        good_label="+",
        bad_label="-",
    ),
    # The same model as its model card writes the input: "{question} Step 1: ... ки\nStep 2: ... ки"
    # (numbered steps, one newline, no system prompt); tts's math-shepherd layout before it followed
    # search-and-learn. Kept as a setting: adapter: math-shepherd-card.
    "math-shepherd-card": PRMAdapter(
        name="math-shepherd-card",
        head="lm_labels",
        step_tag="ки",
        step_separator="\n",
        step_template="Step {index}: {step} {tag}",
        template="{question} {solution}",
        good_label="+",
        bad_label="-",
    ),
}


def get_adapter(value: str | PRMAdapter | dict[str, Any]) -> PRMAdapter:
    """A shipped adapter by name, or an inline one (a mapping of :class:`PRMAdapter` fields).

    Raises:
        ValueError: An unknown name (the message lists the shipped ones) or invalid fields.
    """
    if isinstance(value, PRMAdapter):
        return value
    if isinstance(value, str):
        if value not in ADAPTERS:
            raise ValueError(f"unknown PRM adapter {value!r}; choose one of {', '.join(sorted(ADAPTERS))} or give "
                             "one inline (head, step_tag, step_template, template, ...)")
        return ADAPTERS[value]
    return PRMAdapter.model_validate(value)


@dataclass(frozen=True)
class ResolvedAdapter:
    """An adapter with its tokens looked up in one model's tokenizer."""

    adapter: PRMAdapter
    tag_id: int
    good_id: int | None = None
    bad_id: int | None = None


def _one_token(tokenizer: Any, text: str, what: str, field: str, adapter: PRMAdapter, model: str) -> int:
    ids = list(tokenizer.encode(text, add_special_tokens=False))
    if len(ids) == 1:
        return int(ids[0])
    pieces = [tokenizer.decode([i]) for i in ids]
    hint = ("add it to the tokenizer as a special token (as Qwen2.5-Math-PRM has <extra_0>), "
            if field == "step_tag" else "")
    raise AdapterError(
        f"PRM adapter {adapter.name!r}: the {what} {text!r} is not one token of the tokenizer of {model}; it "
        f"tokenises to {len(ids)} tokens {pieces} (ids {ids}). Set adapter {field} to a single token of this "
        f"tokenizer, {hint}or use the adapter of this model's family ({', '.join(sorted(ADAPTERS))})."
    )


def resolve_adapter(adapter: PRMAdapter, tokenizer: Any, model: str = "the model") -> ResolvedAdapter:
    """Check an adapter against a tokenizer and look up its token ids.

    Raises:
        AdapterError: The step tag or a label is not exactly one token (the message names it, what
            it tokenises to, and what to change).
    """
    tag_id = _one_token(tokenizer, adapter.step_tag, "step tag", "step_tag", adapter, model)
    if adapter.head == "token_classify":
        return ResolvedAdapter(adapter, tag_id)
    good = _one_token(tokenizer, adapter.good_label or "", "good label", "good_label", adapter, model)
    bad = _one_token(tokenizer, adapter.bad_label or "", "bad label", "bad_label", adapter, model)
    return ResolvedAdapter(adapter, tag_id, good, bad)


def pooler_settings(resolved: ResolvedAdapter, tokenizer: Any) -> dict[str, Any]:
    """The vLLM pooling-model settings a PRM needs under its adapter, as plain data.

    ``pooler_config`` (step pooling at the tag, task ``token_classify``) and, for ``lm_labels``
    heads, ``convert="classify"`` with the ``hf_overrides`` that make vLLM build a one-class head
    from the LM head rows of the two labels (``sigmoid(good - bad)``). The in-process engine takes
    them as ``LLM(...)`` arguments, a server as command-line flags (:func:`pooler_server_args`), so
    both paths run the same head on the same tag.
    """
    settings: dict[str, Any] = {
        "runner": "pooling",
        # One row per step tag; the activation (softmax, or sigmoid for one class) makes them probabilities.
        "pooler_config": {"task": "token_classify", "tok_pooling_type": "STEP", "step_tag_id": resolved.tag_id},
    }
    if resolved.adapter.head == "lm_labels":
        settings["convert"] = "classify"
        settings["hf_overrides"] = {
            "classifier_from_token": tokenizer.convert_ids_to_tokens([resolved.bad_id, resolved.good_id]),
            "method": "from_2_way_softmax",
        }
    return settings


def pooler_server_args(settings: dict[str, Any]) -> list[str]:
    """:func:`pooler_settings` (or :meth:`RMAdapter.pooler_settings`) as the flags of vLLM's
    OpenAI server (``python -m vllm.entrypoints.openai.api_server --model ... <these>``)."""
    import json

    args: list[str] = []
    for key, value in settings.items():
        flag = "--" + key.replace("_", "-")
        args += [flag, value if isinstance(value, str) else json.dumps(value)]
    return args

