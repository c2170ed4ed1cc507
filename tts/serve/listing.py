"""GET /v1/models: the model ids that work with this server's configuration.

The candidates are :func:`tts.serve.routing.listed_models` (the model, and one id per strategy). An
id is listed when the request a client would send with it alone passes every check and a dry run
of its solve reaches the engine (a strategy that refuses the server's budget, or needs a
calibration or a graph file it was not given, stops before). Found once per id, then kept.

The listing is given the server's planner as a function, so it depends on neither the planning
nor the server's state (``create_app`` joins them).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from tts.serve.errors import APIError
from tts.serve.failures import solve_error
from tts.serve.protocol import ChatRequest
from tts.serve.replies import now
from tts.serve.responses import ModelCard
from tts.serve.routing import listed_models

_FORGET_PAST = 4096
"""Ids remembered before the ones that are not candidates are forgotten (a client retrieving many ids)."""


class ModelListing:
    """Which model ids a request may name on this server, and why not the others.

    Args:
        session: The served :class:`~tts.session.Session` (dry runs copy its settings).
        served: The served model name.
        plan: The server's plan of a chat request (:func:`tts.serve.planning.plan_request`).
    """

    def __init__(self, session: Any, served: str, plan: Callable[[ChatRequest], Any]) -> None:
        self._session, self._served, self._plan = session, served, plan
        self._lock = threading.Lock()
        self._why_not: dict[str, str | None] = {}  # model id -> None when it works, else why not
        self.created = now()

    def usable(self, model_id: str) -> str | None:
        """None when a request naming ``model_id`` alone would be served, else why not (one line).
        Blocking (a dry run): call it from a worker thread."""
        with self._lock:
            if model_id not in self._why_not:
                if len(self._why_not) > _FORGET_PAST:
                    listed = set(listed_models(self._served))
                    for k in [k for k in self._why_not if k not in listed]:
                        del self._why_not[k]
                self._why_not[model_id] = self._check(model_id)
            return self._why_not[model_id]

    def listed(self) -> list[str]:
        """The candidate ids that work (blocking, as :meth:`usable`)."""
        return [m for m in listed_models(self._served) if self.usable(m) is None]

    def card(self, model_id: str) -> ModelCard:
        return ModelCard(id=model_id, created=self.created)

    def _check(self, model_id: str) -> str | None:
        from tts.session import Session

        session = self._session
        try:
            p = self._plan(ChatRequest.model_validate(
                {"model": model_id, "messages": [{"role": "user", "content": "What is 1 + 1?"}]}))
        except APIError as exc:
            return exc.message
        probe = Session(generator=_DryRun(session.generator), strategy=session.default_strategy,
                        temperature=session.sampling.temperature, top_p=session.sampling.top_p,
                        max_tokens=session.sampling.max_tokens, prompt=session.template, seed=session.seed,
                        batch_window=0.0, max_workers=1, price_as=session.pricer.model or None, gpu=session.pricer.gpu,
                        prices=session.pricer.prices, strategy_settings=session.strategy_settings)
        try:
            probe.solve(p.jobs[0].question, **p.jobs[0].kwargs)
        except _WouldGenerate:
            return None
        except Exception as exc:  # what the solve would have answered
            return solve_error(exc)[1]
        finally:
            probe.close()
        return None


class _WouldGenerate(Exception):
    """Raised by :class:`_DryRun`: the solve got as far as the engine."""


class _DryRun:
    """The served generator, except that a solve stops at its first engine call (GET
    /v1/models' dry runs); what it can do (prompt counting, confidence stops) is the real one's."""

    def __init__(self, generator: Any) -> None:
        self._generator = generator

    def __getattr__(self, name: str) -> Any:
        return getattr(self._generator, name)

    def generate(self, requests: Any, **kwargs: Any) -> Any:  # kwargs: what a concurrent generator takes (cancel)
        raise _WouldGenerate()

    def close(self) -> None:
        pass
