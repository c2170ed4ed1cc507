"""Count what an in-process vLLM engine is asked to do, the same way for tts and for a reference.

benchmarks/side_by_side.py runs ``tts eval -s beam`` and search-and-learn's beam search each in a
process of its own, each with its own ``vllm.LLM``. To report engine calls, generated tokens and
the search's wall time identically for both, both processes wrap ``vllm.LLM.generate`` (the class
attribute, before any engine starts) with :func:`count_generate`, which records per call the
prompts, the sequences returned, the tokens generated and its start and end times. The wrapper
adds a few microseconds per call and changes nothing else.

The search's wall time is :attr:`CallLog.span`: from the start of the first ``generate`` call to
the end of the last, so that it covers the search's own work between calls (scoring, pruning,
prompt building) and leaves out engine start-up, data loading, grading and writing results, which
the two programs do differently.
"""

from __future__ import annotations

import functools
import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class CallLog:
    """What the engine was asked to do (totals over every ``generate`` call)."""

    calls: int = 0
    prompts: int = 0
    sequences: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    engine_seconds: float = 0.0
    first_start: float | None = None
    last_end: float | None = None
    per_call: list[dict[str, float]] = field(default_factory=list)

    @property
    def span(self) -> float:
        """Seconds from the first call's start to the last call's end (0 without calls)."""
        if self.first_start is None or self.last_end is None:
            return 0.0
        return self.last_end - self.first_start

    def record(self, start: float, end: float, outputs: Any) -> None:
        """Add one call's outputs (a list of vLLM ``RequestOutput``)."""
        outputs = list(outputs or [])
        prompt_tokens = sum(len(o.prompt_token_ids or ()) for o in outputs)
        completion = sum(len(c.token_ids) for o in outputs for c in o.outputs)
        self.calls += 1
        self.prompts += len(outputs)
        self.sequences += sum(len(o.outputs) for o in outputs)
        self.prompt_tokens += prompt_tokens
        self.completion_tokens += completion
        self.engine_seconds += end - start
        self.first_start = start if self.first_start is None else self.first_start
        self.last_end = end
        self.per_call.append({"prompts": len(outputs), "completion_tokens": completion,
                              "seconds": round(end - start, 4)})

    def report(self) -> dict[str, Any]:
        """The totals and the span, JSON-ready."""
        return {**{k: v for k, v in asdict(self).items() if k not in ("first_start", "last_end")},
                "span_seconds": self.span}

    def write(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.report()))


def count_generate(llm_class: Any) -> CallLog:
    """Wrap ``llm_class.generate`` (``vllm.LLM``) so that every call is recorded; returns the log."""
    log = CallLog()
    original = llm_class.generate

    @functools.wraps(original)
    def generate(self: Any, *args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        outputs = original(self, *args, **kwargs)
        log.record(start, time.perf_counter(), outputs)
        return outputs

    llm_class.generate = generate
    return log
