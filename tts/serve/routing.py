"""Model names that choose a strategy: ``sc-16/smollm2-135m``, ``beam-4x8/smollm2-135m``, ``auto/...``.

The part before the slash is ``<strategy>[-<n>]`` or ``<strategy>-<width>x<n>`` (beam width M
times candidates N, as in "beam search with M = 4, N = 8"); the strategy is a registered name or a
short alias (``sc``, ``bon``, ``wv``, ``bf``, ``gv``). A voting strategy may add ``+<rule>`` to stop
each request once its vote is settled (``sc-64+horizon``: :class:`tts.config.StopConfig`). The part
after the slash must be the served model.
"""

from __future__ import annotations

import re
from typing import Any

ALIASES = {
    "sc": "self_consistency",
    "bon": "best_of_n",
    "wv": "weighted_vote",
    "bf": "budget_forcing",
    "gv": "generative_verification",
}
"""Short names clients may use in a model name."""

_SPEC = re.compile(r"^(?P<kind>[a-z][a-z0-9_]*?)(?:-(?P<a>\d+)(?:x(?P<b>\d+))?)?(?:\+(?P<stop>[a-z]+))?$")


class RoutingError(ValueError):
    """A model name or strategy the server cannot serve; ``status`` is the HTTP status to answer."""

    def __init__(self, message: str, status: int = 400, param: str = "model") -> None:
        super().__init__(message)
        self.status = status
        self.param = param


def strategy_spec(text: str) -> dict[str, Any]:
    """A strategy config dict from ``sc-16``, ``beam-4x8``, ``sc-64+horizon``, ``self_consistency`` or ``auto``.

    Raises:
        RoutingError: Not of that form, or no such strategy (404, listing the registered ones).
    """
    from tts.registry import STRATEGIES

    m = _SPEC.match(text.strip().lower())
    if m is None:
        raise RoutingError(f"cannot read a strategy from {text!r}; write <strategy>[-<n>] or <strategy>-<width>x<n>, "
                           "e.g. sc-16 or beam-4x8", 404)
    kind = ALIASES.get(m["kind"], m["kind"])
    if kind not in STRATEGIES.names():
        raise RoutingError(f"unknown strategy {m['kind']!r} in {text!r}; use one of "
                           f"{', '.join(sorted(set(STRATEGIES.names()) | set(ALIASES)))}", 404)
    spec: dict[str, Any] = {"kind": kind}
    if m["b"] is not None:
        spec.update(beam_width=int(m["a"]), n=int(m["b"]))
    elif m["a"] is not None:
        spec["n"] = int(m["a"])
    if m["stop"] is not None:
        from tts.config import VOTE_STOP_RULES, stop_refusal, stopping_strategies

        if kind not in stopping_strategies():
            raise RoutingError(f"{text!r}: {stop_refusal(kind)}", 404)
        if m["stop"] not in VOTE_STOP_RULES:
            raise RoutingError(f"{text!r}: unknown stop rule {m['stop']!r}; use one of {', '.join(VOTE_STOP_RULES)} "
                               "(e.g. sc-64+horizon)", 404)
        spec["stop"] = {"rule": m["stop"]}
    return spec


def route(model: str, served: str, default_strategy: str) -> dict[str, Any]:
    """The strategy config dict that a request's ``model`` names.

    Raises:
        RoutingError: 404 for a model this server does not serve or an unknown strategy.
    """
    if not isinstance(model, str) or not model.strip():
        raise RoutingError(f"model is required; use {served!r} or <strategy>/{served}, e.g. sc-16/{served}")
    name = model.strip()
    if name == served:
        return strategy_spec(default_strategy)
    # A strategy name has no slash, but the served name may have one (a hub id, "Qwen/Qwen2.5-1.5B"),
    # so the strategy ends at the first slash.
    head, sep, tail = name.partition("/")
    if not sep or tail != served:
        raise RoutingError(f"model {model!r} is not served here; this server serves {served!r}: use {served!r} or "
                           f"<strategy>/{served}, e.g. sc-16/{served} (GET /v1/models lists them)", 404)
    return strategy_spec(head)


def listed_models(served: str) -> list[str]:
    """The candidate model ids of GET /v1/models: the model, and one per registered strategy.

    The server lists those of them that work with its configuration (its budget cap, the
    strategies, calibrations and graphs its operator allowed): see ``create_app``'s dry runs.
    """
    from tts.registry import STRATEGIES

    short = {v: k for k, v in ALIASES.items()}
    ids = [served]
    for name in STRATEGIES.names():
        head = short.get(name, name)
        if name in ("beam", "dvts"):
            head += "-4x8"
        elif name in ("self_consistency", "best_of_n", "weighted_vote"):
            head += "-8"
        ids.append(f"{head}/{served}")
    return ids
