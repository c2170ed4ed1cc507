"""What OpenTelemetry tracing costs a solve (tts.tracing): off (no tracer provider) and on (the SDK
with an in-memory exporter), as ratios in one run, on the scripted backend (no engine time to hide
behind: the worst case for overhead).

    python benchmarks/tracing_overhead.py [--solves 300]

Prints the mean wall time per solve in each mode, on/off, and what the hooks cost while off: the
number of ``tracing.enabled()`` checks a solve makes times the measured cost of one, as a share of
the solve.
"""

from __future__ import annotations

import argparse
import time
import timeit

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from tts import tracing
from tts.backends.scripted import ScriptedGenerator
from tts.session import Session


def _per_solve(session: Session, solves: int, strategy: str) -> float:
    start = time.perf_counter()
    for i in range(solves):
        session.solve(f"What is {i} + 1?", strategy=strategy, n=8)
    return (time.perf_counter() - start) / solves


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--solves", type=int, default=300)
    args = parser.parse_args()
    gen = ScriptedGenerator(default={"42": 0.7, "41": 0.3}, seed=0, model_name="scripted")
    checks = 0
    real_enabled = tracing.enabled

    def counted() -> bool:
        nonlocal checks
        checks += 1
        return real_enabled()

    with Session(generator=gen, max_tokens=64) as session:
        for strategy in ("self_consistency", "beam"):
            _per_solve(session, 20, strategy)  # warm
            off = _per_solve(session, args.solves, strategy)
            tracing.enabled, checks = counted, 0
            _per_solve(session, 50, strategy)
            tracing.enabled = real_enabled
            per_check = min(timeit.repeat(real_enabled, number=10_000, repeat=5)) / 10_000
            exporter = InMemorySpanExporter()
            provider = TracerProvider()
            provider.add_span_processor(SimpleSpanProcessor(exporter))
            trace.set_tracer_provider(provider)
            on = _per_solve(session, args.solves, strategy)
            spans = len(exporter.get_finished_spans()) / args.solves
            trace._TRACER_PROVIDER = None  # off again for the next strategy (OpenTelemetry's tests do the same)
            from opentelemetry.util._once import Once
            trace._TRACER_PROVIDER_SET_ONCE = Once()
            hooks = checks / 50 * per_check
            print(f"{strategy:>16}: off {off * 1e3:7.2f} ms/solve, on {on * 1e3:7.2f} ms/solve "
                  f"({spans:.1f} spans), on/off {on / off:.3f}; hooks while off: {checks / 50:.1f} checks x "
                  f"{per_check * 1e9:.0f} ns = {hooks / off:.4%} of a solve")


if __name__ == "__main__":
    main()
