"""tts.serve.server: the heap freeze that ``tts`` and ServerThread run at start-up."""

from __future__ import annotations

import subprocess
import sys

# In a child process: freezing is process-wide, and a test must not freeze pytest's own heap.
_CHILD = """
import atexit, gc, weakref
atexit.register(lambda: print("frozen at exit:", gc.get_freeze_count()))  # runs after freeze_heap's
class Cycle: pass
cycle = Cycle(); cycle.me = cycle
collected = []
weakref.finalize(cycle, collected.append, True)
del cycle
from tts.serve.server import freeze_heap
freeze_heap()
freeze_heap()
print("frozen:", gc.get_freeze_count() > 1000, "garbage collected first:", collected == [True])
"""


def test_freeze_heap_collects_garbage_first_freezes_the_rest_and_unfreezes_at_exit():
    out = subprocess.run([sys.executable, "-c", _CHILD], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.splitlines() == ["frozen: True garbage collected first: True", "frozen at exit: 0"]
