"""Run the app on a background thread (tests, notebooks, an agent that embeds its own endpoint).

``tts serve`` runs uvicorn in the foreground; :class:`ServerThread` runs the same app on a socket
bound here (port 0: a free one), so the caller knows the address before the first request.
"""

from __future__ import annotations

import atexit
import gc
import socket
import threading
import time
from typing import Any, Self


def tune_gc() -> None:
    """The garbage collector's settings for a long-running tts process (``tts``, ServerThread).

    1. Collect, then freeze every object alive now: a full collection walks every tracked object,
       and a search triggers them as it allocates its nodes (one every run or two of
       ``benchmarks/search_batching.py``, 20 to 40 ms each with math-verify and sympy loaded; an
       engine's objects make each longer). Frozen objects are never walked again (they are still
       freed when their references go); garbage alive now would never be collected once frozen,
       hence the collection first.
    2. Let the youngest generation grow to 10,000 new objects (Python's default: 700) before a
       collection: a search step makes thousands of nodes that all survive it, and walking them
       every 700 allocations cost a search about 10% of its own time (search_batching).

    Process-wide, so it belongs to a process's start-up: ``tts`` runs it at start-up,
    :class:`ServerThread` when it starts; never the library. At exit the heap is unfrozen, so that
    interpreter shutdown collects it (native extensions such as triton's report what it could not).
    """
    global _unfreeze_at_exit
    gc.collect()
    gc.freeze()
    gc.set_threshold(YOUNG_THRESHOLD, *gc.get_threshold()[1:])
    if not _unfreeze_at_exit:
        atexit.register(gc.unfreeze)
        _unfreeze_at_exit = True


YOUNG_THRESHOLD = 10_000
"""New objects before a young collection under :func:`tune_gc` (Python's default is 700)."""
_unfreeze_at_exit = False


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
