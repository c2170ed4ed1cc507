"""optillm's majority voting through its proxy server, for benchmarks/side_by_side.py.

A client, run with optillm's own Python (``pip install optillm==0.4.0`` in a separate virtual
environment; it only needs the ``openai`` package that optillm pulls in). optillm is driven the way
its users drive it: as an OpenAI-compatible proxy (``optillm --base_url <vLLM>/v1``) that reads the
approach from a model-name prefix, here ``majority_voting-<model>``. side_by_side.py starts that
proxy once; this script sends every problem's conversation to it at once (``asyncio.gather``) and
measures the elapsed time around the whole batch, so it counts what a user of optillm waits for:
the proxy hop and the upstream generation.

How the request is shaped (read in optillm 0.4.0's ``server.py`` and
``plugins/majority_voting_plugin.py``):

- the number of samples is the extra body field ``k`` (the plugin's default is 8). The request's own
  ``n`` stays 1: the proxy runs the whole approach ``n`` times and returns ``n`` choices;
- ``temperature`` and ``max_tokens`` are passed on to the upstream call (the plugin's defaults are
  0.6 and 4096, so both are always sent);
- the plugin asks the upstream for the ``k`` samples in ONE request with ``n = k`` (it falls back
  to ``k`` one-sample requests only if that fails).

What is NOT the same as tts or its_hub, so read the numbers with it in mind:

- the conversation is flattened. The proxy turns the messages into a system prompt plus ONE user
  message ``"User: ...\\nAssistant: ...\\nUser: ..."`` (its ``parse_conversation``), and the plugin
  sends ``[system, user]`` with an empty system prompt when there was none. The demo's few-shot chat
  therefore reaches the model as one user turn that quotes the examples, not as alternating turns,
  and the chat template sees an (empty) system message where tts and its_hub send none;
- the vote is over lightly normalised text, not over extracted answers. Each sample is cut by the
  first of a few regular expressions (``answer: X``, ``the answer is X``, ``### X``, a lone letter
  A-E), taking the REST OF THAT LINE, else the whole text; it is then lower-cased, whitespace-joined
  and stripped of trailing punctuation, and identical strings are counted. ``The answer is 8.`` and
  ``the answer is 8`` vote together, but ``The answer is 8. Next...`` on the same line or ``8`` with
  no pattern vote apart. tts extracts and compares answers as values (``0.5`` equals ``1/2``);
- the response is the first sample of the winning group, but the proxy post-processes it
  (``tagged_conversation_to_messages``): a text that contains ``User:`` or ``Assistant:`` is split
  there and only its LAST part is returned. The flattened prompt invites the model to go on with a
  made-up ``User: ...`` turn, so the returned text can lose the answer that won the vote: in the
  8-problem run of side_by_side.py, a 6/8 vote for the correct ``8`` came back as the made-up
  turn's ``... = 4`` and a vote for ``10`` as ``What``. side_by_side.py grades what optillm returns
  (tts's extractor and grader, as for its_hub's responses), i.e. what its user gets;
- optillm reports the completion tokens of all ``k`` samples (the upstream's usage); they are
  written out beside the server's own counters, which side_by_side.py reads for every tool.

    python optillm_majority_voting.py --messages M.json --proxy-url http://127.0.0.1:8000/v1 \\
        --model NAME --n 8 --max-tokens 64 --temperature 0.7 --out OUT.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time

from openai import AsyncOpenAI


async def _solve_all(client: AsyncOpenAI, conversations: list, model: str, a: argparse.Namespace) -> list:
    """Send every conversation at once; the proxy answers each with its majority-voted sample."""
    return await asyncio.gather(*(
        client.chat.completions.create(model=f"majority_voting-{model}", messages=messages, n=1,
                                       temperature=a.temperature, max_tokens=a.max_tokens,
                                       extra_body={"k": a.n})
        for messages in conversations))


async def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--messages", required=True, help="JSON list of conversations, one per problem.")
    p.add_argument("--proxy-url", required=True, help="The optillm proxy's /v1 URL.")
    p.add_argument("--model", required=True, help="The upstream model name (without the approach prefix).")
    p.add_argument("--n", type=int, default=8, help="Samples per problem (optillm's k).")
    p.add_argument("--max-tokens", type=int, default=64)
    p.add_argument("--temperature", type=float, default=0.7)
    p.add_argument("--timeout", type=float, default=3600.0, help="Seconds one request may take.")
    p.add_argument("--out", required=True)
    a = p.parse_args()
    with open(a.messages) as f:
        conversations = json.load(f)
    # A key without the "sk-" prefix makes the proxy use the client it was started with (pointed at
    # --base_url), instead of building a new one from the caller's key.
    client = AsyncOpenAI(base_url=a.proxy_url, api_key="side-by-side", timeout=a.timeout, max_retries=0)
    start = time.perf_counter()
    responses = await _solve_all(client, conversations, a.model, a)
    elapsed = time.perf_counter() - start
    await client.close()
    texts = [r.choices[0].message.content or "" for r in responses]
    tokens = sum((r.usage.completion_tokens or 0) if r.usage else 0 for r in responses)
    with open(a.out, "w") as f:
        json.dump({"elapsed": elapsed, "responses": texts, "completion_tokens": tokens}, f)


if __name__ == "__main__":
    asyncio.run(main())
