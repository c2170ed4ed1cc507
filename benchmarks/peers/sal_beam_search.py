"""search-and-learn's beam search, run by its own code, for benchmarks/side_by_side.py.

Runs ``sal.search.beam_search.beam_search`` (huggingface/search-and-learn at the commit that
``benchmarks/peers/setup_peers.sh`` checks out into a folder of its own) on the chains problems,
one problem per call as its ``scripts/test_time_compute.py`` does (its ``Config`` refuses
``search_batch_size != 1`` for beam search), with its own ``vllm.LLM`` object, and writes each
problem's prediction (``pred``: the completion with the best aggregated score), the engine's call
log (:mod:`engine_calls`) and the elapsed time.

What is glue, and why (everything else is search-and-learn's code, unchanged):

- The PRM: :class:`ChainPRM`, search-and-learn's ``PRM`` interface (``score(questions, outputs)``)
  over tts's exact ``chain`` checker (:func:`chain_prm.sal_scores`), the scorer tts uses too.
- The prompt: search-and-learn builds ``[system, user]`` with its own system prompt
  (``build_conv``); the comparison needs tts's chains prompt (four few-shot turns, no system
  message). The driver replaces ``build_conv`` in ``sal.search.beam_search``'s namespace by one that
  returns tts's rendered conversation for the question, plus the partial assistant message exactly
  as search-and-learn appends it. ``custom_chat_template`` is None: the model's own template, as tts.
- The engine: ``vllm.LLM`` built by tts's engine start-up (``tts.backends.vllm._start_engine``), so
  that both sides run the same engine settings (dtype, KV cache, prefix caching on, as
  search-and-learn's script also sets; on CPU no graph compilation and no core reserved for the
  front end). search-and-learn's own script passes ``gpu_memory_utilization`` and
  ``tensor_parallel_size``, which only matter on GPUs.
- Imports: search-and-learn's pins (old vLLM and torch) do not install next to tts, so its code
  runs on the main environment's vLLM. ``sal.utils.score`` (imported by the beam search for
  ``aggregate_scores``) imports its answer-grading helpers, which import ``latex2sympy2`` and
  ``word2number``; these are not installed here and the beam search never calls them, so
  ``benchmarks/peers/sal_stubs/`` gives import-only stand-ins that raise if called.

    PYTHONPATH=<sal>/src:benchmarks/peers/sal_stubs:. python benchmarks/peers/sal_beam_search.py \\
        --problems P.json --model-path ~/.cache/tts/models/smollm2-135m --n 4 --beam-width 2 --out OUT.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parents[1])]

from chain_prm import sal_scores
from engine_calls import count_generate


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--problems", required=True, help="JSON list of {question, messages} (tts's rendered chat).")
    p.add_argument("--model-path", required=True)
    p.add_argument("--n", type=int, default=4)
    p.add_argument("--beam-width", type=int, default=2)
    p.add_argument("--num-iterations", type=int, default=10, help="search-and-learn's depth cap (tts: max_depth).")
    p.add_argument("--max-tokens", type=int, default=32, help="Tokens per step request (tts: step_tokens).")
    p.add_argument("--temperature", type=float, default=0.7)
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--agg-strategy", default="min", choices=("min", "last", "prod"))
    p.add_argument("--max-model-len", type=int, default=2048)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", required=True)
    a = p.parse_args()

    import vllm

    log = count_generate(vllm.LLM)

    # sal/search/__init__.py rebinds the package attribute ``beam_search`` to the function, so the
    # module is read from sys.modules.
    import sal.search  # noqa: F401
    from sal.config import Config
    from sal.models.reward_models import PRM
    sal_beam = sys.modules["sal.search.beam_search"]

    from tts.backends.vllm import _start_engine
    from tts.config import VLLMBackendConfig

    problems = json.loads(Path(a.problems).read_text())
    conversation_of = {pr["question"]: pr["messages"] for pr in problems}

    def build_conv(prompt: str, response: str | None, system_prompt: str) -> list[dict[str, str]]:
        """search-and-learn's ``build_conv`` with tts's chains prompt instead of its system prompt."""
        conversation = [dict(m) for m in conversation_of[prompt]]
        if response != "":  # as search-and-learn: the partial answer, when there is one
            conversation.append({"role": "assistant", "content": response})
        return conversation

    sal_beam.build_conv = build_conv

    class ChainPRM(PRM):
        """search-and-learn's PRM interface over tts's exact chain checker."""

        def load_model_and_tokenizer(self, **model_kwargs):
            return None, None

        def score(self, questions, outputs):
            return sal_scores(questions, outputs)

    config = Config(approach="beam_search", model_path=a.model_path, n=a.n, beam_width=a.beam_width,
                    num_iterations=a.num_iterations, max_tokens=a.max_tokens, temperature=a.temperature,
                    top_p=a.top_p, agg_strategy=a.agg_strategy, search_batch_size=1, lookahead=0,
                    custom_chat_template=None, seed=a.seed)
    llm, on_gpu = _start_engine(VLLMBackendConfig(model=a.model_path, max_model_len=a.max_model_len, seed=a.seed))
    prm = ChainPRM(config)
    start = time.perf_counter()
    preds, tokens = [], []
    for pr in problems:  # datasets.map(beam_search, batched=True, batch_size=1), as its script
        out = sal_beam.beam_search({"problem": [pr["question"]]}, config, llm, prm)
        preds.append(out["pred"][0])
        tokens.append(sum(out["completion_tokens"][0]))
    elapsed = time.perf_counter() - start
    Path(a.out).write_text(json.dumps({"elapsed": elapsed, "preds": preds, "engine": log.report(),
                                       "sal_reported_completion_tokens": sum(tokens), "on_gpu": on_gpu}))


if __name__ == "__main__":
    main()
