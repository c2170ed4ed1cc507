"""Fixtures of the server tests."""

from __future__ import annotations

from typing import Any

import openai
import pytest

from tts.serve import ServeConfig, create_app
from tts.serve.server import ServerThread
from tts.session import Session


@pytest.fixture
def serve():
    """``serve(gen, max_tokens=128, **config) -> openai.OpenAI``: ``tts serve`` over ``gen`` on a
    free port, with the operator's default settings and ``config`` (ServeConfig fields) on top,
    and an openai client of it (``config["api_key"]`` as its key); all stopped after the test."""
    running: list[Any] = []

    def start(gen: Any, max_tokens: int = 128, **config: Any) -> openai.OpenAI:
        session = Session(generator=gen, price_as=None, max_tokens=max_tokens, batch_window=0.0)
        server = ServerThread(create_app(session, ServeConfig(model=gen.model_name, **config))).start()
        running.append((session, server))
        return openai.OpenAI(base_url=server.url, api_key=config.get("api_key") or "x", timeout=30, max_retries=0)

    yield start
    for session, server in running:
        server.stop()
        session.close()
