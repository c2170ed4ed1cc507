"""One Pricer prices usage in a budget's unit, and one BudgetError says a budget cannot be used.

``tts eval --allocate``, ``auto``, the replays, the breakdown tables and the session all count a
budget with :class:`tts.budgets.pricing.Pricer`; no other module adds up tokens or asks the cost
model for a usage's cost on its own (``tts/cost`` is the cost model itself).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import tts
from tts.budgets.pricing import BudgetError, Pricer, make_pricer
from tts.config import AllocationConfig
from tts.types import RequestShape, Usage

ROOT = Path(tts.__file__).parent
PRICER = ROOT / "budgets" / "pricing.py"


def _prices_usage(node: ast.AST) -> bool:
    """``u.completion_tokens + u.prompt_tokens - u.cached_prompt_tokens`` (a usage in budget tokens), or
    ``.cost_usage(...)`` (a usage in eFLOPs or seconds). OpenAI's ``total_tokens`` is no budget."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "cost_usage":
        return True
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub)):
        attrs = {n.attr for n in ast.walk(node) if isinstance(n, ast.Attribute)}
        return {"completion_tokens", "prompt_tokens", "cached_prompt_tokens"} <= attrs
    return False


@pytest.mark.reads_source
def test_no_module_but_the_pricer_prices_a_usage():
    found = []
    for path in sorted(ROOT.rglob("*.py")):
        if path == PRICER or path.parent == ROOT / "cost":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if _prices_usage(node):
                found.append(f"{path.relative_to(ROOT.parent)}:{node.lineno}")
    assert found == []


def test_allocated_eval_prices_with_the_pricer_efficiency_and_all():
    from tts.eval.allocated import _pricer

    usage = Usage(prompt_tokens=300, completion_tokens=200, cached_prompt_tokens=100, calls=1,
                  shapes=(RequestShape(300, 100, (120, 80)),))
    for unit in ("tokens", "eflops", "gpu_seconds"):
        price = _pricer(AllocationConfig(budget=1.0, unit=unit), "smollm2-135m")
        assert price(usage) == make_pricer(unit, "smollm2-135m").usage(usage) > 0
    assert _pricer(AllocationConfig(budget=1.0), "x")(usage) == 400  # generated + uncached prompt


def test_one_budget_error_everywhere():
    from tts.budgets import allocator
    from tts.eval import allocated
    from tts.session import BudgetError as session_error

    assert allocator.BudgetError is allocated.BudgetError is session_error is BudgetError
    assert issubclass(allocator.BudgetTooSmallError, BudgetError)
    assert issubclass(allocator.BudgetTooSmallError, allocator.AllocationError)  # the CLI's catch still holds
    assert Pricer is make_pricer("tokens").__class__
