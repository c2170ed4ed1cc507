"""The usage ledger: a run's recorded usage priced on a GPU."""

from __future__ import annotations

from tts.backends.base import request_usage
from tts.cost.cost_model import CostModel
from tts.cost.ledger import cost_model_for, price_usages, usage_from_json
from tts.types import to_jsonable


def test_usage_survives_the_json_round_trip():
    u = request_usage(120, 64, [30, 40, 50], 1.5, batch_sequences=48)
    assert usage_from_json(to_jsonable(u)) == u


def test_rows_are_priced_per_config_and_sum_their_problems():
    cm = cost_model_for("smollm2-135m", "h100")
    u1, u2 = request_usage(100, 0, [20, 20], 1.0), request_usage(100, 0, [40], 2.0)
    ledger = price_usages([("sc@2", u1), ("sc@2", u2), ("bon@1", u2)], cm)
    assert set(ledger) == {"sc@2", "bon@1"}
    assert ledger["sc@2"].problems == 2 and ledger["sc@2"].wall_seconds == 3.0
    expected = cm.cost_usage(u1).eflops + cm.cost_usage(u2).eflops
    assert abs(ledger["sc@2"].cost.eflops - expected) < 1e-6 * expected
    assert abs(ledger["sc@2"].per_problem.eflops - expected / 2) < 1e-6 * expected


def test_requests_batched_in_one_engine_call_share_the_weight_reads():
    cm: CostModel = cost_model_for("smollm2-135m", "h100")
    alone = cm.cost_usage(request_usage(100, 0, [32] * 4, 0.0))
    batched = cm.cost_usage(request_usage(100, 0, [32] * 4, 0.0, batch_sequences=64))
    # Decode steps read the weights once for all 64 sequences (prefill still reads them once).
    assert batched.weight_bytes < alone.weight_bytes / 8
    assert batched.flops == alone.flops and batched.kv_bytes == alone.kv_bytes


def test_a_request_served_by_another_model_is_priced_on_that_models_architecture():
    from tts.types import RequestShape, Usage

    cm = cost_model_for("smollm2-135m", "h100")
    big = cost_model_for("qwen3-8b", "h100")
    prm_pass = RequestShape(600, 0, (), 0, "qwen3-8b")  # a verifier's prefill on a bigger model
    policy = RequestShape(100, 0, (40, 40), 2)
    ledger = price_usages([("beam@2", Usage(shapes=(policy, prm_pass)))], cm)
    expected = cm.cost_usage(Usage(shapes=(policy,))).eflops + big.cost_usage(Usage(shapes=(prm_pass,))).eflops
    assert abs(ledger["beam@2"].cost.eflops - expected) < 1e-6 * expected
    assert ledger["beam@2"].cost.eflops > 2 * cm.cost_usage(Usage(shapes=(policy, prm_pass))).eflops
