"""Generators made of a Python function, and a recorder around any generator: for tests of
strategies, verifiers and agents (in tts and in plugins) that need a model whose replies they
choose, without an engine.

``FunctionGenerator(reply)`` calls ``reply(request)`` once per request and turns what it returns
(texts, or :class:`~tts.backends.base.Completion` values) into the request's ``n`` completions,
with usage counted as a backend counts it (the prompt once per request, completion tokens per
sample; a word counts as a token). ``RecordingGenerator(inner)`` passes every call to another generator and keeps the
requests and results of each call, so a test can assert what a strategy asked for (one engine call
per step, the prompts it built, the settings it passed) and what it was given back.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from tts.backends.base import Completion, GenerationRequest, GenerationResult, request_usage
from tts.backends.thinking import count_reasoning_tokens

Reply = str | Completion
"""One sample of a reply function: its text (token count: its words) or a whole completion."""


def _completion(reply: Reply) -> Completion:
    if isinstance(reply, Completion):
        return reply
    return Completion(reply, max(1, len(reply.split())), finish_reason="stop")


class RecordingGenerator:
    """Any generator, with the requests of each ``generate`` call kept in :attr:`calls` and its
    results in :attr:`results` (one list per call, in the same order).

    Args:
        inner: The generator that answers.
    """

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.calls: list[list[GenerationRequest]] = []
        self.results: list[list[GenerationResult]] = []

    @property
    def requests(self) -> list[GenerationRequest]:
        """Every request of every call, in order."""
        return [r for call in self.calls for r in call]

    def generate(self, requests: Sequence[GenerationRequest]) -> list[GenerationResult]:
        self.calls.append(list(requests))
        results = self.inner.generate(requests)
        self.results.append(list(results))
        return results

    def close(self) -> None:
        close = getattr(self.inner, "close", None)
        if close is not None:
            close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


class FunctionGenerator(RecordingGenerator):
    """A model whose replies a function writes.

    Args:
        reply: ``request -> replies``: one text or :class:`Completion`, or a sequence of them; the
            request's ``n`` samples cycle through the sequence (a single reply is repeated).
        model_name: The name usage and traces report.
    """

    def __init__(self, reply: Callable[[GenerationRequest], Reply | Sequence[Reply]], model_name: str = "function") -> None:
        super().__init__(inner=None)
        self.reply = reply
        self.model_name = model_name

    def generate(self, requests: Sequence[GenerationRequest]) -> list[GenerationResult]:
        self.calls.append(list(requests))
        results = []
        for request in requests:
            out = self.reply(request)
            replies = [out] if isinstance(out, str | Completion) else list(out)
            if not replies:
                raise ValueError("a FunctionGenerator's reply function returned no reply")
            completions = tuple(_completion(replies[i % len(replies)]) for i in range(request.n))
            prompt = sum(len(str(m.content or "").split()) for m in request.messages)  # words, as tokens
            usage = request_usage(prompt, 0, [c.completion_tokens for c in completions], 0.0,
                                  reasoning_tokens=count_reasoning_tokens(completions))
            results.append(GenerationResult(completions, usage))
        self.results.append(list(results))
        return results

    def close(self) -> None:
        pass

    def __getattr__(self, name: str) -> Any:
        raise AttributeError(name)
