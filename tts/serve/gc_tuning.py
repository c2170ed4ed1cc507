"""The garbage collector's settings for a long-running process that runs searches.

Process-wide state, so the library never changes it: the ``tts`` command and the server set it
at start-up, and a host process may opt in with ``tts.tune_gc()``. It sits in the server's layer,
the lowest one that applies it (:class:`~tts.serve.server.ServerThread`); it imports nothing of tts.
"""

from __future__ import annotations

import atexit
import gc

YOUNG_THRESHOLD = 10_000
"""New objects before a young collection under :func:`tune_gc` (Python's default is 700)."""
_unfreeze_at_exit = False


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
    :class:`~tts.serve.server.ServerThread` when it starts; the library never does. A host process
    that runs many searches itself (a notebook, an agent) may call ``tts.tune_gc()`` once, after
    its imports and engine start: with Python's default settings a 64-problem, n = 16 search
    triggers about one full collection (``benchmarks/search_batching.py``'s ``batched`` row). At exit the heap is unfrozen, so that
    interpreter shutdown collects it (native extensions such as triton's report what it could not).
    """
    global _unfreeze_at_exit
    gc.collect()
    gc.freeze()
    gc.set_threshold(YOUNG_THRESHOLD, *gc.get_threshold()[1:])
    if not _unfreeze_at_exit:
        atexit.register(gc.unfreeze)
        _unfreeze_at_exit = True
