"""Run the app on a background thread (tests, notebooks, an agent that embeds its own endpoint).

``tts serve`` runs uvicorn in the foreground; :class:`ServerThread` runs the same app on a socket
bound here (port 0: a free one), so the caller knows the address before the first request.
"""

from __future__ import annotations

import socket
import threading
import time
from typing import Any, Self

from tts.serve.gc_tuning import YOUNG_THRESHOLD, tune_gc

__all__ = ["YOUNG_THRESHOLD", "ServerThread", "tune_gc"]


class ServerThread:
    """Serve ``app`` with uvicorn on ``host:port`` from a daemon thread until :meth:`stop`.

    Example:
        >>> with ServerThread(create_app(session)) as server:       # doctest: +SKIP
        ...     openai.OpenAI(base_url=server.url, api_key="x").models.list()
    """

    def __init__(self, app: Any, host: str = "127.0.0.1", port: int = 0, log_level: str = "warning") -> None:
        import uvicorn

        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind((host, port))
        self.host, self.port = self._sock.getsockname()[:2]
        self.server = uvicorn.Server(uvicorn.Config(app, log_level=log_level, access_log=False,
                                                    timeout_graceful_shutdown=2))
        self._thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self._sock]},
                                        name="tts-serve", daemon=True)

    @property
    def url(self) -> str:
        """The OpenAI base URL (``http://host:port/v1``)."""
        return f"http://{self.host}:{self.port}/v1"

    def start(self, timeout: float = 10.0) -> Self:
        tune_gc()  # the app, its session and engine are built by now
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self.server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"the server on {self.host}:{self.port} did not start within {timeout:g} s")
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        self._thread.join(timeout=10)
        self._sock.close()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
