"""its_hub's particle filtering (run in its_hub's own environment), for benchmarks/side_by_side.py.

Runs its_hub's ``ParticleFiltering`` (``its_hub.core.algorithms.particle_gibbs``, the installed
its_hub version, ``its_hub[lm]==1.2.0`` by ``setup_peers.sh``) with its ``StepGeneration`` and its
``OpenAICompatibleLanguageModel`` against one vLLM OpenAI-compatible server, on every chains
problem at once (``ainfer`` per problem + ``asyncio.gather``), and writes each chosen response,
the elapsed time around the gather, and how many responses there were.

Glue, and why (everything else is its_hub's code, unchanged):

- The PRM: :class:`ChainPRM`, its_hub's ``AbstractProcessRewardModel`` over tts's exact ``chain``
  checker (:func:`chain_prm.its_hub_scores`), the scorer tts uses too; a response's steps are
  aggregated with ``--aggregation`` (tts's verifier aggregation, ``min`` by default).
- The prompt: its_hub's particle filter flattens a conversation into ONE user message
  (``ChatMessages.to_prompt()``: "user: ...\\nassistant: ..." lines; a TODO in its code), so tts's
  few-shot chat would reach the model as text inside one user turn. :class:`ChatLM` (its
  ``OpenAICompatibleLanguageModel`` with one method extended) puts the original conversation back
  in place of that user message before the request is built, so that both sides send the model
  the same chat. ``--flattened`` turns this off (its_hub exactly as shipped).
- Stopping: its_hub stops a particle only when ``stop_token`` appears in its last step or after
  ``max_steps`` + 1 steps, and forces no answer; tts stops a path when its step states an answer,
  and at its depth cap (``max_depth`` = ``max_steps`` + 1) runs with ``force_answer=false`` on the
  side-by-side, so it forces none either. ``--stop-token`` (default "The answer is", the chains
  prompt's answer line) is the nearest its_hub setting to tts's answer check.

    pip install 'its_hub[lm]==1.2.0'      # in a separate virtual environment (setup_peers.sh)
    python its_hub_particle_filtering.py --problems P.json --base-url URL --model NAME --n 4 --out OUT.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parents[1])]  # chain_prm, and tts for its chain checker

import numpy as np
from chain_prm import its_hub_scores
from its_hub.api import AbstractProcessRewardModel
from its_hub.api.types import ChatMessage, ChatMessages
from its_hub.core.algorithms.particle_gibbs import ParticleFiltering
from its_hub.core.lms.openai_lm import OpenAICompatibleLanguageModel
from its_hub.core.lms.step_generation import StepGeneration


def flattened(messages: list[dict]) -> str:
    """The string its_hub's particle filter makes of a conversation (its own ``to_prompt``)."""
    return ChatMessages.from_prompt_or_messages([ChatMessage(m["role"], m["content"]) for m in messages]).to_prompt()


class ChainPRM(AbstractProcessRewardModel):
    """its_hub's process-reward interface over tts's exact chain checker."""

    def __init__(self, question_of: dict[str, str], aggregation: str = "min") -> None:
        self.question_of, self.aggregation = question_of, aggregation
        self.calls = 0

    def score(self, prompt_or_messages, steps):
        self.calls += 1
        responses = [steps] if isinstance(steps, str) else steps
        return its_hub_scores(self.question_of, prompt_or_messages, responses, self.aggregation)

    async def ascore(self, prompt_or_messages, steps):
        return self.score(prompt_or_messages, steps)


class ChatLM(OpenAICompatibleLanguageModel):
    """its_hub's OpenAI-compatible LM, sending the original conversation in place of the flattened one."""

    def __init__(self, conversation_of: dict[str, list[dict]], **kwargs) -> None:
        super().__init__(**kwargs)
        self.conversation_of = conversation_of
        self.requests = 0

    def _prepare_request_data(self, messages, *args, **kwargs):
        self.requests += 1
        first = messages[0]
        content = first.content if isinstance(first, ChatMessage) else first["content"]
        original = self.conversation_of.get(content)
        if original is not None:
            messages = [ChatMessage(m["role"], m["content"]) for m in original] + list(messages[1:])
        return super()._prepare_request_data(messages, *args, **kwargs)


async def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--problems", required=True, help="JSON list of {question, messages} (tts's rendered chat).")
    p.add_argument("--base-url", required=True)
    p.add_argument("--model", required=True)
    p.add_argument("--n", type=int, default=4, help="Particles (its_hub's budget).")
    p.add_argument("--max-steps", type=int, default=9,
                   help="its_hub's max_steps: a particle stops after max_steps + 1 steps (tts: max_depth = this + 1).")
    p.add_argument("--step-token", default="\n\n")
    p.add_argument("--stop-token", default="The answer is")
    p.add_argument("--max-tokens", type=int, default=32, help="Tokens per step request (tts: step_tokens).")
    p.add_argument("--temperature", type=float, default=0.7)
    p.add_argument("--aggregation", default="min", choices=("min", "last", "prod", "mean"))
    p.add_argument("--flattened", action="store_true", help="Send its_hub's flattened prompt, as shipped.")
    p.add_argument("--seed", type=int, default=0, help="Seeds Python's and NumPy's generators (its resampling).")
    p.add_argument("--out", required=True)
    a = p.parse_args()
    random.seed(a.seed)
    np.random.seed(a.seed)
    problems = json.loads(Path(a.problems).read_text())
    prompts = [flattened(pr["messages"]) for pr in problems]
    question_of = {s: pr["question"] for s, pr in zip(prompts, problems, strict=True)}
    conversation_of = {} if a.flattened else {s: pr["messages"] for s, pr in zip(prompts, problems, strict=True)}
    lm = ChatLM(conversation_of, endpoint=a.base_url, api_key="EMPTY", model_name=a.model,
                max_tokens=a.max_tokens, temperature=a.temperature)
    sg = StepGeneration(max_steps=a.max_steps, step_token=a.step_token, stop_token=a.stop_token,
                        temperature=a.temperature)
    prm = ChainPRM(question_of, a.aggregation)
    pf = ParticleFiltering(sg, prm)
    start = time.perf_counter()
    results = await asyncio.gather(*(pf.ainfer(lm, [ChatMessage(m["role"], m["content"]) for m in pr["messages"]],
                                               a.n) for pr in problems))
    elapsed = time.perf_counter() - start
    texts = [r["content"] if isinstance(r, dict) else str(r) for r in results]
    Path(a.out).write_text(json.dumps({"elapsed": elapsed, "responses": texts, "lm_requests": lm.requests,
                                       "prm_calls": prm.calls}))


if __name__ == "__main__":
    asyncio.run(main())
