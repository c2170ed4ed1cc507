"""Helpers shared by the search tests: the toy digit space's targets, chosen leaf and a never-ending
space, a verifier that fails on cue, a registered toy verifier config, and the adding step model
with its problems.

The tests run with ``--import-mode=importlib``, so test modules cannot import each other or this
file: each helper is a fixture that returns the function or class.
"""

from __future__ import annotations

import hashlib
import itertools
import math
import random
import re

import pytest

from tts.backends.base import Completion, GenerationResult, request_usage
from tts.search.tree.stepwise import ANSWER_NUDGE
from tts.search.tree.toy import DigitSpace
from tts.types import Problem, Usage
from tts.verifiers.base import VerifierScore
from tts.verifiers.function import FunctionVerifier

LENGTH, BASE = 5, 4
"""The toy space the search tests use: strings of LENGTH digits in base BASE."""

SEP = "\n\n"


# --- the toy digit space --------------------------------------------------------------------------


ADDITION = re.compile(r"(\d+) \+ (\d+) = (-?\d+)")
"""An addition a step states: its two terms and its sum."""


def _targets(count: int, seed: int = 0, length: int = LENGTH, base: int = BASE) -> list[str]:
    rng = random.Random(seed)
    return ["".join(str(rng.randrange(base)) for _ in range(length)) for _ in range(count)]


def _chosen(result):
    """The candidate a verifier-selecting strategy returns: the best-scored leaf (first on ties)."""
    return max(result.leaf_nodes, key=lambda node: node.score)


@pytest.fixture
def targets():
    """``targets(count, seed=0)``: ``count`` random target strings of the toy space."""
    return _targets


@pytest.fixture
def chosen():
    """``chosen(result)``: the best-scored leaf of a search result (first on ties)."""
    return _chosen


class Endless(DigitSpace):
    """A toy space whose strings never finish."""

    def is_terminal(self, state):
        return False


@pytest.fixture
def endless():
    """``endless(targets, ...)``: a toy space whose strings never finish (:class:`Endless`)."""
    return Endless


def _flaky(fail_on_call: int = 1, nan_on_call: int | None = None) -> FunctionVerifier:
    """A verifier that raises on call ``fail_on_call``, scores NaN on call ``nan_on_call`` and 0.5 otherwise."""

    def reward(state):
        call = len(verifier.calls)  # this call included
        if call == fail_on_call:
            raise TimeoutError("verifier timed out")
        return VerifierScore((), math.nan if call == nan_on_call else 0.5)

    verifier = FunctionVerifier.of_items(reward)
    return verifier


@pytest.fixture
def flaky():
    """``flaky(fail_on_call=1, nan_on_call=None)``: a verifier that fails on one call (:func:`_flaky`)."""
    return _flaky


def _addition_checker(nan_every: int = 0) -> FunctionVerifier:
    """1 when every addition ("a + b = c") an item states holds, else 0, at one prompt token per
    step and one call per item; with ``nan_every``, NaN for every such item (an invalid score)."""
    seen = itertools.count(1)

    def reward(item) -> VerifierScore:
        count = next(seen)
        ok = all(int(a) + int(b) == int(c) for s in item.steps for a, b, c in ADDITION.findall(s))
        value = math.nan if nan_every and count % nan_every == 0 else float(ok)
        return VerifierScore((), value, Usage(prompt_tokens=len(item.steps), calls=1))

    return FunctionVerifier.of_items(reward, name="addition_checker")


@pytest.fixture
def addition_checker():
    """``addition_checker(nan_every=0)``: a verifier of the step model's additions (:func:`_addition_checker`)."""
    return _addition_checker


@pytest.fixture
def toy_verifier():
    """``toy_verifier(kind)`` registers a verifier config of that kind, so that strategy configs naming
    it validate without the real verifiers; unregistered after the test."""
    from typing import Literal

    from pydantic import create_model

    from tts.config import VerifierConfigBase
    from tts.registry import VERIFIERS

    registered = []

    def register(kind: str) -> None:
        class Toy(FunctionVerifier):
            """A verifier kind for configs only: the tests hand the search its verifier object."""

            config_class = create_model("ToyConfig", __base__=VerifierConfigBase, kind=(Literal[kind], kind))

            @classmethod
            def from_config(cls, config, generator=None):
                raise AssertionError("a toy verifier is passed to the search, never built from its config")

        VERIFIERS.register(kind, Toy)
        registered.append(kind)

    yield register
    for kind in registered:
        VERIFIERS.unregister(kind)


# --- the adding step model ------------------------------------------------------------------------


def Out(text: str, completion_tokens: int, mean_logprob: float | None = -0.3,
        finish_reason: str | None = "stop", stop_reason: str | None = SEP) -> Completion:
    """A completion as vLLM reports it: a stop string in ``stop_reason``, None at end of sequence."""
    return Completion(text, completion_tokens, mean_logprob, finish_reason,
                      ended_by_eos=finish_reason == "stop" and stop_reason is None)


def _rng(*parts: object) -> random.Random:
    return random.Random(int.from_bytes(hashlib.sha256("|".join(map(str, parts)).encode()).digest()[:8], "little"))


class StepModel:
    """Adds the numbers of "What is a + b + c + d?" one step at a time ("3 + 5 = 8"), honouring
    continuation and stop, then states "The answer is \\boxed{..}."; records its calls and usage.

    Args:
        slip: Probability that a step's sum is off by one or two.
        never_answers: Keep adding "+ 0" steps forever (the depth cap must force an answer).
        empty: Probability that a step comes back empty.
        ends: Probability that the model ends its message (end of sequence) instead of a step.
        flat_prompt: Every request costs 20 prompt tokens; otherwise one more per 4 characters of
            its continuation.
    """

    model_name = "step-model"

    def __init__(self, slip: float = 0.3, seed: int = 0, never_answers: bool = False, empty: float = 0.0,
                 ends: float = 0.0, tokens_per_step: int = 10, flat_prompt: bool = False) -> None:
        self.slip, self.seed, self.never_answers = slip, seed, never_answers
        self.empty, self.ends, self.tokens_per_step = empty, ends, tokens_per_step
        self.flat_prompt = flat_prompt
        self.calls: list[list] = []
        self.usage = Usage()

    def generate(self, requests):
        self.calls.append(list(requests))
        out = []
        for req in requests:
            comps = tuple(self._one(req, i) for i in range(req.n))
            prompt = 20 if self.flat_prompt else 20 + len(req.continuation) // 4
            usage = request_usage(prompt, 0, [c.completion_tokens for c in comps], 0.001)
            out.append(GenerationResult(comps, usage))
            self.usage = self.usage + usage
        return out

    def _one(self, req, i: int) -> Completion:
        rng = _rng(self.seed, req.seed, req.continuation, i)
        numbers = [int(x) for x in re.findall(r"\d+", req.messages[-1].content.split("?")[0])]
        sums = re.findall(r"= (-?\d+)", req.continuation)
        total = int(sums[-1]) if sums else numbers[0]
        if req.continuation.endswith(ANSWER_NUDGE):
            return Out(f"{total}}}$.", 4, stop_reason=None)
        if rng.random() < self.ends:
            return Out("", 0, stop_reason=None)
        if rng.random() < self.empty:
            return Out("", 1)
        done = len(sums)
        if done >= len(numbers) - 1 and not self.never_answers:
            return Out(f"The answer is \\boxed{{{total}}}.", 8)
        nxt = 0 if done >= len(numbers) - 1 else numbers[done + 1]
        wrote = total + nxt + (rng.choice((-2, -1, 1, 2)) if rng.random() < self.slip else 0)
        tokens = min(self.tokens_per_step, req.max_tokens)
        reason = "length" if tokens < self.tokens_per_step else "stop"
        return Out(f"{total} + {nxt} = {wrote}", tokens, finish_reason=reason)


def _addition_problems(count: int, seed: int = 0) -> list[Problem]:
    rng = random.Random(seed)
    out = []
    for i in range(count):
        numbers = [rng.randrange(1, 10) for _ in range(4)]
        out.append(Problem(f"q{i}", f"What is {' + '.join(map(str, numbers))}?", str(sum(numbers))))
    return out


@pytest.fixture
def step_model():
    """``step_model(slip=0.3, seed=0, ...)``: a :class:`StepModel`."""
    return StepModel


@pytest.fixture
def addition_problems():
    """``addition_problems(count, seed=0)``: problems "What is a + b + c + d?" with digits 1 to 9, ids q0, q1, ..."""
    return _addition_problems
