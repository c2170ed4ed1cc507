"""The OpenAI-compatible server (``tts serve``): test-time strategies behind /v1/chat/completions.

``create_app(session, config)`` builds the FastAPI app (:mod:`tts.serve.app` lists its modules);
:mod:`tts.serve.routing` reads the strategy from the model name, :mod:`tts.serve.protocol` holds
the request models and :mod:`tts.serve.responses` the reply models, :mod:`tts.serve.policy` what a
client may choose and the caps (the MCP tool, :mod:`tts.serve.mcp`, enforces the same),
:mod:`tts.serve.metrics` the Prometheus metrics. FastAPI is imported only when an app is built.
"""

from tts.serve.config import ServeConfig

__all__ = ["ServeConfig", "create_app"]


def create_app(session, config=None):  # noqa: ANN001, ANN201 - documented in tts.serve.app
    """Build the app (see :func:`tts.serve.app.create_app`)."""
    from tts.serve.app import create_app as _create

    return _create(session, config)
