"""The budget type and the pricer unit by unit (tts.budgets.pricing): every form a budget is read
from and every refusal's message, what a solve's budget allows, and what an allocator's plan
counts in each unit, against a cost model whose prices are worked out by hand."""

from __future__ import annotations

import math
from dataclasses import dataclass

import pytest

from tts.budgets.pricing import FORMS, BudgetError, ComputeBudget, Pricer, make_pricer
from tts.cost.token_prices import TokenPrice
from tts.types import RequestShape, Usage


@dataclass
class _Cost:
    eflops: float
    seconds: float
    gpus: int = 1

    @property
    def gpu_seconds(self) -> float:  # as tts.cost.cost_model.Cost: every GPU of the replica is paid for
        return self.seconds * self.gpus


class _Model:
    """Prices a request as prompt - cached + 10 per generated token eFLOPs and one second per
    token read or generated, on ``gpus`` GPUs at once; records what it was asked."""

    def __init__(self, gpus: int = 1) -> None:
        self.asked: list[tuple] = []
        self.gpus = gpus

    def cost_request(self, prompt, lengths, cached=0):
        self.asked.append((prompt, list(lengths), cached))
        tokens = prompt - cached + sum(lengths)
        return _Cost(eflops=prompt - cached + 10 * sum(lengths), seconds=float(tokens), gpus=self.gpus)

    def cost_usage(self, usage):
        return _Cost(eflops=7.0, seconds=float(usage.completion_tokens), gpus=self.gpus)


def _pricer(unit="tokens", **kw):
    return Pricer(unit, cost_model=kw.pop("cost_model", _Model()), **kw)


# --- ComputeBudget -----------------------------------------------------------------------------


@pytest.mark.parametrize("amount", [0, -1, math.nan, math.inf, True, "5", None])
def test_a_budget_is_a_finite_number_above_zero(amount):
    with pytest.raises(BudgetError) as err:
        ComputeBudget(amount, "tokens")
    assert str(err.value) == f"a budget must be a finite number above 0, got {amount!r} tokens"
    assert ComputeBudget(1e-9, "dollars").amount == 1e-9


def test_a_budget_in_an_unknown_unit_names_the_units():
    with pytest.raises(BudgetError) as err:
        ComputeBudget(5, "joules")
    assert str(err.value) == "budget unit 'joules' is unknown; use one of tokens, eflops, gpu_seconds, dollars"


@pytest.mark.parametrize(("given", "unit", "expected"), [
    ("4000", None, ComputeBudget(4000, "tokens")), ("4000", "dollars", ComputeBudget(4000, "dollars")),
    (" 0.5   dollars ", None, ComputeBudget(0.5, "dollars")), ("2 gpu_seconds", "dollars", ComputeBudget(2, "gpu_seconds")),
    ({"amount": 3}, None, ComputeBudget(3, "tokens")), ({"amount": 3}, "eflops", ComputeBudget(3, "eflops")),
    ({"amount": 3, "unit": "dollars"}, "eflops", ComputeBudget(3, "dollars")),
    ({"eflops": 2}, "dollars", ComputeBudget(2, "eflops")), (7.5, "gpu_seconds", ComputeBudget(7.5, "gpu_seconds")),
])
def test_a_budget_is_read_with_the_unit_it_names_else_the_unit_given_else_tokens(given, unit, expected):
    assert ComputeBudget.parse(given, unit) == expected


def test_a_budget_passes_through_parse_as_itself():
    budget = ComputeBudget(1, "dollars")
    assert ComputeBudget.parse(budget) is budget and ComputeBudget.parse(None) is None


@pytest.mark.parametrize("given", ["", "   ", "abc", "nan", "nan tokens", "1 2 3", "tokens 5", True,
                                   {"dollars": 0.01, "tokens": 5}, {"amount": 1, "scale": 2}, {}, [4000]])
def test_anything_else_is_refused_with_the_forms_that_work(given):
    with pytest.raises(BudgetError) as err:
        ComputeBudget.parse(given)
    assert str(err.value) == f"cannot read a budget from {given!r}; give {FORMS}"


def test_a_bad_unit_or_amount_inside_a_good_form_says_what_is_wrong():
    with pytest.raises(BudgetError, match="budget unit 'joules' is unknown"):
        ComputeBudget.parse("5 joules")
    with pytest.raises(BudgetError, match="finite number above 0, got -1.0 tokens"):
        ComputeBudget.parse("-1")


def test_a_budget_prints_and_serialises_as_amount_and_unit():
    assert str(ComputeBudget(0.5, "dollars")) == "0.5 dollars" and str(ComputeBudget(4000)) == "4000 tokens"
    assert ComputeBudget(0.5, "dollars").as_dict() == {"amount": 0.5, "unit": "dollars"}


# --- building a Pricer ---------------------------------------------------------------------------


def test_a_pricer_refuses_what_it_cannot_price():
    with pytest.raises(ValueError) as err:
        Pricer("joules")
    assert str(err.value) == "unknown budget unit 'joules'; use one of tokens, eflops, gpu_seconds, dollars, samples"
    with pytest.raises(ValueError) as err:
        Pricer("gpu_seconds")
    assert str(err.value) == "budget unit gpu_seconds needs the model's cost model (its architecture and a GPU)"
    with pytest.raises(ValueError) as err:
        Pricer("dollars", cost_model=_Model(), gpu="cpu")
    assert str(err.value) == "budget unit dollars needs the GPU's price per hour"
    assert Pricer("dollars", cost_model=_Model(), gpu="cpu", usd_per_hour=1.0).unit == "dollars"
    assert Pricer("dollars", cost_model=_Model(), gpu="cpu", prices={"cpu": 1.0}).unit == "dollars"
    for bad in (0.0, -1.0, math.nan):
        with pytest.raises(ValueError) as err:
            Pricer("tokens", efficiency=bad)
        assert str(err.value) == f"efficiency must be a positive factor, got {bad}"
    assert Pricer("tokens").cost_model is None and Pricer("samples").unit == "samples"


def test_for_model_prices_a_known_model_and_says_why_it_cannot_price_another():
    priced = Pricer.for_model("smollm2-135m", "h100", {"a100": 1.0}, unit="dollars", efficiency=2.0,
                              verifier_model="smollm2-135m")
    assert (priced.unit, priced.efficiency, priced.model, priced.gpu) == ("dollars", 2.0, "smollm2-135m", "h100")
    assert priced.cost_model is not None and priced.verifier is not None and priced.usd_per_hour == 3.49
    assert priced.prices == {"a100": 1.0} and priced.why_unpriced == "no model to price with was given"
    assert Pricer.for_model("smollm2-135m", "h100", {"h100": 2.0}, unit="dollars").usd_per_hour == 2.0
    plain = Pricer.for_model("smollm2-135m")
    assert plain.usd_per_hour is None and plain.verifier is None and plain.prices == {} and plain.unit == "tokens"
    unknown = Pricer.for_model("no-such-model", "h100")
    assert unknown.cost_model is None and unknown.model == "no-such-model"
    assert unknown.why_unpriced.startswith("model 'no-such-model' on 'h100' cannot be priced: unknown model")
    with pytest.raises(ValueError, match="unknown model 'no-such-model'"):
        Pricer.for_model("no-such-model", "h100", strict=True)
    none = Pricer.for_model(None)
    assert none.cost_model is None and none.why_unpriced == "no model to price with was given"
    with pytest.raises(ValueError) as err:
        Pricer.for_model(None, unit="eflops", strict=True)
    assert str(err.value) == "budget unit eflops needs the model (its architecture prices the work)"
    assert Pricer.for_model(None, unit="samples", strict=True).unit == "samples"
    with pytest.raises(ValueError) as err:
        Pricer.for_model("smollm2-135m", unit="joules")
    assert str(err.value) == "unknown budget unit 'joules'; use one of tokens, eflops, gpu_seconds, dollars, samples"


def test_make_pricer_prices_with_the_model_only_in_units_that_need_it():
    tokens = make_pricer("tokens", "smollm2-135m", "a100", prices={"a100": 1.5})
    assert tokens.cost_model is None and tokens.gpu == "a100" and tokens.prices == {"a100": 1.5}
    assert make_pricer("samples", "smollm2-135m").cost_model is None
    eflops = make_pricer("eflops", "smollm2-135m", "a100", efficiency=3.0, verifier_model="smollm2-135m")
    assert eflops.cost_model is not None and eflops.verifier is not None and eflops.gpu == "a100"
    assert eflops.efficiency == 3.0 and eflops.model == "smollm2-135m"
    assert make_pricer("dollars", "smollm2-135m", "a100", prices={"a100": 1.5}).usd_per_hour == 1.5
    with pytest.raises(ValueError, match="budget unit eflops needs the model"):
        make_pricer("eflops")
    with pytest.raises(ValueError, match="unknown model"):
        make_pricer("gpu_seconds", "no-such-model")


# --- what a solve spent, and what its budget allows -------------------------------------------------


def test_cost_reports_tokens_always_and_every_unit_when_priced():
    usage = Usage(prompt_tokens=20, completion_tokens=30, calls=2, wall_seconds=0.1234567,
                  shapes=(RequestShape(20, 0, (10, 20)),))
    tokens_only = {"tokens": 50, "prompt_tokens": 20, "completion_tokens": 30, "calls": 2, "wall_seconds": 0.123457}
    assert Pricer.for_model(None).cost(usage) == tokens_only
    priced = Pricer.for_model("smollm2-135m", "h100", efficiency=2.0)
    out = priced.cost(usage)
    raw = priced.cost_model.cost_usage(usage)
    assert {k: out[k] for k in tokens_only} == tokens_only
    assert out["eflops"] == pytest.approx(raw.eflops) and out["gpu_seconds"] == pytest.approx(2.0 * raw.seconds)
    assert out["dollars"] == pytest.approx(2.0 * raw.seconds / 3600 * 3.49)
    assert (out["gpu"], out["priced_as"]) == ("h100", "smollm2-135m")
    assert Pricer.for_model("smollm2-135m", "cpu").cost(usage)["dollars"] is None  # no price for a CPU
    empty = priced.cost(Usage())
    assert (empty["eflops"], empty["gpu_seconds"], empty["dollars"]) == (0.0, 0.0, 0.0)


def test_a_token_budget_allows_itself_if_it_covers_one_sample():
    pricer = Pricer.for_model(None)
    assert pricer.allowance(ComputeBudget(1000.7), 10, 1000) == 1000
    with pytest.raises(BudgetError) as err:
        pricer.allowance(ComputeBudget(999), 10, 1000)
    assert str(err.value) == ("a budget of 999 tokens does not cover one sample of up to 1000 tokens; raise the "
                              "budget or lower max_tokens")


def test_a_budget_in_another_unit_allows_the_most_whole_samples_whose_cost_fits():
    # One sample of 100 tokens after a prompt of 10 costs 110 s; k samples 10 + 100 k.
    pricer = _pricer(efficiency=1.0)
    for k in (1, 2, 3, 37, 1000, 100_000):
        assert pricer.allowance(ComputeBudget(10 + 100 * k, "gpu_seconds"), 10, 100) == 100 * k
        assert pricer.allowance(ComputeBudget(10 + 100 * k + 99, "gpu_seconds"), 10, 100) == 100 * k
    assert pricer.allowance(ComputeBudget(1e12, "gpu_seconds"), 10, 100) == 100 * 131071  # the search's ceiling
    assert _pricer(efficiency=2.0).allowance(ComputeBudget(2 * (10 + 100 * 5), "gpu_seconds"), 10, 100) == 500
    # eFLOPs ignore the efficiency (a FLOP count, not a time): k samples cost 10 + 1000 k.
    assert _pricer(efficiency=2.0).allowance(ComputeBudget(10 + 1000 * 4, "eflops"), 10, 100) == 400
    dollars = _pricer(efficiency=1.0, usd_per_hour=3600.0)  # one dollar per GPU-second
    assert dollars.allowance(ComputeBudget(10 + 100 * 6, "dollars"), 10, 100) == 600
    # On two GPUs at once (tensor parallelism) a second of wall time is two GPU-seconds and twice the dollars.
    two = _pricer(cost_model=_Model(gpus=2), usd_per_hour=3600.0)
    assert two.allowance(ComputeBudget(2 * (10 + 100 * 5), "gpu_seconds"), 10, 100) == 500
    assert two.allowance(ComputeBudget(2 * (10 + 100 * 5), "dollars"), 10, 100) == 500
    assert two.allowance(ComputeBudget(10 + 1000 * 4, "eflops"), 10, 100) == 400  # FLOPs are FLOPs
    with pytest.raises(BudgetError) as err:
        pricer.allowance(ComputeBudget(109, "gpu_seconds"), 10, 100)
    assert str(err.value) == ("a budget of 109 gpu_seconds does not cover one sample of up to 100 tokens (110 "
                              "gpu_seconds for None on h100); raise the budget or lower max_tokens")


def test_a_budget_that_needs_a_price_the_pricer_lacks_says_what_to_give():
    with pytest.raises(BudgetError) as err:
        Pricer.for_model("no-such-model").allowance(ComputeBudget(1, "eflops"), 10, 100)
    assert str(err.value).startswith("a budget in eflops needs a cost model, but model 'no-such-model' on 'h100' "
                                     "cannot be priced: ")
    assert str(err.value).endswith("; give a budget in tokens, or open the session with price_as=<model alias or "
                                   "config.json> (tts serve, tts mcp: --price-as)")
    with pytest.raises(BudgetError) as err:
        _pricer(gpu="cpu").allowance(ComputeBudget(1, "dollars"), 10, 100)
    assert str(err.value) == ("no dollar price for GPU 'cpu'; give prices ({'cpu': USD_PER_HOUR}) or a budget "
                              "in gpu_seconds")


# --- an allocator's plan --------------------------------------------------------------------------


def test_a_request_costs_its_samples_tokens_or_price_in_the_plan_unit():
    assert _pricer("samples").request(10, [5, 6, 7]) == 3.0
    assert _pricer("tokens").request(10, [5, 6, 7], cached=4) == 24.0  # generated plus uncached prompt
    model = _Model()
    assert _pricer("eflops", cost_model=model, efficiency=2.0).request(10.0, [5.0, 6.0], cached=4) == 6 + 110
    assert model.asked == [(10, [5, 6], 4)] and all(type(x) is int for x in (10, 5, 6, 4))
    assert _pricer("gpu_seconds", efficiency=2.0).request(10, [5, 6], cached=4) == 2.0 * 17
    assert _pricer("dollars", efficiency=2.0, usd_per_hour=7200.0).request(10, [5, 6], cached=4) == 4.0 * 17
    for unit in ("samples", "tokens", "eflops"):
        assert _pricer(unit).request(10, []) == 0.0


def test_a_recorded_usage_costs_what_it_generated_and_read():
    usage = Usage(prompt_tokens=20, cached_prompt_tokens=5, completion_tokens=30,
                  shapes=(RequestShape(10, 0, (10, 12, 8)), RequestShape(10, 5, ())))
    assert _pricer("samples").usage(usage) == 3.0
    assert _pricer("tokens").usage(usage) == 45.0
    assert _pricer("eflops").usage(usage) == 7.0 and _pricer("gpu_seconds", efficiency=2.0).usage(usage) == 60.0


def test_a_verifier_pass_reads_each_sample_with_its_prompt():
    assert _pricer("tokens").verify(10, [5, 6]) == 0.0  # no verifier model: scores come with generation
    assert _pricer("tokens", verifier=_Model()).verify(10, [5, 6]) == 31.0
    assert _pricer("tokens", verifier=_Model()).verify(10, []) == 0.0
    assert _pricer("samples", verifier=_Model()).verify(10, [5, 6]) == 0.0
    verifier = _Model()
    assert _pricer("gpu_seconds", verifier=verifier, efficiency=2.0).verify(10, [5, 6]) == 2.0 * 31
    assert verifier.asked == [(15, [], 0), (16, [], 0)]


def test_an_option_prices_the_extra_samples_and_a_verifier_pass_when_the_rule_reads_scores():
    pricer = _pricer("tokens", verifier=_Model())
    assert pricer.option("vote", 50, 99.6, 2, 5) == 300.0  # 3 more samples of 100; the prompt is cached
    assert pricer.option("vote", 50, 99.6, 2, 5, cached=10) == 340.0
    assert pricer.option("vote", 50, 99.6, 2, 5, cached=80) == 300.0  # never more cached than the prompt
    assert pricer.option("vote", 50, 0.2, 2, 5) == 3.0  # at least one token a sample
    assert pricer.option("vote", 50, 100, 5, 5) == 0.0 and pricer.option("vote", 50, 100, 6, 5) == 0.0
    assert pricer.option("best_of_n", 50, 100, 2, 5) == 300.0 + 5 * 150  # scores: the verifier reads all n
    assert pricer.option("best_of_n", 50, 100, 5, 5) == 5 * 150.0
    assert _pricer("tokens").option("best_of_n", 50, 100, 2, 5) == 300.0  # no verifier model


def test_defaults_a_caller_leaves_out():
    assert Pricer.for_model(None, unit="tokens", strict=True).unit == "tokens"  # tokens need no model
    default = make_pricer("dollars", "smollm2-135m")
    assert default.gpu == "h100" and default.usd_per_hour == 3.49
    assert make_pricer("samples").unit == "samples" and make_pricer("tokens").unit == "tokens"
    assert _pricer("tokens").request(10, [5, 6, 7]) == 28.0  # nothing cached unless said
    assert Pricer.for_model(None).allowance(ComputeBudget(1000), 10, 1000) == 1000  # exactly one sample fits


def test_a_model_that_cannot_be_priced_is_logged_with_the_reason(caplog):
    with caplog.at_level("INFO", logger="tts.budgets.pricing"):
        pricer = Pricer.for_model("no-such-model", "h100")
    assert [r.getMessage() for r in caplog.records if r.name == "tts.budgets.pricing"] == [pricer.why_unpriced]


# --- a hosted model, priced per token from its provider's table ------------------------------------

# Binary fractions, so that every sum below is exact: a prompt token 2^-20 dollars, a cached one
# 2^-22, a generated one 2^-16. One sample of 64 tokens after a 1024-token prompt costs 2^-10 + 2^-10.
_PRICE = TokenPrice(2.0 ** -20, 2.0 ** -22, 2.0 ** -16, "a provider's table")
_ONE = 2.0 ** -9


def _hosted(price=_PRICE):
    return Pricer("tokens", model="provider/model", token_price=price)


def test_a_hosted_models_usage_is_priced_per_token_with_its_cached_prompt_tokens_cheaper():
    usage = Usage(prompt_tokens=1024, cached_prompt_tokens=256, completion_tokens=64, calls=1)
    out = _hosted().cost(usage)
    assert out == {"tokens": 1088, "prompt_tokens": 1024, "completion_tokens": 64, "calls": 1, "wall_seconds": 0.0,
                   "dollars": 768 * 2.0 ** -20 + 256 * 2.0 ** -22 + 64 * 2.0 ** -16,
                   "priced_as": "provider/model per token (a provider's table)"}
    # A cost model (the model's architecture on a GPU) prices it instead when there is one.
    both = Pricer.for_model("smollm2-135m", "h100")
    both = Pricer(both.unit, both.cost_model, model="smollm2-135m", token_price=_PRICE)
    assert both.cost(usage)["priced_as"] == "smollm2-135m" and "gpu_seconds" in both.cost(usage)


def test_a_dollar_budget_on_a_hosted_model_buys_whole_samples_each_billing_its_whole_prompt():
    pricer = _hosted()
    assert pricer.allowance(ComputeBudget(_ONE, "dollars"), 1024, 64) == 64  # exactly one sample's price
    assert pricer.allowance(ComputeBudget(5 * _ONE + 2.0 ** -30, "dollars"), 1024, 64) == 5 * 64
    # Just short of two: one (a cached prompt token would have made the second fit).
    assert pricer.allowance(ComputeBudget(2 * _ONE - 2.0 ** -22, "dollars"), 1024, 64) == 64
    with pytest.raises(BudgetError) as err:
        pricer.allowance(ComputeBudget(_ONE - 2.0 ** -22, "dollars"), 1024, 64)
    assert str(err.value) == ("a budget of 0.00195289 dollars does not cover one sample of up to 64 tokens "
                              "($0.00195 for provider/model); raise the budget or lower max_tokens")
    free = _hosted(TokenPrice(0.0, 0.0, 0.0, "free"))
    assert free.allowance(ComputeBudget(0.01, "dollars"), 1024, 64) == 65536 * 64  # the cap of every search
    # The table prices dollars only: another unit still needs the model's architecture.
    with pytest.raises(BudgetError, match="^a budget in gpu_seconds needs a cost model, but no model to price with"):
        pricer.allowance(ComputeBudget(1.0, "gpu_seconds"), 1024, 64)


def test_the_deployment_reaches_the_cost_model_from_for_model_and_make_pricer():
    tp2 = {"tensor_parallel": 2}
    assert Pricer.for_model("smollm2-135m", "h100", deployment=tp2).cost_model.tensor_parallel == 2
    assert make_pricer("gpu_seconds", "smollm2-135m", "h100", deployment=tp2).cost_model.tensor_parallel == 2
    assert make_pricer("gpu_seconds", "smollm2-135m", "h100").cost_model.tensor_parallel == 1


def test_a_dollar_budget_of_exactly_k_samples_price_buys_k_samples():
    # $3 per million prompt tokens and $15 per million generated: a sample of 1000 tokens after a
    # 500-token prompt costs $0.0165. Floor division of k such prices by one price gives k - 1 for
    # k = 11, 15, 19, ... (the quotient rounds below k), and of $0.018 by $0.001 gives 17.
    pricer = _hosted(TokenPrice(3e-6, 3e-7, 1.5e-5, "sonnet-like"))
    one = 500 * 3e-6 + 1000 * 1.5e-5
    for k in range(1, 101):
        for budget in (k * one, round(k * one, 6), (k + 1) * one * (1 - 1e-6)):
            assert pricer.allowance(ComputeBudget(budget, "dollars"), 500, 1000) == 1000 * k, budget
    per_mille = _hosted(TokenPrice(0.0, 0.0, 1e-5, "flat"))  # $0.001 for a sample of 100 tokens
    assert [per_mille.allowance(ComputeBudget(k / 1000, "dollars"), 0, 100) for k in (13, 18, 26)] == [1300, 1800, 2600]
