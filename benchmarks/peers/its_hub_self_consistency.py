"""Self-consistency with its_hub (run in its_hub's own environment), for benchmarks/side_by_side.py.

Reads a JSON file of chat conversations (one per problem), runs its_hub's SelfConsistency on all of
them at once (``ainfer`` + ``asyncio.gather``) against an OpenAI-compatible server, and writes each
chosen response plus the elapsed time. its_hub votes on whatever its projection function returns:
we give it the last number of the response (``\\boxed{...}`` first), so that the vote is over
answers, as tts's is.

    pip install 'its_hub[lm]==1.2.0'      # in a separate virtual environment
    python its_hub_self_consistency.py --messages M.json --base-url URL --model NAME --n 8 --out OUT.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import time

from its_hub import SelfConsistency
from its_hub import OpenAICompatibleLanguageModel

_BOXED = re.compile(r"\\boxed\{([^{}]*)\}")
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


def answer_of(text: str) -> str:
    """The vote key: the last boxed answer, else the last number, else the text."""
    boxed = _BOXED.findall(text or "")
    if boxed:
        return boxed[-1].strip()
    numbers = _NUMBER.findall(text or "")
    return numbers[-1] if numbers else (text or "").strip()


async def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--messages", required=True)
    p.add_argument("--base-url", required=True)
    p.add_argument("--model", required=True)
    p.add_argument("--n", type=int, default=8)
    p.add_argument("--max-tokens", type=int, default=64)
    p.add_argument("--temperature", type=float, default=0.7)
    p.add_argument("--out", required=True)
    a = p.parse_args()
    conversations = json.load(open(a.messages))
    lm = OpenAICompatibleLanguageModel(endpoint=a.base_url, api_key="EMPTY", model_name=a.model,
                                       max_tokens=a.max_tokens, temperature=a.temperature)
    sc = SelfConsistency(consistency_space_projection_func=answer_of)
    start = time.perf_counter()
    results = await asyncio.gather(*(sc.ainfer(lm, messages, a.n) for messages in conversations))
    elapsed = time.perf_counter() - start
    texts = [r["content"] if isinstance(r, dict) else str(r) for r in results]
    json.dump({"elapsed": elapsed, "responses": texts}, open(a.out, "w"))


if __name__ == "__main__":
    asyncio.run(main())
