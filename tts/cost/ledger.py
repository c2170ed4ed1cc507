"""The usage ledger: price what a run spent (tokens -> FLOPs, bytes, eFLOPs, GPU-seconds).

Every generator call records a Usage with per-request shapes; every Solution carries the sum of
its calls (verifier calls included, when a strategy uses one). The ledger prices those usages on
a chosen GPU with the Kinetics-style :class:`~tts.cost.cost_model.CostModel`, so a run report
can show predicted GPU cost next to the wall time measured on the machine that ran it.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from tts.cost.cost_model import Cost, CostModel
from tts.types import RequestShape, Usage

logger = logging.getLogger(__name__)


def usage_from_json(data: Mapping[str, Any]) -> Usage:
    """Rebuild a Usage from its JSON form in results.jsonl."""
    shapes = tuple(
        RequestShape(int(s["prompt_tokens"]), int(s["cached_prompt_tokens"]), tuple(int(t) for t in s["completion_tokens"]),
                     int(s.get("batch_sequences", 0)), str(s.get("model", "")))
        for s in data.get("shapes", ())
    )
    return Usage(
        prompt_tokens=int(data.get("prompt_tokens", 0)),
        cached_prompt_tokens=int(data.get("cached_prompt_tokens", 0)),
        completion_tokens=int(data.get("completion_tokens", 0)),
        wall_seconds=float(data.get("wall_seconds", 0.0)),
        calls=int(data.get("calls", 0)),
        shapes=shapes,
        reasoning_tokens=int(data.get("reasoning_tokens", 0)),
    )


@dataclass(frozen=True)
class LedgerEntry:
    """Total and per-problem cost of one strategy config over a run."""

    config: str
    problems: int
    cost: Cost
    wall_seconds: float
    reasoning_tokens: int = 0
    """Of the generated tokens, those inside thinking sections (``Usage.reasoning_tokens``); the
    rest are answer tokens. Priced alike: a reasoning token costs what any generated token costs."""

    @property
    def answer_tokens(self) -> int:
        """Generated tokens outside thinking sections."""
        return self.cost.generated_tokens - self.reasoning_tokens

    @property
    def per_problem(self) -> Cost:
        """Mean cost of one problem."""
        k = max(self.problems, 1)
        c = self.cost
        return Cost(**{f: getattr(c, f) / k for f in ("flops", "bytes", "eflops", "seconds", "param_flops",
                                                      "attention_flops", "weight_bytes", "kv_bytes",
                                                      "param_eflops", "attention_eflops", "gpu_seconds")},
                    generated_tokens=round(c.generated_tokens / k))


def price_usages(items: Iterable[tuple[str, Usage]], cost_model: CostModel) -> dict[str, LedgerEntry]:
    """Price each problem's usage and sum per strategy config.

    Requests served by another model (``RequestShape.model``: a PRM, a judge) are priced on that
    model's architecture on the same hardware; the rest on ``cost_model``'s.

    Args:
        items: (config label, one problem's Usage) pairs, e.g. from a run's result rows.
        cost_model: The policy model + hardware to price on.

    Returns:
        config label -> LedgerEntry.

    Raises:
        ValueError: A request's model has no known architecture (the message says how to fix it).
    """
    others: dict[str, CostModel] = {}

    def price(usage: Usage) -> Cost:
        parts = []
        for shape in usage.shapes:
            cm = cost_model
            if shape.model:
                if shape.model not in others:
                    from tts.cost.architecture import load_architecture

                    others[shape.model] = CostModel(load_architecture(shape.model), cost_model.hardware)
                cm = others[shape.model]
            parts.append(cm.cost_usage(Usage(shapes=(shape,))))
        return Cost.total(parts)

    costs: dict[str, list[Cost]] = {}
    walls: dict[str, float] = {}
    reasoning: dict[str, int] = {}
    for config, usage in items:
        costs.setdefault(config, []).append(price(usage))
        walls[config] = walls.get(config, 0.0) + usage.wall_seconds
        reasoning[config] = reasoning.get(config, 0) + usage.reasoning_tokens
    return {k: LedgerEntry(k, len(v), Cost.total(v), walls[k], reasoning[k]) for k, v in costs.items()}


def cost_model_for(model: str, gpu: str, tensor_parallel: int = 1, quantization: str | None = None) -> CostModel:
    """The cost model of a tts model name (alias, directory, hub id) on a named GPU, deployed over
    ``tensor_parallel`` GPUs with ``quantization``'s weights (:mod:`tts.cost.deployment`;
    :func:`~tts.cost.deployment.deployment_of` reads both from a backend's config).

    Raises:
        ValueError: The architecture or GPU is unknown (the message says how to pass a config.json),
            a quantization the cost model does not price, or tensor parallelism on a GPU without an
            interconnect bandwidth.
    """
    from tts.cost.architecture import load_architecture
    from tts.cost.hardware import get_hardware

    return CostModel(load_architecture(model), get_hardware(gpu), tensor_parallel=tensor_parallel,
                     quantization=quantization)
