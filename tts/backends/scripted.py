"""A deterministic generator for tests and docs: answers drawn from per-problem distributions.

It behaves like a model whose answer to each problem is a random draw from a distribution you
specify (``{"42": 0.6, "41": 0.3}``; the missing mass means "no answer"), with realistic token
counts and log-probabilities. It behaves like a seeded engine (vLLM on GPU, ``vllm serve``): a
request that carries a seed returns the same samples every time it is sent with that seed, so a
caller that resends a seed sees its samples repeat in tests exactly as it would on such an engine.
A request without a seed continues the backend's random stream instead (fresh samples on a
repeat, like an engine-level seed). The backend's own ``seed`` changes every draw.

A solution is written in steps separated by blank lines (``"\n\n"``), the answer in the last one,
and requests are served as vLLM serves them, so that step-wise search runs here on the path it
takes on the real engine:

- ``stop``: a sample ends at the first stop string in the text it generates; the stop string is
  not in the text (it is counted in ``completion_tokens``, as vLLM counts the tokens it generated
  to produce it), and ``finish_reason`` is ``"stop"`` with ``ended_by_eos`` False. A sample that
  reaches ``max_tokens`` first ends with ``"length"``; one that writes its whole solution ends its
  message (``"stop"``, ``ended_by_eos`` True).
- ``continuation``: a partial assistant message is continued, not restarted: the sample is the
  rest of a solution whose length is drawn as usual, less the words already written (so a long
  partial solution is soon answered); a continuation that ends inside an open ``\boxed{`` (a
  forced answer) gets the answer and the closing brace.

Chains of operations (problems whose metadata holds ``start`` and ``ops``, as the ``chains``
benchmark's do) are worked out instead of drawn, one numbered equation per step, each of which
slips with probability ``1 - step_accuracy`` (:mod:`tts.backends.scripted_chains`).

Top logprobs (``top_logprobs`` > 0) fill ``token_top_logprobs`` of ordinary samples with an
emulation (:func:`_top_logprobs`). A ``confidence_stop`` request is carried out as an engine
would (DeepConf online): the sample's per-position confidences are computed from that emulation,
and a sample whose group confidence falls below the threshold ends there (``finish_reason``
"confidence", no answer, the tokens up to and including the forced end counted); the samples it
does not stop are exactly those drawn without it.

Every reply obeys ``max_tokens`` as an engine does: one that would run longer is cut there and ends
with ``finish_reason`` ``"length"`` (``Completion.truncated``), a reply with tool calls too (cut
mid-JSON; a cut call is no call), so that truncation can be tested end to end here.

Structured output (``json_schema``) is emulated: the sample's answer comes as ``{"answer": ...}``
(null when it has none), whatever the schema. Samples with logprobs carry their text cut into as
many pieces as tokens (``Completion.tokens``). Penalties and ``logit_bias`` change nothing here.

It also plays an LLM judge (:mod:`tts.backends.scripted_judge`), so that verifiers that ask the
policy model for a verdict can be tested: a request whose last message asks for "Yes or No" is a
*verdict request*, answered right with a probability drawn high when the judged answer is the mode
of the key's distribution. With :meth:`ScriptedGenerator.for_problems` at accuracy above ~0.34 the
mode is the gold answer, so the judge is informative (right answers get higher P(Yes) on average)
but noisy. Other requests get no first-token alternatives.

The roles live in modules of their own: the solver (drawn answers, steps, stop strings,
continuations, confidence stops) here, the chain model in :mod:`tts.backends.scripted_chains`, the
judge in :mod:`tts.backends.scripted_judge`, the thinking model in
:mod:`tts.backends.scripted_thinking`, tool calls in :mod:`tts.backends.scripted_tools`, programs in
:mod:`tts.backends.scripted_code`; what they share in :mod:`tts.backends.scripted_sampling`.

With ``thinking=True`` it plays a thinking model: replies are ``<think>`` thought ``</think>``
answer, with their reasoning tokens counted apart, and a request's ``thinking_budget`` is honoured
as vLLM's engine honours it (:mod:`tts.backends.scripted_thinking`; chains and verdicts are
answered as without it). Without it, a request with a ``thinking_budget`` is refused.
"""

from __future__ import annotations

import dataclasses
import json
import math
import random
import re
import time
from collections.abc import Mapping, Sequence
from typing import Any

from tts.backends.base import (
    LENGTH,
    Completion,
    GenerationRequest,
    GenerationResult,
    request_usage,
)
from tts.backends.confidence import CONFIDENCE_STOPPED, first_stop, token_confidences
from tts.backends.scripted_code import (
    PROGRAM_REQUEST,
    TIR_REQUEST,
    chain_program_reply,
    code_reply,
    mutants,
    tests_reply,
    tir_reply,
    value_program_reply,
)
from tts.backends.scripted_chains import CHAIN_STEP, STEP_SEPARATOR, chain_sample
from tts.backends.scripted_judge import VERDICT_REQUEST, p_yes, verdict_sample
from tts.backends.scripted_sampling import BOXED as _BOXED
from tts.backends.scripted_sampling import FILLER as _FILLER
from tts.backends.scripted_sampling import cut as _cut
from tts.backends.scripted_sampling import rng as _rng
from tts.backends.scripted_sampling import token_logprobs as _token_logprobs
from tts.backends.scripted_sampling import top_logprobs as _top_logprobs
from tts.backends.scripted_thinking import emit, thinking_sample
from tts.backends.scripted_tools import tool_reply
from tts.backends.streaming import SimulatedStream
from tts.backends.thinking import count_reasoning_tokens
from tts.backends.tool_calls import reply_tool_calls
from tts.types import Problem

_OPEN_BOX = re.compile(r"\\boxed\{[^{}]*$")  # a continuation that stops inside a box
_STEP_END = "." + STEP_SEPARATOR


def _pieces(text: str, k: int) -> tuple[str, ...]:
    """``text`` cut into ``k`` consecutive pieces (its tokens here): words with the space before
    them, the last piece holding what is left, empty pieces where there are fewer words."""
    words = re.findall(r"\s*\S+", text) or [text]
    if k <= 0:
        return ()
    head = words[: k - 1]
    return (*head, "".join(words[k - 1:]), *([""] * (k - 1 - len(head))))[:k]


def _with_request_options(req: GenerationRequest, c: Completion) -> Completion:
    """A sample as the request's options shape it: a structured-output request (``json_schema``)
    gets the sample's answer as ``{"answer": ...}``; logprobs come with each token's text."""
    if req.json_schema is not None:
        boxed = _BOXED.findall(c.text)
        c = dataclasses.replace(c, text=json.dumps({"answer": boxed[-1] if boxed else None}))
    if c.token_logprobs is not None:
        tokens = _pieces(c.text, len(c.token_logprobs))
        alternatives = None
        if c.token_top_logprobs is not None:
            alternatives = tuple(((tok, lp), *((f"{tok}~{j}", a) for j, a in enumerate(top[1:], 1)))
                                 for tok, lp, top in zip(tokens, c.token_logprobs, c.token_top_logprobs, strict=False))
        c = dataclasses.replace(c, tokens=tokens, token_alternatives=alternatives)
    return c


def _prompt_text(req: GenerationRequest) -> str:
    """The prompt as one text: each message (its tool calls too), the tools offered, the continuation."""
    lines = [f"{m.role}: {m.content}" + "".join(f" [{c.name}({c.arguments})]" for c in m.tool_calls)
             for m in req.messages]
    return "\n".join(lines + ([f"tools: {req.tools}"] if req.tools else [])) + req.continuation


class ScriptedGenerator:
    """Draws each sample's answer from the distribution registered for the request's ``key``.

    Args:
        distributions: ``key -> {answer: probability}``; probabilities may sum to less than 1,
            the rest is samples that give no answer. Keys are usually problem ids.
        default: Distribution for keys not in ``distributions`` (default: always no answer).
        seed: Changes every draw; runs with the same seed are identical.
        mean_tokens: Mean generated tokens per sample (lognormal spread, capped by max_tokens).
        prompt_tokens_per_char: Prompt length model (about 4 characters per token).
        model_name: Name reported in results.
        returns_logprobs: Whether logprobs come back when asked (False mimics a server without
            logprob support).
        verdict_mass: Share of a verdict's first-token probability on "Yes"/"No" (0 mimics a
            judge model that never answers with either).
        step_tokens: Mean tokens of a solution step (steps end with a blank line).
        chains: ``key -> (start, ops)``: problems worked out step by step (see the module
            docstring); ``ops`` are arithmetic suffixes ("+ 5", "* 2").
        step_accuracy: Probability that one step of a chain is right.
        thinking: Play a thinking model that honours ``thinking_budget`` (module docstring).
        programs: Keys whose answers are programs: written in a fenced block after a sentence of
            prose (:mod:`tts.backends.scripted_code`), no answer being prose alone; a request keyed
            ``<key>#tests`` gets assert statements from the docstring's examples (CodeT's tests).
            A request for a program whose output is the answer (``program_vote``'s prompt) gets a
            program: a chain's operations transcribed (each wrong a quarter as often as a step
            worked in prose), else a program printing the drawn answer.

    Example:
        >>> gen = ScriptedGenerator({"p1": {"4": 0.7, "5": 0.2}}, seed=0)
    """

    supports_confidence_stop = True
    """``confidence_stop`` requests are carried out (emulated; see the module docstring)."""
    honours_seeds = True
    """A request seed fixes its samples (see the module docstring)."""

    def __init__(
        self,
        distributions: Mapping[str, Mapping[str, float]] | None = None,
        default: Mapping[str, float] | None = None,
        seed: int = 0,
        mean_tokens: int = 120,
        prompt_tokens_per_char: float = 0.25,
        model_name: str = "scripted",
        returns_logprobs: bool = True,
        verdict_mass: float = 0.9,
        step_tokens: int = 30,
        chains: Mapping[str, tuple[int, Sequence[str]]] | None = None,
        step_accuracy: float = 0.8,
        thinking: bool = False,
        programs: Sequence[str] = (),
    ) -> None:
        if not 0.0 <= verdict_mass <= 1.0:
            raise ValueError(f"verdict_mass must be in [0, 1], got {verdict_mass}")
        if step_tokens < 1:
            raise ValueError(f"step_tokens must be at least 1, got {step_tokens}")
        if not 0.0 <= step_accuracy <= 1.0:
            raise ValueError(f"step_accuracy must be in [0, 1], got {step_accuracy}")
        self.chains = {k: (start, tuple(ops)) for k, (start, ops) in (chains or {}).items()}
        self.step_accuracy = step_accuracy
        self.thinking = thinking
        self.programs = frozenset(programs)
        self.distributions = {k: dict(v) for k, v in (distributions or {}).items()}
        for key, dist in self.distributions.items():
            total = sum(dist.values())
            if any(p < 0 for p in dist.values()) or total > 1 + 1e-9:
                raise ValueError(f"distribution for {key!r} must be non-negative and sum to <= 1")
        self.default = dict(default or {})
        self.seed = seed
        self.mean_tokens = mean_tokens
        self.prompt_tokens_per_char = prompt_tokens_per_char
        self.model_name = model_name
        self.returns_logprobs = returns_logprobs
        self.verdict_mass = verdict_mass
        self.step_tokens = step_tokens
        self._seen_prefixes: set[str] = set()
        # Samples already drawn per (key, prompt) by requests without a seed: a repeat continues
        # the stream rather than replaying it, as an engine-level random state would.
        self._drawn: dict[tuple[str, str], int] = {}

    @classmethod
    def for_problems(
        cls, problems: Sequence[Problem], accuracy: float = 0.4, seed: int = 0, **kwargs: object
    ) -> ScriptedGenerator:
        """A generator that answers each problem correctly with probability ``accuracy``.

        Wrong mass goes to two distractors (gold+1 / "gold-wrong" style strings; for a coding
        problem, whose metadata names an ``entry_point``, two mutants of the reference program) and
        a 10% no-answer share, so that voting has something to do.
        """
        dists: dict[str, dict[str, float]] = {}
        for p in problems:
            gold = p.answer if p.answer is not None else "0"
            wrong = 0.9 - accuracy
            if "entry_point" in p.metadata:
                d1, d2 = mutants(gold, str(p.metadata["entry_point"]))
                dists[p.id] = {gold: accuracy, d1: max(wrong, 0) * 0.6, d2: max(wrong, 0) * 0.4}
                continue
            try:
                d1, d2 = str(int(gold) + 1), str(int(gold) - 1)
            except ValueError:
                d1, d2 = f"{gold}'", f"{gold}''"
            dists[p.id] = {gold: accuracy, d1: max(wrong, 0) * 0.6, d2: max(wrong, 0) * 0.4}
        chains = {p.id: (int(p.metadata["start"]), str(p.metadata["ops"]).split(";"))
                  for p in problems if "start" in p.metadata and p.metadata.get("ops")}
        programs = [p.id for p in problems if "entry_point" in p.metadata]
        return cls(dists, seed=seed, chains=chains, programs=programs, **kwargs)  # type: ignore[arg-type]

    @classmethod
    def from_config(cls, config: Any, problems: Sequence[Problem] = ()) -> ScriptedGenerator:
        """Build from a ScriptedBackendConfig: distributions from the problems' gold answers."""
        return cls.for_problems(problems, accuracy=config.accuracy, seed=config.seed, model_name=config.model,
                                thinking=config.thinking)

    @property
    def supports_thinking_budget(self) -> bool:
        """A request's ``thinking_budget`` is honoured (emulated) when the backend plays a thinking model."""
        return self.thinking

    def _thinking_sample(self, req: GenerationRequest, answer: str | None, dist: Mapping[str, float],
                         rng: random.Random) -> Completion:
        """A thinking model's sample (:func:`tts.backends.scripted_thinking.thinking_sample`), with logprobs."""
        comp, tokens = thinking_sample(req, answer, rng, self.mean_tokens, _FILLER)
        if not (req.logprobs and self.returns_logprobs):
            return comp
        mean_lp = self._mean_logprob(answer, dist, rng)
        return dataclasses.replace(comp, mean_logprob=mean_lp, token_logprobs=_token_logprobs(mean_lp, tokens, rng))

    def _draw(self, dist: Mapping[str, float], rng: random.Random) -> str | None:
        u = rng.random()
        acc = 0.0
        for answer, p in dist.items():
            acc += p
            if u < acc:
                return answer
        return None

    def _sample(self, req: GenerationRequest, index: int, prompt: str) -> Completion:
        rng = _rng(self.seed, req.key, req.seed, req.temperature, prompt, req.continuation, index)
        dist = self.distributions.get(req.key, self.default)
        answer = self._draw(dist, rng)
        if req.continuation and _OPEN_BOX.search(req.continuation):
            if req.key in self.chains:  # pushed to answer mid-chain: the value reached so far
                done = CHAIN_STEP.findall(req.continuation)
                answer = done[-1] if done else str(self.chains[req.key][0])
            return self._close_box(req, answer, dist, rng)
        if TIR_REQUEST.search(prompt) and req.key not in self.programs:  # tool-integrated reasoning
            if req.key in self.chains:
                start, ops = self.chains[req.key]
                code = chain_program_reply(start, list(ops), rng, (1 - self.step_accuracy) / 4)
                code = code[code.index("```python\n") + 10: code.rindex("\n```")]
            else:
                code = value_program_reply(answer, rng).removeprefix("```python\n").removesuffix("\n```")
            text, _ = _cut(tir_reply(req.continuation, code), req.stop)
            return self._program_sample(req, answer, dist, rng, text=text)
        if PROGRAM_REQUEST.search(prompt) and req.key not in self.programs:  # program-aided answers
            if req.key in self.chains:
                start, ops = self.chains[req.key]
                # Transcription slips are rarer than arithmetic slips (a quarter as likely).
                text = chain_program_reply(start, list(ops), rng, (1 - self.step_accuracy) / 4)
            else:
                text = value_program_reply(answer, rng)
            return self._program_sample(req, answer, dist, rng, text=text)
        if req.key in self.chains:
            start, ops = self.chains[req.key]
            return chain_sample(req, start, ops, self.step_accuracy, self.returns_logprobs, rng)
        if self.thinking:
            return self._thinking_sample(req, answer, dist, rng)
        if req.tools is not None:
            return self._tool_sample(req, dist, rng)
        if req.key in self.programs:
            return self._program_sample(req, answer, dist, rng)
        if req.key and req.key.endswith("#tests") and req.key[: -len("#tests")] in self.programs:  # CodeT's test requests
            return self._program_sample(req, None, dist, rng, text=tests_reply(prompt, rng))
        # The length of a whole solution, less what a continued partial solution already wrote.
        tokens = max(8, int(rng.lognormvariate(math.log(self.mean_tokens), 0.35)))
        if req.continuation:
            tokens = max(8, tokens - len(req.continuation.split()))
        breaks = self._step_breaks(req, index, prompt, tokens - 8)
        if req.stop:
            if req.confidence_stop is not None:
                raise ValueError("the scripted backend does not emulate confidence_stop together with stop strings")
            return self._until_stop(req, answer, dist, tokens, breaks, rng)
        length_capped = tokens > req.max_tokens
        tokens = min(tokens, req.max_tokens)
        words = [rng.choice(_FILLER) for _ in range(max(tokens - 8, 0))]
        body = "".join(w if i == 0 else (_STEP_END if i in breaks else " ") + w for i, w in enumerate(words))
        if answer is not None and not length_capped:
            text = body + f". The answer is \\boxed{{{answer}}}."
        else:
            text = body + "."
        mean_lp = self._mean_logprob(answer, dist, rng)
        logprobs = req.logprobs and self.returns_logprobs
        finish, eos = ("length", False) if length_capped else ("stop", True)
        token_lps = _token_logprobs(mean_lp, tokens, rng)
        k = max(req.top_logprobs, req.confidence_stop.top_k if req.confidence_stop else 0)
        top = _top_logprobs(token_lps, k) if k else None
        if req.confidence_stop is not None and top:
            # 3. An engine's confidence stop: the end token at the first group below the threshold.
            at = first_stop(token_confidences(top, req.confidence_stop.top_k), req.confidence_stop)
            if at is not None and at < tokens - 1:
                tokens, text, finish, eos = at + 1, " ".join(words[:at]) + ".", CONFIDENCE_STOPPED, False
                token_lps, top = token_lps[:tokens], top[:tokens]
                mean_lp = sum(token_lps) / tokens
        top_back = top if req.top_logprobs and self.returns_logprobs else None
        return Completion(
            text=text,
            completion_tokens=tokens,
            mean_logprob=mean_lp if logprobs else None,
            finish_reason=finish,
            token_logprobs=token_lps if logprobs else None,
            ended_by_eos=eos,
            token_top_logprobs=top_back,
        )

    def _tool_sample(self, req: GenerationRequest, dist: Mapping[str, float], rng: random.Random) -> Completion:
        """A reply to a request that offers tools (:mod:`tts.backends.scripted_tools`), its calls read back."""
        text = tool_reply(req, dist, self._draw, rng)
        tokens, finish = max(8, len(text) // 4), "stop"
        if tokens > req.max_tokens:  # cut mid-reply (a call mid-JSON), as an engine cuts at max_tokens
            text, tokens, finish = text[: req.max_tokens * 4], req.max_tokens, LENGTH
        calls, error = reply_tool_calls(text, req.tools, finish_reason=finish)  # a cut call is no call
        mean_lp = -0.2 - rng.random() * 0.8
        logprobs = req.logprobs and self.returns_logprobs
        return Completion(text=text, completion_tokens=tokens, mean_logprob=mean_lp if logprobs else None,
                          finish_reason="tool_calls" if calls else finish,
                          token_logprobs=_token_logprobs(mean_lp, tokens, rng) if logprobs else None,
                          ended_by_eos=finish != LENGTH, tool_calls=calls, tool_call_error=error)

    def _program_sample(self, req: GenerationRequest, answer: str | None, dist: Mapping[str, float],
                        rng: random.Random, text: str | None = None) -> Completion:
        """A reply with a program in a fenced block (:func:`tts.backends.scripted_code.code_reply`),
        or ``text`` (a reply with test cases)."""
        text = code_reply(answer, rng) if text is None else text
        tokens = max(8, len(text) // 4)
        finish, eos = "stop", True
        if tokens > req.max_tokens:  # cut mid-program, as an engine cuts at max_tokens
            text, tokens, finish, eos = text[: req.max_tokens * 4], req.max_tokens, "length", False
        mean_lp = self._mean_logprob(answer, dist, rng)
        logprobs = req.logprobs and self.returns_logprobs
        return Completion(text=text, completion_tokens=tokens, mean_logprob=mean_lp if logprobs else None,
                          finish_reason=finish, token_logprobs=_token_logprobs(mean_lp, tokens, rng) if logprobs else None,
                          ended_by_eos=eos)

    def _mean_logprob(self, answer: str | None, dist: Mapping[str, float], rng: random.Random) -> float:
        # Confident (high logprob) samples are somewhat more often the distribution's mode.
        mode = max(dist, key=dist.get) if dist else None
        return -rng.uniform(0.05, 0.6) - (0.0 if answer == mode else 0.25)

    def _step_breaks(self, req: GenerationRequest, index: int, prompt: str, words: int) -> set[int]:
        """Word positions that start a new step (a blank line before them); their own stream, so
        that steps do not change the answer, length or logprobs a sample draws."""
        rng = _rng(self.seed, "steps", req.key, req.seed, req.temperature, prompt, index)
        low, high = max(1, self.step_tokens // 2), max(1, self.step_tokens * 3 // 2)
        out, at = set(), rng.randint(low, high)
        while at < words:
            out.add(at)
            at += rng.randint(low, high)
        return out

    def _until_stop(self, req: GenerationRequest, answer: str | None, dist: Mapping[str, float], tokens: int,
                    breaks: set[int], rng: random.Random) -> Completion:
        """A sample of a request with stop strings: generated token by token (a word, a step
        separator and the answer's parts are a token each) until a stop string, ``max_tokens``
        or the end of the solution, as vLLM does."""
        pieces: list[str] = []
        for i in range(tokens - 8):
            if i in breaks:
                pieces.append(_STEP_END)
            pieces.append(("" if i == 0 or i in breaks else " ") + rng.choice(_FILLER))
        if answer is not None:
            pieces += [". The" if pieces else "The", " answer", " is", " \\", "boxed{", answer, "}", "."]
        else:
            pieces.append(".")
        text, finish, eos, count = emit(pieces, req.stop, req.max_tokens)
        mean_lp = self._mean_logprob(answer, dist, rng)
        logprobs = req.logprobs and self.returns_logprobs
        return Completion(
            text=text,
            completion_tokens=count,
            mean_logprob=mean_lp if logprobs else None,
            finish_reason=finish,
            token_logprobs=_token_logprobs(mean_lp, count, rng) if logprobs else None,
            ended_by_eos=eos,
        )

    def _close_box(self, req: GenerationRequest, answer: str | None, dist: Mapping[str, float],
                   rng: random.Random) -> Completion:
        """The rest of a continuation that stops inside ``\\boxed{``: the answer, then the end (a
        sample that draws no answer fills the box with a word, as a model pushed to answer does)."""
        text, _ = _cut(f"{answer if answer is not None else rng.choice(_FILLER)}}}$.", req.stop)
        tokens = min(3, req.max_tokens)
        mean_lp = self._mean_logprob(answer, dist, rng)
        logprobs = req.logprobs and self.returns_logprobs
        return Completion(
            text=text,
            completion_tokens=tokens,
            mean_logprob=mean_lp if logprobs else None,
            finish_reason="stop",
            token_logprobs=_token_logprobs(mean_lp, tokens, rng) if logprobs else None,
            ended_by_eos=True,
        )

    def p_yes(self, req: GenerationRequest, prompt: str) -> float:
        """The scripted judge's probability that the text a verdict request judges is right
        (:func:`tts.backends.scripted_judge.p_yes`)."""
        return p_yes(self.distributions.get(req.key, self.default), self.seed, req, prompt)

    def _verdict(self, req: GenerationRequest, index: int, prompt: str) -> Completion:
        return verdict_sample(req, index, prompt, self.p_yes(req, prompt), self.seed, self.verdict_mass,
                              self.returns_logprobs)

    def prompt_tokens(self, request: GenerationRequest) -> int:
        """Prompt length of a request under this backend's length model."""
        return max(1, int(len(_prompt_text(request)) * self.prompt_tokens_per_char))

    def generate(self, requests: Sequence[GenerationRequest]) -> list[GenerationResult]:
        """Sample every request; usage counts a repeated prompt as cached (like prefix caching)."""
        if not self.thinking and any(r.thinking_budget is not None for r in requests):
            raise ValueError("the scripted backend honours thinking_budget only as a thinking model: build it with "
                             "thinking=True, or leave the request's thinking_budget None")
        results = []
        for req in requests:
            start = time.perf_counter()
            prompt = _prompt_text(req)
            if req.seed is None:
                offset = self._drawn.get((req.key, prompt), 0)
                self._drawn[(req.key, prompt)] = offset + req.n
            else:
                offset = 0  # a seeded request is reproducible: same seed, same samples
            draw = self._verdict if req.messages and VERDICT_REQUEST.search(req.messages[-1].content) else self._sample
            completions = tuple(_with_request_options(req, draw(req, offset + i, prompt)) for i in range(req.n))
            prompt_tokens = self.prompt_tokens(req)
            cached = prompt_tokens if prompt in self._seen_prefixes else 0
            self._seen_prefixes.add(prompt)
            usage = request_usage(
                prompt_tokens,
                cached,
                [c.completion_tokens for c in completions],
                time.perf_counter() - start,
                batch_sequences=sum(r.n for r in requests),
                reasoning_tokens=count_reasoning_tokens(completions),
            )
            results.append(GenerationResult(completions, usage))
        return results

    def stream_samples(self, requests: Sequence[GenerationRequest]) -> SimulatedStream:
        """The samples of ``generate(requests)`` as an engine decoding them together would stream
        them, shortest first, with cancellation (:class:`~tts.backends.streaming.SimulatedStream`)."""
        return SimulatedStream(self, requests)

    def close(self) -> None:
        """Nothing to release."""
