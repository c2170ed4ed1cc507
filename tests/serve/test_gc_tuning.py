"""tts.serve.gc_tuning: the garbage collector settings that ``tts`` and ServerThread apply at start-up, and a host
process may apply with ``tts.tune_gc()``."""

from __future__ import annotations

import subprocess
import sys

# In a child process: freezing is process-wide, and a test must not freeze pytest's own heap.
_CHILD = """
import atexit, gc, weakref
atexit.register(lambda: print("frozen at exit:", gc.get_freeze_count()))  # runs after tune_gc's
class Cycle: pass
cycle = Cycle(); cycle.me = cycle
collected = []
weakref.finalize(cycle, collected.append, True)
del cycle
import tts
from tts.serve.gc_tuning import YOUNG_THRESHOLD
from tts.serve.server import tune_gc as server_tune_gc
assert tts.tune_gc is server_tune_gc  # one function: the public one is what the server runs
tts.tune_gc()
tts.tune_gc()
print("frozen:", gc.get_freeze_count() > 1000, "garbage collected first:", collected == [True],
      "young threshold:", gc.get_threshold()[0] == YOUNG_THRESHOLD > 700)
"""


def test_tune_gc_collects_garbage_then_freezes_the_rest_raises_the_young_threshold_and_unfreezes_at_exit():
    out = subprocess.run([sys.executable, "-c", _CHILD], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.splitlines() == ["frozen: True garbage collected first: True young threshold: True", "frozen at exit: 0"]
