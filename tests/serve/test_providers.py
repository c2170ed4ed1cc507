"""``tts serve --backend litellm --model anthropic/...``: a hosted model behind the server (LiteLLM's
canned replies: nothing leaves this machine)."""

from __future__ import annotations

import pytest

pytest.importorskip("litellm", reason="LiteLLM is not installed (pip install 'tts-scaling[litellm]'; make test "
                                      "installs it)")

CLAUDE = "anthropic/claude-sonnet-4-5"
CANNED = "Two and three make five.\n\nThe answer is \\boxed{5}."


def test_tts_serve_answers_a_client_from_a_hosted_model(serve):
    """The served name keeps its slashes, and a client asks for it plainly or with a strategy in front."""
    from tts.backends.litellm import LiteLLMGenerator
    from tts.config import LiteLLMBackendConfig

    gen = LiteLLMGenerator(LiteLLMBackendConfig(model=CLAUDE, api_key="sk-test", litellm_params={"mock_response": CANNED}))
    client = serve(gen)
    question = [{"role": "user", "content": "What is 2 + 3?"}]
    plain = client.chat.completions.create(model=CLAUDE, messages=question)
    voted = client.chat.completions.create(model=f"self_consistency-3/{CLAUDE}", messages=question)
    assert plain.choices[0].message.content == CANNED and voted.choices[0].message.content == CANNED
    assert voted.usage.completion_tokens == 3 * 20  # three one-sample requests of LiteLLM's canned usage
    assert CLAUDE in [m.id for m in client.models.list().data]
