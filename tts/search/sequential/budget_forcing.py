"""Budget forcing for models with a thinking section (s1; Muennighoff et al. 2025).

The reference is s1's paper (section 3.1) and its evaluation code (github.com/simplescaling/s1,
``eval/lm-evaluation-harness/lm_eval/models/vllm_causallms.py`` and the README's budget forcing
example); the parity test is ``tests/parity/test_sequential.py``.

A thinking model writes ``<think> ... </think>`` and then its answer. Budget forcing controls how
long the thought is, with nothing but continuations of the model's own partial reply:

* **cap** (``max_thinking_tokens`` = B): the thought is generated with at most B tokens and the
  end-of-thinking delimiter as a stop string. A thought cut at B gets a newline (unless it ends in
  one), the delimiter and an answer prefix (``answer_prefix``, s1's "Final Answer:" on a new line)
  appended, and the model continues from there: a cut-off thought still yields a final answer.
* **extend** (``min_thinking_tokens``, ``max_waits`` = k): a thought that ends before the minimum
  has its end suppressed: the delimiter (a stop string, so never in the text) is left out,
  ``wait`` ("Wait") is appended, and the model thinks on, up to k times and within B.

A thought that ends on its own, above the minimum, is continued after the delimiter untouched (no
prefix is forced on it), and so is one that the model ends with its end-of-sequence token instead
of the delimiter (s1 treats every end but the cap alike). ``force_after_eos`` forces the answer
after such a thought like after a cut one (tts's rule before it followed s1: useful for models
that do not write a thinking section and end their message inside the "thought").

s1's "Wait" rounds ignore every end of thinking k times (``thinking_n_ignore``); here a thought is
extended while it is below ``min_thinking_tokens`` (the paper's "minimum"), so
``min_thinking_tokens = max_thinking_tokens`` is s1's rule. The pre-s1 forcing strings are
settings: ``answer_prefix="\\nFinal answer: $\\\\boxed{"`` and ``cut_newline=False``.

The delimiters and the forcing strings are settings, not code: ``think_start`` opens the thought
as the start of the reply (empty when the model's chat template already opens it).

Two paths carry out the cap; the trace's ``notes["thinking_cap"]`` says which ran:

* **engine** (``engine_cap`` and a backend with ``supports_thinking_budget``: vLLM with a reasoning
  config, an OpenAI-compatible server configured to take a thinking budget, the scripted thinking
  model): each sample is ONE request with ``thinking_budget`` = B. The engine counts the thought
  and, at B tokens, writes the end-of-thinking delimiter itself; the model answers in the same
  request, with no prompt re-sent. What is written after the delimiter is the engine's (vLLM: its
  ``reasoning_end_str``): ``answer_prefix`` and ``cut_newline`` are not applied there, and the
  answer after a thought that ends early may use the request's remaining tokens (up to B +
  ``answer_tokens`` in all). A thought cut at B counts as ``engine_cut`` in the trace's events.
* **reprompt** (any other backend, or ``engine_cap: false``): the thought is generated with the
  delimiter as a stop string and at most B tokens, and the answer is asked for in a second request
  that re-sends the prompt and the thought (the prefix cache serves most of it).

s1's "Wait" extension always re-prompts: a thought must be ended and re-sent without its end. On
the engine path a thought that ended below the minimum loses the answer the engine wrote after it
(its tokens stay in the usage) and is extended and answered as on the reprompt path; so is one
that the engine returned without its delimiter (ended by end of sequence, or by a server that
ignored the budget; the latter also counts as ``over_budget``).

1. Think: one request per problem, n samples; reprompt: stop at ``think_end``, at most B tokens;
   engine: thinking budget B, then the answer.
2. Extend: one request per thought that ended early; one generate call per "Wait" round, all
   problems together, at most k rounds.
3. Answer: one request per thought not yet answered (forced or free), in one call; the answer is
   read from what follows the thought.
4. The answer is the majority vote of the n samples.

Every token the model generated (thought, extensions and answer) is in the problem's usage, the
thought's tokens also as ``Usage.reasoning_tokens`` where the backend counts them; the "Wait"
strings and answer prefixes are prompt text of the later requests.
"""

from __future__ import annotations

import hashlib
import logging
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from pydantic import Field, model_validator

from tts.answers import answer_keys
from tts.answers.reasoning import THINK_CLOSE
from tts.backends.base import Completion, GenerationRequest, derive_seed
from tts.config import StrategyConfigBase
from tts.search.base import BudgetUse, Strategy, StrategyInputError
from tts.types import Budget, RequestShape, Sample, Solution, Trace, Usage

logger = logging.getLogger(__name__)

_END_TOKENS = 4
"""Room, in an engine-capped request, for the end-of-thinking delimiter the engine writes (one
token for ``</think>`` in Qwen3 and DeepSeek-R1 vocabularies; a few for a longer end string)."""


class BudgetForcingConfig(StrategyConfigBase):
    """Cap a thinking model's thought at B tokens and force its answer, or extend it with "Wait" (s1)."""

    kind: Literal["budget_forcing"] = "budget_forcing"
    n: int = Field(1, ge=1, le=4096)
    """Samples per problem, each forced on its own; the answer is their majority vote."""
    max_thinking_tokens: int | None = Field(None, ge=1)
    """B, the most tokens of one thought (extensions included); None: the run's ``max_tokens``."""
    min_thinking_tokens: int = Field(0, ge=0)
    """A thought that ends before this many tokens is extended with ``wait`` (needs max_waits)."""
    max_waits: int = Field(0, ge=0, le=64)
    """k, the most times one thought is extended."""
    think_start: str = "<think>\n"
    """Opens the thought at the start of the reply; empty when the chat template opens it."""
    think_end: str = Field(THINK_CLOSE, min_length=1)
    """The end-of-thinking delimiter (a stop string of every thinking request)."""
    wait: str = Field("Wait", min_length=1)
    """Appended in place of a suppressed end of thinking."""
    answer_prefix: str = "\nFinal Answer:"
    """Appended after the delimiter of a thought cut at B, to force the answer (s1's "Final Answer:"
    on a new line; an open ``\\boxed{`` here is closed for the answer)."""
    cut_newline: bool = True
    """Put a newline before the delimiter of a cut thought that does not end in one (s1)."""
    force_after_eos: bool = False
    """Force the answer prefix after a thought that ended with the end-of-sequence token too.
    False (s1): only a thought cut at B is forced."""
    answer_tokens: int = Field(32, ge=1)
    """Most tokens of the answer after the thought."""
    engine_cap: bool = True
    """Cap the thought inside the engine where the backend can (``supports_thinking_budget``): one
    request thinks and answers. False: always cut by a stop string and re-prompt for the answer."""

    @model_validator(mode="after")
    def _consistent(self) -> BudgetForcingConfig:
        if (self.min_thinking_tokens > 0) != (self.max_waits > 0):
            raise ValueError(f"min_thinking_tokens ({self.min_thinking_tokens}) and max_waits ({self.max_waits}) work "
                             "together: a thought shorter than the minimum is extended up to max_waits times. Set "
                             "both (e.g. min_thinking_tokens: 256, max_waits: 2) or neither.")
        if self.max_thinking_tokens is not None and self.min_thinking_tokens > self.max_thinking_tokens:
            raise ValueError(f"min_thinking_tokens ({self.min_thinking_tokens}) is above max_thinking_tokens "
                             f"({self.max_thinking_tokens}); lower the minimum or raise the cap.")
        return self

    @property
    def label(self) -> str:
        """``budget_forcing@1``; settings that differ from their defaults follow."""
        parts = [f"{self.kind}@{self.n}"]
        for key, f in type(self).model_fields.items():
            value = getattr(self, key)
            if key in ("kind", "n") or value == f.default:
                continue
            if isinstance(value, str) and (len(value) > 12 or not value.isprintable()):
                value = "#" + hashlib.sha256(value.encode()).hexdigest()[:6]
            parts.append(f"{key}={value}")
        return ",".join(parts)


@dataclass(slots=True)
class _Thought:
    """One sample's reply being built: its thought, how it ended, and its segments for the trace."""

    problem: int
    index: int
    text: str = ""
    tokens: int = 0
    waits: int = 0
    ended: str = "delimiter"  # "delimiter", "eos" (end of message inside the thought) or "cap"
    segments: list[dict[str, Any]] = field(default_factory=list)
    reply: Completion | None = None
    """On the engine path: what the engine wrote after the thought's delimiter (the answer);
    None while the thought still needs a re-prompted answer."""

    def add(self, kind: str, prefix: str, completion: Completion) -> None:
        self.text += prefix + completion.text
        self.tokens += completion.completion_tokens
        self.segments.append({"kind": kind, "text": prefix + completion.text, "tokens": completion.completion_tokens})


def _close_braces(text: str) -> str:
    """Close the braces a forced answer, or one cut at ``answer_tokens``, left open
    (``\\boxed{\\frac{1}{2}`` -> ``...}}``): read unclosed, the box gives ``{\\frac{1}{2}``."""
    return text + "}" * max(text.count("{") - text.count("}"), 0)


class BudgetForcing(Strategy):
    """Think within [min, B] tokens, then answer; vote over n samples. See the module docstring."""

    name = "budget_forcing"
    config_class: ClassVar[type[StrategyConfigBase]] = BudgetForcingConfig
    budget_use = BudgetUse.WHOLE_SAMPLES
    pool_rule = None

    @property
    def thinking_cap(self) -> int:
        """B: the config's cap, or the run's ``max_tokens``."""
        return self.config.max_thinking_tokens or self.sampling.max_tokens

    @property
    def engine_caps(self) -> bool:
        """Whether the engine path runs: ``engine_cap`` and a backend that declares
        ``supports_thinking_budget`` (see the module docstring)."""
        return self.config.engine_cap and bool(getattr(self.generator, "supports_thinking_budget", False))

    def samples_within(self, budget: Budget | None) -> int:
        """The n this config may draw under ``budget`` (a sample costs at most B + answer_tokens)."""
        n = self.config.n
        worst = self.thinking_cap + self.config.answer_tokens + (_END_TOKENS if self.engine_caps else 0)
        if budget is not None and budget.samples is not None:
            n = min(n, budget.samples)
        if budget is not None and budget.tokens is not None:
            n = min(n, budget.tokens // worst)
        if n < 1:
            raise StrategyInputError(f"{self.name}: a budget of {budget} does not cover one sample of up to {worst} "
                                     f"tokens (B={self.thinking_cap} thinking + {self.config.answer_tokens} answer); "
                                     "raise the budget or lower max_thinking_tokens / answer_tokens.")
        return n

    def _request(self, problem: Any, continuation: str, n: int, max_tokens: int, seed_key: str,
                 stop: tuple[str, ...], thinking_budget: int | None = None) -> GenerationRequest:
        return GenerationRequest(
            messages=self.prompt(problem), n=n, temperature=self.sampling.temperature, top_p=self.sampling.top_p,
            max_tokens=max_tokens, stop=stop, continuation=continuation,
            seed=derive_seed(self.seed, f"{problem.id}|{self.config.label}|{seed_key}", 0), key=problem.id,
            thinking_budget=thinking_budget)

    def _forced(self, t: _Thought) -> bool:
        """Whether the answer prefix is forced after this thought (never after an engine's answer)."""
        return t.reply is None and (t.ended == "cap" or (t.ended == "eos" and self.config.force_after_eos))

    def _engine_thought(self, t: _Thought, comp: Completion) -> None:
        """Split an engine-capped completion at the delimiter: the thought into ``t``, the rest
        into ``t.reply``; a completion without the delimiter is all thought, left unanswered."""
        c = self.config
        head, sep, tail = comp.text.partition(c.think_end)
        opener = c.think_start.strip()
        if opener and head.startswith(opener):  # a backend that puts a parsed-out thought back opens it
            head = head[len(opener):]
        tokens = comp.completion_tokens
        if comp.reasoning_tokens is not None:
            tokens = comp.reasoning_tokens
        elif sep:  # the backend cannot count: share the tokens by characters
            tokens = round(comp.completion_tokens * len(head) / max(len(comp.text), 1))
        t.text, t.tokens = head, tokens
        t.segments.append({"kind": "think", "text": head, "tokens": tokens})
        if sep:
            t.ended = "cap" if comp.thinking_capped else "delimiter"
            t.reply = Completion(tail, comp.completion_tokens - tokens, finish_reason=comp.finish_reason,
                                 ended_by_eos=comp.ended_by_eos)
        else:
            t.ended = "eos" if comp.ended_by_eos is True else "cap"

    @staticmethod
    def _ended(completion: Completion) -> str:
        if completion.finish_reason == "length":
            return "cap"
        return "eos" if completion.ended_by_eos is True else "delimiter"

    def solve(self, problems: Sequence[Any], budgets: Sequence[Budget | None] | None = None) -> list[Solution]:
        """Think, extend and answer every sample of every problem: one generate call per phase."""
        if budgets is not None and len(budgets) != len(problems):
            raise StrategyInputError(f"got {len(budgets)} budgets for {len(problems)} problems; give one per problem")
        c = self.config
        cap, start, stop = self.thinking_cap, c.think_start, (c.think_end,)
        ns = [self.samples_within(b) for b in (budgets or [None] * len(problems))]
        usage = [Usage() for _ in problems]
        engine = self.engine_caps
        # 1. Think: n thoughts per problem, cut at B tokens or at the end-of-thinking delimiter; on the
        # engine path the engine cuts at B and the model answers in the same request.
        if engine:
            results = self.generator.generate([
                self._request(p, start, n, cap + c.answer_tokens + _END_TOKENS, "think", (), thinking_budget=cap)
                for p, n in zip(problems, ns, strict=True)])
        else:
            results = self.generator.generate([self._request(p, start, n, cap, "think", stop)
                                               for p, n in zip(problems, ns, strict=True)])
        thoughts: list[_Thought] = []
        for i, result in enumerate(results):
            usage[i] = usage[i] + result.usage
            for j, comp in enumerate(result.completions):
                t = _Thought(i, j)
                if engine:
                    self._engine_thought(t, comp)
                else:
                    t.add("think", "", comp)
                    t.ended = self._ended(comp)
                thoughts.append(t)
        over = [t for t in thoughts if engine and t.tokens > cap]
        if over:
            logger.warning("%s: %d thoughts ran past the thinking budget of %d tokens that the backend (%s) declared "
                           "it enforces; its server or engine may ignore the budget (check its reasoning config)",
                           self.name, len(over), cap, getattr(self.generator, "model_name", "?"))
        # 2. Extend: a thought that ended below the minimum loses its end (and, on the engine path, the
        # answer written after it) and gets "Wait", up to k times.
        for _ in range(c.max_waits):
            todo = [t for t in thoughts if t.ended != "cap" and t.tokens < min(c.min_thinking_tokens, cap)]
            if not todo:
                break
            for t in todo:
                t.reply = None
            results = self.generator.generate([
                self._request(problems[t.problem], start + t.text + c.wait, 1, cap - t.tokens,
                              f"{t.index}|wait{t.waits}", stop) for t in todo])
            for t, result in zip(todo, results, strict=True):
                usage[t.problem] = usage[t.problem] + result.usage
                t.add("wait", c.wait, result.completions[0])
                t.waits += 1
                t.ended = "cap" if t.tokens >= cap else self._ended(result.completions[0])
        # 3. Answer: a thought cut at B (or, with force_after_eos, ended without the delimiter) gets
        # the answer prefix forced; a cut one a newline before its delimiter (s1). Thoughts the engine
        # answered keep that answer.
        heads = [start + t.text + c.think_end if t.reply is not None else
                 start + t.text + ("\n" if c.cut_newline and t.ended == "cap" and not t.text.endswith("\n") else "")
                 + c.think_end + (c.answer_prefix if self._forced(t) else "") for t in thoughts]
        asked = [k for k, t in enumerate(thoughts) if t.reply is None]
        answered = self.generator.generate([
            self._request(problems[thoughts[k].problem], heads[k], 1, c.answer_tokens, f"{thoughts[k].index}|answer",
                          ()) for k in asked]) if asked else []
        replies: list[tuple[Completion, Usage | None]] = [(t.reply, None) for t in thoughts]  # type: ignore[misc]
        for k, result in zip(asked, answered, strict=True):
            replies[k] = (result.completions[0], result.usage)
        samples: list[list[tuple[Sample, _Thought]]] = [[] for _ in problems]
        for t, head, (comp, spent) in zip(thoughts, heads, replies, strict=True):
            if spent is not None:
                usage[t.problem] = usage[t.problem] + spent
            forced = self._forced(t)
            reply = (c.answer_prefix if forced else "") + comp.text
            t.segments.append({"kind": "answer", "text": reply, "tokens": comp.completion_tokens})
            cut = forced or comp.finish_reason == "length"  # an answer cut at answer_tokens left its braces open too
            sample = Sample(text=head + comp.text, answer=self.extract(_close_braces(reply) if cut else reply),
                            completion_tokens=t.tokens + comp.completion_tokens,
                            finish_reason="forced" if forced else comp.finish_reason)
            samples[t.problem].append((sample, t))
        # 4. The vote.
        notes = {"thinking_cap": "engine" if engine else "reprompt"}
        return [self._solution(p, s, u, notes) for p, s, u in zip(problems, samples, usage, strict=True)]

    def _solution(self, problem: Any, drawn: list[tuple[Sample, _Thought]], usage: Usage,
                  notes: dict[str, Any]) -> Solution:
        samples = tuple(s for s, _ in drawn)
        answer, share, votes, idx = self.vote(samples)
        chosen = answer_keys([answer])[0] if answer is not None else None
        events: Counter[str] = Counter()
        tree: list[dict[str, Any]] = []
        for (sample, t), key in zip(drawn, answer_keys([s.answer for s in samples]), strict=True):
            if self._forced(t):
                events[f"forced_{t.ended}"] += 1
            if t.waits:
                events["waits"] += t.waits
            if notes["thinking_cap"] == "engine":
                if t.reply is not None and t.ended == "cap":
                    events["engine_cut"] += 1
                if t.tokens > self.thinking_cap:
                    events["over_budget"] += 1
            for depth, seg in enumerate(t.segments):
                tree.append({"id": f"{t.index}.{depth}", "parent": f"{t.index}.{depth - 1}" if depth else None,
                             "depth": depth, **seg, "score": None, "answer": sample.answer if seg["kind"] == "answer"
                             else None, "forced": seg["kind"] == "answer" and self._forced(t),
                             "kept": chosen is not None and key == chosen})
        reprompted = sum(1 for _, t in drawn if t.reply is None)
        if notes["thinking_cap"] == "engine" and reprompted:
            notes = {**notes, "answers_reprompted": reprompted}
        trace = Trace(self.name, samples, votes=votes, selected=idx, tree=tuple(tree),
                      events=dict(sorted(events.items())), notes=notes)
        return Solution(problem.id, answer, share, usage, trace)

    @classmethod
    def planned_requests(cls, n: int, prompt_tokens: int, gen_tokens: int,
                         cached_tokens: int = 0) -> list[RequestShape]:
        """Cost hook (``tts cost``): n thoughts of ``gen_tokens`` from one prompt, then one answer
        request per thought whose prompt (the question and the thought) is in the prefix cache.
        Extensions are not included (the defaults make none)."""
        answer = cls.config_class.model_fields["answer_tokens"].default
        head = prompt_tokens + gen_tokens
        return [RequestShape(prompt_tokens, cached_tokens, (gen_tokens,) * n),
                *(RequestShape(head, head, (answer,)) for _ in range(n))]
