"""One budget type and one pricer for solves, sessions, the server and the allocators."""

from __future__ import annotations

import pytest

from tts.budgets.pricing import BudgetError, ComputeBudget, Pricer, make_pricer


def test_every_caller_shares_the_one_budget_type_and_the_one_pricer():
    import tts
    import tts.session
    from tts.budgets import cross_allocator
    from tts.session import session

    assert cross_allocator.Pricer is session.Pricer is Pricer
    assert tts.session.ComputeBudget is tts.ComputeBudget is ComputeBudget
    with pytest.warns(DeprecationWarning, match="import tts.budgets.pricing.ComputeBudget"):
        assert tts.session.SolveBudget is ComputeBudget  # the old name, for one release


@pytest.mark.parametrize(("given", "expected"), [
    (4000, ComputeBudget(4000, "tokens")), ({"tokens": 4000}, ComputeBudget(4000, "tokens")),
    ({"dollars": 0.01}, ComputeBudget(0.01, "dollars")), ({"eflops": 1e15}, ComputeBudget(1e15, "eflops")),
    ({"gpu_seconds": 2}, ComputeBudget(2, "gpu_seconds")), ("0.5 gpu_seconds", ComputeBudget(0.5, "gpu_seconds")),
    ({"amount": 3, "unit": "dollars"}, ComputeBudget(3, "dollars")), (None, None)])
def test_every_accepted_form_parses(given, expected):
    assert ComputeBudget.parse(given) == expected


def test_a_number_takes_the_unit_given_beside_it_and_bad_forms_list_the_good_ones():
    assert ComputeBudget.parse(0.01, "dollars") == ComputeBudget(0.01, "dollars")
    with pytest.raises(BudgetError, match=r"give a number of tokens, \{'dollars': 0.01\}"):
        ComputeBudget.parse([1, 2])


def test_a_solve_allowance_and_an_allocator_plan_price_the_same_work_alike():
    """Three worst-case samples priced by the allocator's plan (dollars) are exactly what a
    solve's budget of that many dollars allows, so auto and a session agree on a dollar."""
    plan = make_pricer("dollars", "smollm2-135m", "h100")
    solve = Pricer.for_model("smollm2-135m", "h100")
    three = plan.request(22, [100] * 3)
    assert solve.allowance(ComputeBudget(three * 1.0001, "dollars"), 22, 100) == 300
    assert solve.allowance(ComputeBudget(three * 0.9999, "dollars"), 22, 100) == 200
