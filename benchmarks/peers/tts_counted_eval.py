"""``tts eval`` with its engine calls recorded, for benchmarks/side_by_side.py.

Runs the ordinary ``tts eval`` command line in this process (``tts_counted_eval.py --calls-out
LOG.json -- eval ARGS...``) after wrapping, at the class level and before anything starts:

- ``vllm.LLM.generate`` (the in-process engine), with :func:`engine_calls.count_generate`, exactly
  as search-and-learn's driver wraps its own engine, so engine calls, generated tokens and the
  span from the first call's start to the last call's end are measured the same way on both sides;
- ``tts.backends.openai.OpenAIGenerator.generate`` (``--backend openai``): calls and the same span,
  since the server's own counters count the requests and tokens.

The log is written when the command ends, whatever its exit status.
"""

from __future__ import annotations

import functools
import json
import runpy
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from engine_calls import CallLog, count_generate


def _count_openai() -> CallLog:
    """Calls and span of the OpenAI backend's ``generate`` (its tokens come from the server)."""
    from tts.backends.openai import OpenAIGenerator

    log = CallLog()
    original = OpenAIGenerator.generate

    @functools.wraps(original)
    def generate(self, requests, *args, **kwargs):
        start = time.perf_counter()
        results = original(self, requests, *args, **kwargs)
        end = time.perf_counter()
        log.calls += 1
        log.prompts += len(requests)
        log.engine_seconds += end - start
        log.first_start = start if log.first_start is None else log.first_start
        log.last_end = end
        return results

    OpenAIGenerator.generate = generate
    return log


def _may_use_vllm(args: list[str]) -> bool:
    """False only for a run whose backend is known to be the OpenAI one (``--backend openai``, or a
    JSON ``--config`` whose backend kind is ``openai``), so its process CPU time is tts's own."""
    if "--backend" in args:
        return args[args.index("--backend") + 1] != "openai"
    if "--config" in args:
        try:
            config = json.loads(Path(args[args.index("--config") + 1]).read_text())
        except (OSError, ValueError):
            return True
        return config.get("backend", {}).get("kind") != "openai"
    return True


def main() -> None:
    argv = sys.argv[1:]
    if len(argv) < 3 or argv[0] != "--calls-out" or "--" not in argv:
        raise SystemExit("usage: tts_counted_eval.py --calls-out LOG.json -- eval ARGS...")
    out, rest = Path(argv[1]), argv[argv.index("--") + 1:]
    logs: dict[str, CallLog] = {"openai": _count_openai()}
    if _may_use_vllm(rest):  # importing vLLM costs seconds of CPU: not for a run that cannot use it
        try:
            import vllm
        except ImportError:
            pass
        else:
            logs["vllm"] = count_generate(vllm.LLM)
    sys.argv = ["tts", *rest]
    try:
        runpy.run_module("tts.cli", run_name="__main__", alter_sys=True)
    finally:
        out.write_text(json.dumps({name: log.report() for name, log in logs.items()}))


if __name__ == "__main__":
    main()
