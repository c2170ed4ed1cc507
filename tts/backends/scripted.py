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
benchmark's do) are worked out instead of drawn: one numbered equation per step ("2. 12 * 2 = 24"), steps
separated by blank lines, then "The answer is N." Each step slips with probability
``1 - step_accuracy``, half the time by misstating the result (a false equality, which the
arithmetic verifier catches) and half by applying the wrong operation correctly (a true equality
carrying a wrong value, which it does not); the value a slip leaves is carried on. A partial
solution is continued from its last stated value, so a step-wise search really branches and a
step verifier really prunes, as on the real model.

Top logprobs (``top_logprobs`` > 0) fill ``token_top_logprobs`` of ordinary samples with an
emulation (:func:`_top_logprobs`). A ``confidence_stop`` request is carried out as an engine
would (DeepConf online): the sample's per-position confidences are computed from that emulation,
and a sample whose group confidence falls below the threshold ends there (``finish_reason``
"confidence", no answer, the tokens up to and including the forced end counted); the samples it
does not stop are exactly those drawn without it.

Structured output (``json_schema``) is emulated: the sample's answer comes as ``{"answer": ...}``
(null when it has none), whatever the schema. Samples with logprobs carry their text cut into as
many pieces as tokens (``Completion.tokens``). Penalties and ``logit_bias`` change nothing here.

It also plays an LLM judge, so that verifiers that ask the policy model for a verdict can be
tested: a request whose last message asks for "Yes or No" is a *verdict request*. The judged
answer is the last ``\\boxed{...}`` in that message; the probability of "Yes" is drawn high
(0.55-0.95) when it is the mode of the key's distribution, low (0.05-0.45) when it is another
answer and in between (0.2-0.6) when there is none, fixed per judged text. With
:meth:`ScriptedGenerator.for_problems` at accuracy above ~0.34 the mode is the gold answer, so
the judge is informative (right answers get higher P(Yes) on average) but noisy. The verdict's
first-token top logprobs (``top_logprobs``) put ``verdict_mass`` on "Yes"/"No"; sampled
verdicts end in "Yes." or "No." (greedy: the likelier one). Other requests get no first-token
alternatives.

With ``thinking=True`` it plays a thinking model: replies are ``<think>`` thought ``</think>``
answer, with their reasoning tokens counted apart, and a request's ``thinking_budget`` is honoured
as vLLM's engine honours it (:mod:`tts.backends.scripted_thinking`; chains and verdicts are
answered as without it). Without it, a request with a ``thinking_budget`` is refused.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import random
import re
import time
from collections.abc import Mapping, Sequence
from fractions import Fraction
from typing import Any

from tts.backends.base import (
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
from tts.backends.scripted_thinking import emit, thinking_sample
from tts.backends.scripted_tools import tool_reply
from tts.backends.tool_calls import reply_tool_calls
from tts.types import Problem

_FILLER = ("we", "compute", "the", "value", "step", "by", "carefully", "so", "then", "check")
_VERDICT_REQUEST = re.compile(r"\byes\s+or\s+no\b", re.IGNORECASE)
_BOXED = re.compile(r"\\boxed\{([^{}]*)\}")
_OPEN_BOX = re.compile(r"\\boxed\{[^{}]*$")  # a continuation that stops inside a box
STEP_SEPARATOR = "\n\n"
"""What the scripted model writes between the steps of a solution."""
_STEP_END = "." + STEP_SEPARATOR
# First tokens a judge puts its remaining probability on when it does not answer Yes/No at once.
_OTHER_FIRST_TOKENS = ("The", "I", "To", "Let", "This")


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


_CHAIN_STEP = re.compile(r"=\s*(-?\d+(?:\.\d+)?)\s*(?:\n|$)")
"""The value a chain step states (the right side of its equation, at the end of its line)."""
_CHAIN_ANSWER = re.compile(r"[Tt]he answer is (-?\d+(?:\.\d+)?)")


def _apply(value: Fraction, op: str) -> Fraction:
    """``value`` after an arithmetic suffix ("+ 5", "* 2", "/ 2")."""
    sign, operand = op.split()
    a = Fraction(operand)
    return {"+": value + a, "-": value - a, "*": value * a, "/": value / a}[sign]


def _number(value: Fraction) -> str:
    """A chain value as a model writes it: "12", "3.5" (a slip can make a half of an odd number)."""
    return str(value.numerator) if value.denominator == 1 else format(float(value), "g")


def _prompt_text(req: GenerationRequest) -> str:
    """The prompt as one text: each message (its tool calls too), the tools offered, the continuation."""
    lines = [f"{m.role}: {m.content}" + "".join(f" [{c.name}({c.arguments})]" for c in m.tool_calls)
             for m in req.messages]
    return "\n".join(lines + ([f"tools: {req.tools}"] if req.tools else [])) + req.continuation


def _rng(*parts: object) -> random.Random:
    digest = hashlib.sha256("|".join(map(str, parts)).encode()).digest()
    return random.Random(int.from_bytes(digest[:8], "little"))


def _cut(text: str, stop: Sequence[str]) -> tuple[str, bool]:
    """``text`` up to its first stop string (excluded), and whether one was found."""
    hits = [at for at in (text.find(s) for s in stop if s) if at >= 0]
    return (text[: min(hits)], True) if hits else (text, False)


def _top_logprobs(token_logprobs: Sequence[float], k: int) -> tuple[tuple[float, ...], ...]:
    """Emulated top-k log-probabilities of every position (largest first): the sampled token's
    probability p and k - 1 alternatives sharing the rest, 1 - p, geometrically, decaying faster
    when p is high. A confident position thus has far-off alternatives and a high DeepConf token
    confidence, an uncertain one close alternatives and a low one, as a real model's do."""
    out = []
    for lp in token_logprobs:
        p = math.exp(lp)
        rest = max(1.0 - p, 1e-12)
        slope = 0.2 + 2.0 * p
        base = math.log(rest * (1.0 - math.exp(-slope)))
        out.append(tuple(sorted([lp] + [base - slope * j for j in range(k - 1)], reverse=True)))
    return tuple(out)


def _token_logprobs(mean_logprob: float, tokens: int, rng: random.Random) -> tuple[float, ...]:
    """Per-token logprobs whose mean is ``mean_logprob``: a few uncertain tokens among confident
    ones (exponential weights), all <= 0, as a real sample's are."""
    weights = [rng.expovariate(1.0) for _ in range(tokens)]
    scale = tokens / (sum(weights) or 1.0)
    return tuple(mean_logprob * w * scale for w in weights)


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
                done = _CHAIN_STEP.findall(req.continuation)
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
            return self._chain_sample(req, rng)
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
        tokens = min(max(8, len(text) // 4), req.max_tokens)
        calls, error = reply_tool_calls(text, req.tools)
        mean_lp = -0.2 - rng.random() * 0.8
        logprobs = req.logprobs and self.returns_logprobs
        return Completion(text=text, completion_tokens=tokens, mean_logprob=mean_lp if logprobs else None,
                          finish_reason="tool_calls" if calls else "stop",
                          token_logprobs=_token_logprobs(mean_lp, tokens, rng) if logprobs else None,
                          ended_by_eos=True, tool_calls=calls, tool_call_error=error)

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

    def _chain_sample(self, req: GenerationRequest, rng: random.Random) -> Completion:
        """A chain worked out from where the request's partial solution left it (module docstring)."""
        start, ops = self.chains[req.key]
        done = _CHAIN_STEP.findall(req.continuation)
        steps: list[str] = []
        slipped = False
        stated = _CHAIN_ANSWER.findall(req.continuation)
        if stated:  # asked again after the answer line (an answer phase after thinking): restate it
            steps = [f"The answer is {stated[-1]}."]
        else:
            value = Fraction(done[-1]) if done else Fraction(start)
            for op in ops[len(done):]:
                right = _apply(value, op)
                if rng.random() < self.step_accuracy:
                    new, said = right, right
                elif rng.random() < 0.5:  # misstated result: a false equality
                    new = said = right + rng.choice((-2, -1, 1, 2))
                    slipped = True
                else:  # another operation, applied correctly: a true equality, a wrong value
                    op = rng.choice([o for o in ("+ 1", "+ 2", "- 1", "* 2", "+ 3") if o != op])
                    new = said = _apply(value, op)
                    slipped = True
                steps.append(f"{len(done) + len(steps) + 1}. {_number(value)} {op} = {_number(said)}")
                value = new
            steps.append(f"The answer is {_number(value)}.")
        # What of the separator the partial solution still lacks (all of it, or the held-back rest).
        held = next((k for k in range(len(STEP_SEPARATOR), 0, -1) if req.continuation.endswith(STEP_SEPARATOR[:k])), 0)
        lead = STEP_SEPARATOR[held:] if req.continuation and steps else ""
        text = lead + STEP_SEPARATOR.join(steps)
        text, stopped = _cut(text, req.stop)
        pieces = re.findall(r"\s*\S+|\s+$", text) or [text]
        finish, eos = ("stop", not stopped)
        if len(pieces) > req.max_tokens:
            pieces, finish, eos = pieces[: req.max_tokens], "length", False
            text = "".join(pieces)
        tokens = max(1, len(pieces))
        mean_lp = -rng.uniform(0.05, 0.4) - (0.25 if slipped else 0.0)  # slips are less confident
        token_lps = _token_logprobs(mean_lp, tokens, rng)
        logprobs = req.logprobs and self.returns_logprobs
        k = req.top_logprobs
        top = _top_logprobs(token_lps, k) if k and self.returns_logprobs else None
        return Completion(text=text, completion_tokens=tokens, mean_logprob=mean_lp if logprobs else None,
                          finish_reason=finish, token_logprobs=token_lps if logprobs else None, ended_by_eos=eos,
                          token_top_logprobs=top)

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
        """The scripted judge's probability that the text a verdict request judges is right."""
        dist = self.distributions.get(req.key, self.default)
        mode = max(dist, key=dist.get) if dist else None
        boxed = _BOXED.findall(req.messages[-1].content + req.continuation) if req.messages else []
        answer = boxed[-1].strip() if boxed else None
        low, high = (0.2, 0.6) if answer is None else (0.55, 0.95) if answer == mode else (0.05, 0.45)
        return _rng(self.seed, "verdict", req.key, prompt).uniform(low, high)

    def _verdict(self, req: GenerationRequest, index: int, prompt: str) -> Completion:
        rng = _rng(self.seed, "verdict-sample", req.key, req.seed, req.temperature, prompt, index)
        p = self.p_yes(req, prompt)
        yes_mass, no_mass = self.verdict_mass * p, self.verdict_mass * (1 - p)
        other = (1.0 - self.verdict_mass) / len(_OTHER_FIRST_TOKENS)
        choices = {"Yes": yes_mass, "No": no_mass, **dict.fromkeys(_OTHER_FIRST_TOKENS, other)}
        if req.temperature == 0:
            first = max(choices, key=lambda t: choices[t])
        else:
            first = rng.choices(list(choices), weights=list(choices.values()))[0]
        if req.max_tokens <= 2:
            text, tokens = first, 1
        else:
            verdict = first if first in ("Yes", "No") else None
            words = [rng.choice(_FILLER) for _ in range(min(req.max_tokens - 4, rng.randint(6, 40)))]
            text = " ".join(words) + (f". {verdict}." if verdict else ".")
            tokens = min(req.max_tokens, len(words) + 3)
        text, stopped = _cut(text, req.stop)
        if stopped:
            tokens = min(tokens, len(text.split()) + 1)
        mean_lp = math.log(max(choices[first], 1e-9)) / tokens - rng.uniform(0.05, 0.4)
        top = None
        if req.top_logprobs and self.returns_logprobs:
            ranked = sorted(((t, q) for t, q in choices.items() if q > 0), key=lambda tq: -tq[1])
            top = {t: math.log(q) for t, q in ranked[: req.top_logprobs]}
        logprobs = req.logprobs and self.returns_logprobs
        return Completion(
            text=text,
            completion_tokens=tokens,
            mean_logprob=mean_lp if logprobs else None,
            finish_reason="stop",
            token_logprobs=_token_logprobs(mean_lp, tokens, rng) if logprobs else None,
            first_token_top_logprobs=top,
        )

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
            draw = self._verdict if req.messages and _VERDICT_REQUEST.search(req.messages[-1].content) else self._sample
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
                reasoning_tokens=sum(c.reasoning_tokens or 0 for c in completions),
            )
            results.append(GenerationResult(completions, usage))
        return results

    def close(self) -> None:
        """Nothing to release."""
