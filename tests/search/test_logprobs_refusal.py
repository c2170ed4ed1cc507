"""A backend that knows it returns no token log-probabilities (``logprobs_unavailable`` says why: a
hosted provider such as Anthropic through LiteLLM) refuses the strategies whose answers rest on them when
they are built, before any request, with one line; every other strategy runs."""

from __future__ import annotations

import pytest

import tts
from tts.backends.scripted import ScriptedGenerator
from tts.search.base import MissingLogprobsError
from tts.types import Problem


class NoLogprobs(ScriptedGenerator):
    """The scripted backend, saying what a provider without logprobs says; counts its calls."""

    logprobs_unavailable = "provider/no-logprobs returns none"

    def __init__(self) -> None:
        super().__init__(default={"5": 0.9, "4": 0.1}, seed=0, model_name="provider/no-logprobs",
                         returns_logprobs=False)
        self.calls = 0

    def generate(self, requests, *args, **kwargs):
        self.calls += 1
        return super().generate(requests, *args, **kwargs)


@pytest.mark.parametrize(("strategy", "says"), [
    ({"kind": "deepconf"}, "deepconf weighs traces by token confidence"),
    ({"kind": "best_of_n"}, "best_of_n ranks samples by their token log-probabilities"),
    ({"kind": "weighted_vote"}, "weighted_vote ranks samples by their token log-probabilities"),
    ({"kind": "best_of_n", "verifier": "logprob"}, "scores samples with the logprob verifier"),
    ({"kind": "weighted_vote", "verifier": "self_certainty"}, "scores samples with the self_certainty verifier"),
])
def test_a_strategy_that_reads_logprobs_is_refused_before_any_request(strategy, says):
    gen = NoLogprobs()
    with pytest.raises(MissingLogprobsError) as err:
        tts.solve(Problem("p", "What is 2+3?", answer="5"), strategy=strategy, n=4, generator=gen)
    message = str(err.value)
    assert says in message and "provider/no-logprobs returns none" in message and "\n" not in message
    assert gen.calls == 0


@pytest.mark.parametrize("strategy", ["self_consistency", {"kind": "best_of_n", "verifier": "arithmetic"},
                                      "certainty_probe", "usc"])
def test_strategies_that_do_not_read_logprobs_run(strategy):
    gen = NoLogprobs()
    sol = tts.solve(Problem("p", "What is 2+3?", answer="5"), strategy=strategy, n=4, generator=gen)
    assert gen.calls >= 1 and sol.usage.calls >= 1


def test_a_backend_that_returns_logprobs_runs_them():
    gen = ScriptedGenerator(default={"5": 0.9, "4": 0.1}, seed=0)
    sol = tts.solve(Problem("p", "What is 2+3?", answer="5"), strategy="deepconf", n=4, generator=gen)
    assert sol.usage.calls >= 1


def test_the_refusal_names_the_strategy_why_and_the_three_ways_out():
    with pytest.raises(MissingLogprobsError) as err:
        tts.solve(Problem("p", "What is 2+3?", answer="5"), strategy="best_of_n", n=4, generator=NoLogprobs())
    assert str(err.value) == (
        "best_of_n ranks samples by their token log-probabilities, but provider/no-logprobs returns none; use "
        "self_consistency (or a verifier that does not read them), or a model whose provider returns logprobs")


def test_a_plugin_strategy_without_a_name_is_named_by_its_class_in_the_refusal():
    from tts.config import SamplingStrategyConfig
    from tts.search.base import Strategy

    class Unnamed(Strategy):
        config_class = SamplingStrategyConfig

        def logprobs_use(self):
            return "reads token log-probabilities"

        def solve(self, problems, budgets=None):
            return []

    with pytest.raises(MissingLogprobsError) as err:
        Unnamed(SamplingStrategyConfig.model_construct(), NoLogprobs(), lambda p: ())
    assert str(err.value) == (
        "Unnamed reads token log-probabilities, but provider/no-logprobs returns none; use self_consistency (or a "
        "verifier that does not read them), or a model whose provider returns logprobs")
